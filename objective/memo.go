package objective

import (
	"fmt"
	"hash/fnv"
	"sync"
)

// bodyKey identifies a batch of synthetic chat bodies: they are a pure
// function of these fields.
type bodyKey struct {
	model                       string
	level, repeat, n, maxTokens int
	promptTokens                int
	ignoreEOS, reuse            bool
}

// bodyMemo holds built bodies (read only once built); a handful of
// workloads' worth.
var bodyMemo = struct {
	sync.Mutex
	m map[bodyKey][][]byte
}{m: map[bodyKey][][]byte{}}

const maxMemoBatches = 256

// memoBodies returns the bodies of k, building them once with build.
func memoBodies(k bodyKey, build func() ([][]byte, error)) ([][]byte, error) {
	bodyMemo.Lock()
	b, ok := bodyMemo.m[k]
	bodyMemo.Unlock()
	if ok {
		return b, nil
	}
	b, err := build()
	if err != nil {
		return nil, err
	}
	bodyMemo.Lock()
	if len(bodyMemo.m) >= maxMemoBatches {
		clear(bodyMemo.m)
	}
	bodyMemo.m[k] = b
	bodyMemo.Unlock()
	return b, nil
}

// gateKey identifies a set of quality-gate requests.
type gateKey struct {
	model        string
	nJSON, nTool int
}

var gateMemo = struct {
	sync.Mutex
	m map[gateKey][]gateRequest
}{m: map[gateKey][]gateRequest{}}

// memoGates is gateRequests built once per model and size (the requests
// and their checks are read only).
func memoGates(model string, nJSON, nTool int) ([]gateRequest, error) {
	k := gateKey{model, nJSON, nTool}
	gateMemo.Lock()
	defer gateMemo.Unlock()
	if g, ok := gateMemo.m[k]; ok {
		return g, nil
	}
	g, err := gateRequests(model, nJSON, nTool)
	if err != nil {
		return nil, err
	}
	if len(gateMemo.m) >= maxMemoBatches {
		clear(gateMemo.m)
	}
	gateMemo.m[k] = g
	return g, nil
}

// sourceKey identifies a batch of requests made by a workload's source
// (workload.chat.source): they are a pure function of the source, the
// workload fields it reads, the level, the repeat, the count and the
// output cap, so a search that sends the same batch to every config builds
// it once. source is those fields as JSON; a dataset is named by its path
// (read once per process in practice: a study's file does not change under
// a running search).
type sourceKey struct {
	model, source               string
	level, repeat, n, maxTokens int
}

// sourceBatch is one built batch: the requests and their bodies (read only).
type sourceBatch struct {
	reqs   []ChatRequest
	bodies [][]byte
}

var sourceMemo = struct {
	sync.Mutex
	m map[sourceKey]*sourceBatch
}{m: map[sourceKey]*sourceBatch{}}

// memoSource returns the batch of k, building it once with build.
func memoSource(k sourceKey, build func() (*sourceBatch, error)) (*sourceBatch, error) {
	sourceMemo.Lock()
	b, ok := sourceMemo.m[k]
	sourceMemo.Unlock()
	if ok {
		return b, nil
	}
	b, err := build()
	if err != nil {
		return nil, err
	}
	sourceMemo.Lock()
	if len(sourceMemo.m) >= maxMemoBatches {
		clear(sourceMemo.m)
	}
	sourceMemo.m[k] = b
	sourceMemo.Unlock()
	return b, nil
}

// reuseKey identifies PrefixReuse of a batch sent after a history of
// batches (a hash chain of their keys, in the order they were sent): the
// result depends on nothing else.
type reuseKey struct {
	history uint64
	batch   sourceKey
}

var reuseMemo = struct {
	sync.Mutex
	m map[reuseKey][2]int
}{m: map[reuseKey][2]int{}}

const maxMemoReuse = 1 << 12

// prefixReuser is PrefixReuse over a run's successive source batches,
// memoised across runs that send the same batches in the same order: the
// prompt words are split and hashed only the first time a history is seen.
type prefixReuser struct {
	history uint64
	sent    []*sourceBatch
	// seen holds the prefixes sent so far, once a batch missed the memo
	// (nil until then: the history's batches are replayed into it).
	seen map[uint64]bool
}

// add records b (with key k) as sent and returns PrefixReuse's reusable
// and total words for it.
func (p *prefixReuser) add(k sourceKey, b *sourceBatch) (reusable, total int) {
	rk := reuseKey{p.history, k}
	reuseMemo.Lock()
	r, ok := reuseMemo.m[rk]
	reuseMemo.Unlock()
	if !ok && p.seen == nil {
		p.seen = map[uint64]bool{}
		for _, old := range p.sent {
			PrefixReuse(old.reqs, p.seen)
		}
	}
	if p.seen != nil {
		r[0], r[1] = PrefixReuse(b.reqs, p.seen)
	}
	if !ok {
		reuseMemo.Lock()
		if len(reuseMemo.m) >= maxMemoReuse {
			clear(reuseMemo.m)
		}
		reuseMemo.m[rk] = r
		reuseMemo.Unlock()
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%q|%q|%d|%d|%d|%d", p.history, k.model, k.source, k.level, k.repeat, k.n, k.maxTokens)
	p.history = h.Sum64()
	p.sent = append(p.sent, b)
	return r[0], r[1]
}

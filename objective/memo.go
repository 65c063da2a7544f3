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

// memo holds values that are pure functions of their keys (read only once
// built), process-wide; it is cleared when it holds limit of them.
type memo[K comparable, V any] struct {
	mu    sync.Mutex
	m     map[K]V
	limit int
}

func newMemo[K comparable, V any](limit int) *memo[K, V] {
	return &memo[K, V]{m: map[K]V{}, limit: limit}
}

func (c *memo[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *memo[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.limit {
		clear(c.m)
	}
	c.m[k] = v
}

// load returns the value of k, building it with build the first time.
func (c *memo[K, V]) load(k K, build func() (V, error)) (V, error) {
	if v, ok := c.get(k); ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return v, err
	}
	c.put(k, v)
	return v, nil
}

// maxMemoBatches: a handful of workloads' worth of batches.
const maxMemoBatches = 256

// bodyMemo holds built bodies.
var bodyMemo = newMemo[bodyKey, [][]byte](maxMemoBatches)

// gateKey identifies a set of quality-gate requests.
type gateKey struct {
	model        string
	nJSON, nTool int
}

var gateMemo = newMemo[gateKey, []gateRequest](maxMemoBatches)

// memoGates is gateRequests built once per model and size (the requests
// and their checks are read only).
func memoGates(model string, nJSON, nTool int) ([]gateRequest, error) {
	return gateMemo.load(gateKey{model, nJSON, nTool}, func() ([]gateRequest, error) {
		return gateRequests(model, nJSON, nTool)
	})
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

var sourceMemo = newMemo[sourceKey, *sourceBatch](maxMemoBatches)

// reuseKey identifies PrefixReuse of a batch sent after a history of
// batches (a hash chain of their keys, in the order they were sent): the
// result depends on nothing else.
type reuseKey struct {
	history uint64
	batch   sourceKey
}

const maxMemoReuse = 1 << 12

var reuseMemo = newMemo[reuseKey, [2]int](maxMemoReuse)

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
	r, ok := reuseMemo.get(rk)
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
		reuseMemo.put(rk, r)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%q|%q|%d|%d|%d|%d", p.history, k.model, k.source, k.level, k.repeat, k.n, k.maxTokens)
	p.history = h.Sum64()
	p.sent = append(p.sent, b)
	return r[0], r[1]
}

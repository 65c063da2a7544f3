package objective

import "sync"

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

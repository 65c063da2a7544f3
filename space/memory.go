package space

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// Memory is the study's KV-capacity hint (the memory: section), in KV-token
// units, taken from one startup log and the seed's measured slopes.
//
// The model (ref §2 Pool size when unset; seed 000's startup logs): the
// memory left after weights is R(mf) = ref.kv_tokens + ref.state_slots *
// per_state_slot + (mf - ref.mf) * 100 * per_mem_fraction_point KV tokens.
// Each state slot takes per_state_slot of it; speculative decoding takes
// speculative_kv_tokens plus per_speculative_state for each intermediate
// state (min(requested, slots // ratio) x draft tokens). An auto-sized pool
// gets R * r/(1+r) with r = --mamba-full-memory-ratio (0.9), divided by
// per_state_slot (x (1 + draft/ratio) with speculative decoding).
type Memory struct {
	RefKVTokens         int     // reference.kv_tokens
	RefMemFraction      float64 // reference.mem_fraction_static
	RefStateSlots       int     // reference.state_slots
	PerStateSlot        float64 // kv_tokens_per_state_slot
	PerMemFractionPoint float64 // kv_tokens_per_mem_fraction_point (per 0.01)
	SpecFixed           float64 // speculative_kv_tokens
	PerSpecState        float64 // kv_tokens_per_speculative_state
}

func (m Memory) known() bool { return m.RefKVTokens > 0 }

// Facts are what a startup log said about a launched config.
type Facts struct {
	KVTokens           int // KV Cache is allocated ... #tokens / max_total_num_tokens
	MaxRunningRequests int // max_running_requests=... (per DP worker)
	StateSlots         int // Mamba Cache is allocated. max_mamba_cache_size: ...; 0 if not seen
}

// Observe feeds the facts a launched config's startup log reported back
// into the predictions: later Resolve calls return the observed values for
// the same memory-relevant flags, correct the memory hint by the nearest
// observation's residual, and learn a state ratio that differs from the
// rule. Safe for concurrent use. Params that do not resolve are ignored.
func (s *Study) Observe(p Params, kvTokens, maxRunning int) {
	_ = s.ObserveFacts(p, Facts{KVTokens: kvTokens, MaxRunningRequests: maxRunning})
}

// ObserveFacts is Observe with the state-pool size too.
func (s *Study) ObserveFacts(p Params, f Facts) error {
	c, err := s.Resolve(p)
	if err != nil {
		return err
	}
	e := s.state(s.view(c.Flags))
	pred := c.Predicted
	slots := f.StateSlots
	if slots == 0 {
		slots = pred.StateSlots
	}
	o := observation{key: memKey(s, c.Flags), kv: f.KVTokens, running: f.MaxRunningRequests, slots: slots}
	o.x = s.features(&e, slots, pred.RequestedMaxRunningRequests/e.attnDP, pred.StateRatio)
	s.learn.add(o)
	if s.Hybrid && slots > 0 && f.MaxRunningRequests > 0 && e.requested > 0 {
		s.learn.learnRatio(&e, slots, e.requested/e.attnDP, f.MaxRunningRequests, pred.StateRatio)
	}
	return nil
}

// observation is one launched config's facts.
type observation struct {
	key     string
	x       memX
	kv      int
	running int
	slots   int
}

// memX are the memory-model inputs of a config.
type memX struct {
	mf      float64
	slots   float64
	spec    bool
	interSt float64 // intermediate speculative states
}

type learner struct {
	mu     sync.Mutex
	obs    []observation
	ratios map[string]int
}

func newLearner() *learner { return &learner{ratios: map[string]int{}} }

func (l *learner) add(o observation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.obs = append(l.obs, o)
}

// memIrrelevant are flags that do not change memory sizing.
var memIrrelevant = []string{"--model-path", "--served-model-name", "--reasoning-parser", "--tool-call-parser",
	"--enable-metrics", "--api-key", "--log-level", "--trust-remote-code", "--random-seed", "--enable-cache-report",
	"--stream-response-default-include-usage", "--disable-cuda-graph"}

// memKey identifies configs whose memory sizing is the same.
func memKey(s *Study, flags []string) string {
	v := s.view(flags)
	var parts []string
	for name, vals := range v {
		if !slices.Contains(memIrrelevant, name) {
			parts = append(parts, name+"="+strings.Join(vals, ","))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func ratioKey(e *engineState) string {
	return fmt.Sprintf("radix=%v strategy=%s overlap=%v", e.radix, e.strategy, e.overlap)
}

// ratio is the state ratio for e: learned from startup logs when one
// contradicted the rule, else the rule (ref §2 Ratio).
func (l *learner) ratio(e *engineState) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.ratios[ratioKey(e)]; ok {
		return r
	}
	return e.stateRatio()
}

// learnRatio infers the ratio from an observed cap.
func (l *learner) learnRatio(e *engineState, slots, perWorker, observed, predictedRatio int) {
	if observed >= perWorker {
		if slots/predictedRatio >= perWorker {
			return // consistent: no cap predicted, none seen
		}
		// No cap seen although one was predicted: the ratio is at most slots // perWorker.
		if r := slots / perWorker; r >= 1 {
			l.mu.Lock()
			l.ratios[ratioKey(e)] = r
			l.mu.Unlock()
		}
		return
	}
	if slots/predictedRatio == observed {
		return
	}
	for r := 1; r <= 16; r++ {
		if slots/r == observed {
			l.mu.Lock()
			l.ratios[ratioKey(e)] = r
			l.mu.Unlock()
			return
		}
	}
}

// exactRunning returns an observed max running requests for the same memory
// sizing.
func (l *learner) exactRunning(s *Study, c *Config) (int, bool) {
	key := memKey(s, c.Flags)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.obs) - 1; i >= 0; i-- {
		if l.obs[i].key == key && l.obs[i].running > 0 {
			return l.obs[i].running, true
		}
	}
	return 0, false
}

// features computes the memory-model inputs.
func (s *Study) features(e *engineState, slots, perWorker, ratio int) memX {
	x := memX{mf: e.memFrac, slots: float64(slots), spec: e.spec != ""}
	if !e.memFracSet {
		x.mf = s.Memory.RefMemFraction
	}
	if x.spec && ratio > 0 {
		n := slots / ratio
		if perWorker > 0 {
			n = min(perWorker, n)
		}
		x.interSt = float64(n * max(e.draft, 1))
	}
	return x
}

// hintKV is the memory hint's prediction for x (0 when there is no hint).
func (m Memory) hintKV(x memX) float64 {
	if !m.known() {
		return 0
	}
	kv := m.rest(x.mf) - x.slots*m.PerStateSlot
	if x.spec {
		kv -= m.SpecFixed + m.PerSpecState*x.interSt
	}
	return kv
}

// rest is R(mf): KV tokens plus state slots' share at memory fraction mf.
func (m Memory) rest(mf float64) float64 {
	return float64(m.RefKVTokens) + float64(m.RefStateSlots)*m.PerStateSlot + (mf-m.RefMemFraction)*100*m.PerMemFractionPoint
}

// kvTokens predicts KV tokens, and the pool size when auto.
func (l *learner) kvTokens(s *Study, c *Config, e *engineState, slots int, auto bool, perWorker, ratio int) (kv, autoSlots int) {
	key := memKey(s, c.Flags)
	l.mu.Lock()
	obs := slices.Clone(l.obs)
	l.mu.Unlock()
	for i := len(obs) - 1; i >= 0; i-- {
		if obs[i].key == key && obs[i].kv > 0 {
			return obs[i].kv, obs[i].slots
		}
	}
	m := s.Memory
	if !m.known() || (s.Hybrid && m.PerStateSlot <= 0) {
		return 0, 0
	}
	if auto {
		mf := e.memFrac
		if !e.memFracSet {
			mf = m.RefMemFraction
		}
		budget := m.rest(mf) * e.fullRatio / (1 + e.fullRatio)
		per := m.PerStateSlot
		if e.spec != "" && ratio > 0 {
			per *= 1 + float64(max(e.draft, 1))/float64(ratio)
		}
		slots = int(budget / per)
		autoSlots = slots
	}
	x := s.features(e, slots, perWorker, ratio)
	pred := m.hintKV(x)
	// Correct by the residual of the nearest observation (same speculative
	// mode first), so a hint from another machine converges to this one.
	best, bestD := -1, math.Inf(1)
	for i, o := range obs {
		if o.kv <= 0 {
			continue
		}
		d := math.Abs(o.x.mf-x.mf)*100 + math.Abs(o.x.slots-x.slots)/64 + math.Abs(o.x.interSt-x.interSt)/64
		if o.x.spec != x.spec {
			d += 1000
		}
		if d < bestD {
			best, bestD = i, d
		}
	}
	if best >= 0 {
		pred += float64(obs[best].kv) - m.hintKV(obs[best].x)
	}
	return int(math.Round(pred)), autoSlots
}

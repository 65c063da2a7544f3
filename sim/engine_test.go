package sim

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"
)

// TestEngineQueueing: at most the effective max running requests run at
// once; the rest wait in the queue and still complete.
func TestEngineQueueing(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	_, pl := resolveArgv(t, p, seedConfigs[6].argv) // quad-ep4-cache-state128: 25 running
	if pl.EffectiveMRR != 25 {
		t.Fatalf("effective mrr %d", pl.EffectiveMRR)
	}
	e := NewEngine(p, pl, nil, 200, io.Discard, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	seqs := make([]*Seq, 40)
	for i := range seqs {
		seqs[i] = &Seq{Prompt: 100, Limit: 16, PromptKey: uint64(i)}
		if err := e.Submit(seqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	maxRunning := 0
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		st := e.Snapshot()
		maxRunning = max(maxRunning, st.Running)
		done := 0
		for _, s := range seqs {
			if s.Done() {
				done++
			}
		}
		if done == len(seqs) {
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	for i, s := range seqs {
		if !s.Done() || s.Err() != nil || s.Gen() != 16 || s.Finish() != "length" {
			t.Fatalf("seq %d: done %v err %v gen %d finish %q", i, s.Done(), s.Err(), s.Gen(), s.Finish())
		}
	}
	if maxRunning > 25 || maxRunning < 20 {
		t.Errorf("max running %d, want <= 25 and near it", maxRunning)
	}
}

// TestEngineCrashWhenRunningOver: the state-pool-128 rule crashes the
// engine once more than N requests run, failing those in flight.
func TestEngineCrashWhenRunningOver(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	a, pl := resolveArgv(t, p, seedConfigs[3].argv)
	rules, err := MatchFaults(p.Faults, pl.Facts(a))
	if err != nil {
		t.Fatal(err)
	}
	crashed := make(chan string, 1)
	e := NewEngine(p, pl, rules, 200, io.Discard, func(r string) { crashed <- r })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	// 16 at once is fine (C16 passed in the seed).
	run := func(n int) []*Seq {
		seqs := make([]*Seq, n)
		for i := range seqs {
			seqs[i] = &Seq{Prompt: 50, Limit: 8, PromptKey: uint64(i)}
			e.Submit(seqs[i])
		}
		return seqs
	}
	waitAll := func(seqs []*Seq) {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			n := 0
			for _, s := range seqs {
				if s.Done() {
					n++
				}
			}
			if n == len(seqs) {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatal("requests did not finish")
	}
	s16 := run(16)
	waitAll(s16)
	for _, s := range s16 {
		if s.Err() != nil {
			t.Fatalf("C16 failed: %v", s.Err())
		}
	}
	s64 := run(64)
	waitAll(s64)
	select {
	case <-crashed:
	case <-time.After(5 * time.Second):
		t.Fatal("no crash at 64 running")
	}
	failed := 0
	for _, s := range s64 {
		if s.Err() != nil {
			failed++
		}
	}
	if failed == 0 || !e.Crashed() {
		t.Errorf("failed %d, crashed %v", failed, e.Crashed())
	}
	if err := e.Submit(&Seq{Prompt: 1, Limit: 1}); err == nil {
		t.Error("submit after crash accepted")
	}
}

// TestColdShapeFollowsRunningBatch: a batch shape is cold until a batch of
// that size ran, however its requests arrived. The make-demo case: a C16
// warm-up whose second half reached the server while the first half's
// prefill step ran (a busy machine staggers the client's sends) decoded 16
// together, yet the simulator, which counted requests in flight at
// submission and did not see the ones inside that prefill step, charged
// the first-time cost to the measured repeat (C16 3,715 tok/s against
// about 19,000; the trial was pruned on it).
func TestColdShapeFollowsRunningBatch(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	_, pl := resolveArgv(t, p, seedConfigs[5].argv) // quad-ep4: 64 running
	e := NewEngine(p, pl, nil, 1, io.Discard, nil)
	key := uint64(0)
	submit := func(n int, at float64) []*Seq {
		out := make([]*Seq, n)
		for i := range out {
			key++
			out[i] = &Seq{Prompt: 262, Limit: 64, PromptKey: key}
			e.submitAt(out[i], at, at, 0)
		}
		return out
	}
	// drive runs the scheduler as Engine.Run does, on a virtual clock,
	// until seqs are done; during, when set, runs in the middle of the
	// first step. It returns the most requests decoding at once and the
	// longest step.
	drive := func(seqs []*Seq, during func(mid float64)) (maxRunning int, longest float64) {
		e.mu.Lock()
		defer e.mu.Unlock()
		now := e.simT
		for {
			done := true
			for _, s := range seqs {
				done = done && s.Done()
			}
			if done {
				return maxRunning, longest
			}
			st := e.decide(now, 0)
			switch st.kind {
			case stepWait:
				now = max(now, st.until)
			case stepRun:
				if during != nil {
					during(e.simT + st.dur/2)
					during = nil
				}
				e.simT += st.dur
				now = e.simT
				st.apply()
				maxRunning = max(maxRunning, len(e.running))
				longest = max(longest, st.dur)
			default:
				t.Fatalf("step kind %d with requests in flight", st.kind)
			}
		}
	}
	cold := p.Perf.ColdPrefillS
	// A gate at concurrency 8 compiles the shapes up to 8.
	if _, longest := drive(submit(8, e.simT), nil); longest < cold {
		t.Fatalf("first wave of 8: longest step %.2f s, want the cold penalty (%.1f s)", longest, cold)
	}
	// The C16 warm-up: 8 now, 8 more while their prefill step runs.
	first := submit(8, e.simT)
	var second []*Seq
	together, longest := drive(first, func(mid float64) { second = submit(8, mid) })
	t2, l2 := drive(second, nil)
	together, longest = max(together, t2), max(longest, l2)
	if together != 16 {
		t.Fatalf("warm-up decoded %d together, want 16", together)
	}
	if longest < cold {
		t.Errorf("warm-up ran a batch of 16 for the first time in %.2f s at most, want the cold penalty (%.1f s)", longest, cold)
	}
	// The measured repeat: 16 at once, a shape the warm-up ran.
	if _, longest := drive(submit(16, e.simT), nil); longest >= cold {
		t.Errorf("measured repeat after a warm-up that decoded 16 together: a %.2f s step, want no cold penalty (%.1f s)", longest, cold)
	}
}

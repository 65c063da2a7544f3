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

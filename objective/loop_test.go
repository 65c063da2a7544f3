package objective

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// fakeLoop answers every request after a fixed TTFT and latency with 10
// tokens; it fails the loop with err at call failAt (0: never).
type fakeLoop struct {
	calls  int
	failAt int
	err    error
	bodies [][][]byte
}

func (f *fakeLoop) ClosedLoop(_ context.Context, bodies [][]byte, conc int, _ time.Duration, _ bool) (LoopResult, error) {
	f.calls++
	f.bodies = append(f.bodies, bodies)
	lr := LoopResult{Duration: 2 * time.Second}
	for i := range bodies {
		ok := f.calls != f.failAt || i == 0
		rec := RequestRecord{OK: ok, TTFT: 0.1 + 0.01*float64(i%3), Latency: 1, OutputTokens: 10, Chunks: 13}
		if !ok {
			rec.Error, rec.OutputTokens = "unexpected EOF", 0
		}
		lr.Exchanges = append(lr.Exchanges, Exchange{Record: rec, ITLs: []float64{0.05, 0.05}})
		lr.Issued++
		if ok {
			lr.Completed++
		} else {
			lr.Failed++
		}
		lr.Tokens += rec.OutputTokens
	}
	if f.calls == f.failAt {
		return lr, f.err
	}
	return lr, nil
}

func TestRunLoop(t *testing.T) {
	on := true
	w := Workload{Kind: "chat", Chat: ChatSpec{Concurrency: []int{1, 4}, Requests: []int{2, 8}, MaxTokens: 10, Repeats: 2, Warmup: &on}}
	f := &fakeLoop{}
	res, err := RunLoop(context.Background(), f, "m", w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Per level: a warm-up, then 2 repeats.
	if f.calls != 6 || len(res.Points) != 4 || len(res.Warmup) != 2 || !res.Audit.OK {
		t.Fatalf("%d loops, %d points, %d warm-ups, audit %+v", f.calls, len(res.Points), len(res.Warmup), res.Audit)
	}
	p := res.Points[2] // C4 r1
	if p.Concurrency != 4 || p.Completed != 8 || p.OutputTokS != 40 || p.TTFT.P50 != 0.11 || p.ITL.P50 != 0.05 {
		t.Errorf("point %+v", p)
	}
	if len(res.Requests) != 2*2+2*8 || res.Requests[0].Phase != "" || res.Requests[0].Repeat != 1 {
		t.Errorf("%d records, first %+v", len(res.Requests), res.Requests[0])
	}
	// Synthetic bodies are built once: a second run sends the same slices.
	g := &fakeLoop{}
	if _, err := RunLoop(context.Background(), g, "m", w, Options{}); err != nil {
		t.Fatal(err)
	}
	if &g.bodies[1][0][0] != &f.bodies[1][0][0] {
		t.Error("bodies rebuilt for an identical workload")
	}
	for _, tc := range []struct {
		failAt int
		err    error
		want   error
	}{
		{2, fmt.Errorf("%w: no token for 1m0s", ErrHang), ErrHang},
		{3, nil, ErrFailedRequests},
	} {
		res, err := RunLoop(context.Background(), &fakeLoop{failAt: tc.failAt, err: tc.err}, "m", w, Options{})
		if !errors.Is(err, tc.want) || len(res.Points) != tc.failAt-1 {
			t.Errorf("fail at loop %d: err %v, %d points", tc.failAt, err, len(res.Points))
		}
	}
	if _, err := RunLoop(context.Background(), &fakeLoop{}, "m", Workload{Kind: "matrix"}, Options{}); err == nil {
		t.Error("a matrix workload ran through a Loop")
	}
}

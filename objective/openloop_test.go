package objective

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sgtune/sgtune/objective/fakesse"
)

// stallWriter holds every write of a response while the server's stall
// window is open: the server sends nothing to anyone during it.
type stallWriter struct {
	http.ResponseWriter
	wait func()
}

func (s stallWriter) Write(p []byte) (int, error) {
	s.wait()
	return s.ResponseWriter.Write(p)
}

func (s stallWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// stallServer serves fakesse's streams but sends nothing between from and
// from+d after arm is called (wall time).
type stallServer struct {
	srv     *fakesse.Server
	from, d time.Duration
	t0      atomic.Int64 // unix nanos; 0 until armed
}

func (s *stallServer) arm() { s.t0.Store(time.Now().UnixNano()) }

func (s *stallServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	wait := func() {
		t0 := s.t0.Load()
		if t0 == 0 {
			return
		}
		now := time.Now()
		lo := time.Unix(0, t0).Add(s.from)
		if hi := lo.Add(s.d); !now.Before(lo) && now.Before(hi) {
			select {
			case <-time.After(hi.Sub(now)):
			case <-r.Context().Done():
			}
		}
	}
	s.srv.ServeHTTP(stallWriter{w, wait}, r)
}

func openBodies(t *testing.T, n, maxTokens int) [][]byte {
	t.Helper()
	body, err := chatBody("fake/model", userMsg("hello"), maxTokens, false, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, n)
	for i := range out {
		out[i] = body
	}
	return out
}

// TestOpenLoopStall drives 20 req/s for 4 s against a server that sends
// nothing between 1 s and 3 s: the requests scheduled in the stall are
// still sent on time, and their TTFT, counted from the schedule, holds the
// stall.
func TestOpenLoopStall(t *testing.T) {
	ss := &stallServer{srv: &fakesse.Server{TokenInterval: time.Millisecond}, from: time.Second, d: 2 * time.Second}
	ts := httptest.NewServer(ss)
	defer ts.Close()
	c := newClient(Target{URL: ts.URL}, 64)
	defer c.close()
	offs, err := Arrivals(80, 20, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	ss.arm()
	b, err := c.openLoop(context.Background(), openBodies(t, 80, 8), offs, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	p, recs := b.point("", 0, 1, 0)
	t.Logf("offered %.2f req/s, achieved %.2f req/s, duration %.2f s, max in flight %d, in flight %.2f -> %.2f, send lag max %.1f ms, kept up %v (%s)",
		p.OfferedRateS, p.AchievedRateS, p.DurationS, p.MaxInFlight, p.InFlightFirstHalf, p.InFlightSecondHalf, 1000*p.SendLagMaxS, *p.KeptUp, p.Behind)
	t.Logf("TTFT p50 %.3f p90 %.3f p99 %.3f s; latency p99 %.3f s", p.TTFT.P50, p.TTFT.P90, p.TTFT.P99, p.Latency.P99)
	if p.State != "passed" || p.Completed != 80 || !p.Audit.OK() {
		t.Fatalf("state %s, %d/%d completed, audit %+v", p.State, p.Completed, p.Requested, p.Audit)
	}
	// (a) TTFT counts from the schedule, so the stall is in it.
	if p.TTFT.P99 < 1.5 {
		t.Errorf("TTFT p99 %.3f s, want >= 1.5 s (the 2 s stall)", p.TTFT.P99)
	}
	// (b) The requests scheduled in the stall were sent on time.
	inStall, maxLag := 0, 0.0
	for _, r := range recs {
		if r.ScheduledS >= 1 && r.ScheduledS < 3 {
			inStall++
			maxLag = max(maxLag, r.SendLagS)
			if r.TTFT < 3-r.ScheduledS-0.05 {
				t.Errorf("request scheduled at %.3f s: TTFT %.3f s ends before the stall does", r.ScheduledS, r.TTFT)
			}
		}
		if d := r.StartS - r.ScheduledS - r.SendLagS; d > 1e-9 || d < -1e-9 {
			t.Errorf("start %.6f != scheduled %.6f + lag %.6f", r.StartS, r.ScheduledS, r.SendLagS)
		}
	}
	t.Logf("%d requests scheduled in the stall, max send lag %.1f ms", inStall, 1000*maxLag)
	if inStall < 20 {
		t.Errorf("%d requests scheduled in the stall, want about 40", inStall)
	}
	if maxLag > 0.5 || p.SendLagMaxS > 0.5 {
		t.Errorf("send lag %.3f s in the stall, %.3f s overall: want < 0.5 s (the stall is 2 s)", maxLag, p.SendLagMaxS)
	}
	if p.MaxInFlight < inStall/2 {
		t.Errorf("max in flight %d, want the stall's backlog (%d scheduled in it)", p.MaxInFlight, inStall)
	}
	// (c) The rates are reported.
	if p.OfferedRateS < 15 || p.OfferedRateS > 25 || p.AchievedRateS <= 0 || p.KeptUp == nil {
		t.Errorf("offered %.2f, achieved %.2f, kept up %v", p.OfferedRateS, p.AchievedRateS, p.KeptUp)
	}
}

// TestClosedLoopHidesStall is the contrast to TestOpenLoopStall: two
// closed-loop workers meet the same 2 s stall, but only the two requests
// they had in flight wait through it; the rest are simply not sent while
// the server is silent, so the TTFT percentiles barely see it.
func TestClosedLoopHidesStall(t *testing.T) {
	ss := &stallServer{srv: &fakesse.Server{TokenInterval: time.Millisecond}, from: 300 * time.Millisecond, d: 2 * time.Second}
	ts := httptest.NewServer(ss)
	defer ts.Close()
	c := newClient(Target{URL: ts.URL}, 64)
	defer c.close()
	ss.arm()
	b, err := c.closedLoop(context.Background(), openBodies(t, 1500, 2), 2, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	p, recs := b.point("", 2, 1, 0)
	stalled := 0
	for _, r := range recs {
		if r.Latency > 1 {
			stalled++
		}
	}
	t.Logf("closed loop C2: %d requests in %.2f s, %d with latency > 1 s; TTFT p50 %.4f p99 %.4f s, latency p99 %.4f s",
		p.Completed, p.DurationS, stalled, p.TTFT.P50, p.TTFT.P99, p.Latency.P99)
	if p.Completed != 1500 || p.DurationS < 2 || stalled > 2 || p.TTFT.P99 > 0.5 || p.Latency.P99 > 0.5 {
		t.Errorf("%d completed in %.2f s, %d stalled, TTFT p99 %.3f s, latency p99 %.3f s: want the stall met and hidden",
			p.Completed, p.DurationS, stalled, p.TTFT.P99, p.Latency.P99)
	}
}

// TestOpenLoopHang: a server that sends nothing trips the watchdog even
// though new requests keep being sent (a send is not progress).
func TestOpenLoopHang(t *testing.T) {
	ss := &stallServer{srv: &fakesse.Server{}, d: time.Minute}
	ts := httptest.NewServer(ss)
	defer ts.Close()
	c := newClient(Target{URL: ts.URL}, 64)
	defer c.close()
	offs, _ := Arrivals(100, 20, 1, 4) // about 5 s
	ss.arm()
	t0 := time.Now()
	b, err := c.openLoop(context.Background(), openBodies(t, 100, 4), offs, 500*time.Millisecond, false)
	if !errors.Is(err, ErrHang) {
		t.Fatalf("error %v, want ErrHang", err)
	}
	p, _ := b.point("", 0, 1, 0)
	t.Logf("%v after %.2f s: issued %d, failed %d", err, time.Since(t0).Seconds(), p.Issued, p.Failed)
	if time.Since(t0) > 2*time.Second || p.Issued >= 100 || p.Issued == 0 {
		t.Errorf("stopped after %v with %d issued: want about 0.5 s, some of 100", time.Since(t0), p.Issued)
	}
}

// TestOpenLoopHealthy: a fast server keeps up at 20 req/s.
func TestOpenLoopHealthy(t *testing.T) {
	c := newClient(fake(t, &fakesse.Server{TokenInterval: time.Millisecond}), 64)
	defer c.close()
	offs, _ := Arrivals(60, 20, 1, 11)
	b, err := c.openLoop(context.Background(), openBodies(t, 60, 8), offs, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.point("", 0, 1, 0)
	t.Logf("offered %.2f req/s, achieved %.2f req/s, max in flight %d, in flight %.2f -> %.2f, send lag max %.1f ms, TTFT p99 %.1f ms, behind %q",
		p.OfferedRateS, p.AchievedRateS, p.MaxInFlight, p.InFlightFirstHalf, p.InFlightSecondHalf, 1000*p.SendLagMaxS, 1000*p.TTFT.P99, p.Behind)
	if p.State != "passed" || p.Completed != 60 {
		t.Fatalf("state %s, %d/60 completed", p.State, p.Completed)
	}
	if p.KeptUp == nil || !*p.KeptUp {
		t.Errorf("kept up %v: %s", p.KeptUp, p.Behind)
	}
	if r := p.AchievedRateS / p.OfferedRateS; r < 0.95 || r > 1.1 {
		t.Errorf("achieved/offered %.3f, want about 1", r)
	}
}

// TestOpenLoopCannotKeepUp: a server that serves one request at a time in
// about 100 ms gets 20 req/s: it falls behind and the verdict says so.
func TestOpenLoopCannotKeepUp(t *testing.T) {
	c := newClient(fake(t, &fakesse.Server{RunLimit: 1, TokenInterval: 10 * time.Millisecond}), 64)
	defer c.close()
	offs, _ := Arrivals(40, 20, 100, 5) // nearly even gaps: offered about 20 req/s
	b, err := c.openLoop(context.Background(), openBodies(t, 40, 10), offs, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.point("", 0, 1, 0)
	t.Logf("offered %.2f req/s, achieved %.2f req/s, max in flight %d, in flight %.2f -> %.2f, TTFT p99 %.2f s, behind %q",
		p.OfferedRateS, p.AchievedRateS, p.MaxInFlight, p.InFlightFirstHalf, p.InFlightSecondHalf, p.TTFT.P99, p.Behind)
	if p.Completed != 40 {
		t.Fatalf("%d/40 completed", p.Completed)
	}
	if p.KeptUp == nil || *p.KeptUp || p.Behind == "" {
		t.Errorf("kept up %v (%q), want false", p.KeptUp, p.Behind)
	}
	if p.AchievedRateS > 0.7*p.OfferedRateS {
		t.Errorf("achieved %.2f of offered %.2f req/s, want at most about 10 req/s", p.AchievedRateS, p.OfferedRateS)
	}
	if p.MaxInFlight < 10 || p.InFlightSecondHalf <= p.InFlightFirstHalf {
		t.Errorf("max in flight %d, halves %.2f -> %.2f: want a growing backlog", p.MaxInFlight, p.InFlightFirstHalf, p.InFlightSecondHalf)
	}
}

// TestOpenLoopDeadServer: every request fails, so sending stops after
// openGiveUp failures in a row; the rest are not issued.
func TestOpenLoopDeadServer(t *testing.T) {
	c := newClient(fake(t, &fakesse.Server{FailFrom: 1}), 64)
	defer c.close()
	offs, _ := Arrivals(100, 50, 1, 1)
	b, err := c.openLoop(context.Background(), openBodies(t, 100, 4), offs, 10*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.point("", 0, 1, 0)
	t.Logf("issued %d of %d, failed %d", p.Issued, p.Requested, p.Failed)
	if p.Issued >= 100 || p.Issued < openGiveUp || p.Failed != p.Issued || p.State != "failed" {
		t.Errorf("issued %d, failed %d, state %s: want to stop after about %d failures", p.Issued, p.Failed, p.State, openGiveUp)
	}
	if p.Audit.AllRequested || !p.Audit.RawCount || !p.Audit.Completed {
		t.Errorf("audit %+v: want all_requested false, the counts consistent", p.Audit)
	}
}

// TestOpenLoopInterrupt: an interrupt stops the sends; requests in flight
// are cut, those not yet due are not issued.
func TestOpenLoopInterrupt(t *testing.T) {
	c := newClient(fake(t, &fakesse.Server{TokenInterval: 20 * time.Millisecond}), 64)
	defer c.close()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	timer := time.AfterFunc(500*time.Millisecond, func() { cancel(ErrInterrupted) })
	defer timer.Stop()
	offs, _ := Arrivals(40, 20, 1, 2) // about 2 s
	b, err := c.openLoop(ctx, openBodies(t, 40, 50), offs, 10*time.Second, false)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("error %v, want ErrInterrupted", err)
	}
	p, _ := b.point("", 0, 1, 0)
	t.Logf("issued %d, completed %d, cut %d, state %s", p.Issued, p.Completed, p.Cut, p.State)
	if p.State != StateInterrupted || p.Issued >= 40 || p.Cut == 0 || p.Completed+p.Failed+p.Cut != p.Issued {
		t.Errorf("state %s, issued %d, completed %d, failed %d, cut %d", p.State, p.Issued, p.Completed, p.Failed, p.Cut)
	}
}

// TestOpenLoopBadSchedule: a schedule that does not fit the bodies is an
// error before anything is sent.
func TestOpenLoopBadSchedule(t *testing.T) {
	srv := &fakesse.Server{}
	c := newClient(fake(t, srv), 4)
	defer c.close()
	bodies := openBodies(t, 2, 2)
	for _, offs := range [][]time.Duration{
		{0},
		{time.Second, 0},
		{-time.Second, 0},
	} {
		b, err := c.openLoop(context.Background(), bodies, offs, time.Second, false)
		if err == nil || b == nil || b.issued != 0 {
			t.Errorf("offsets %v: batch %+v, error %v", offs, b, err)
		}
	}
	if n := srv.Requests(); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestOpenFigures checks the verdict's arithmetic on hand-made records.
func TestOpenFigures(t *testing.T) {
	sched := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}
	for _, tc := range []struct {
		name     string
		lat      []float64 // per request, from its schedule
		duration float64
		kept     bool
		maxIn    int
	}{
		// Each request ends before the next is due.
		{"keeps up", []float64{0.5, 0.5, 0.5, 0.5, 0.5}, 4.5, true, 1},
		// Latency grows by a second a request: a backlog.
		{"backlog", []float64{1, 2, 3, 4, 5}, 9, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := make([]RequestRecord, len(sched))
			for i := range recs {
				recs[i] = RequestRecord{OK: true, ScheduledS: sched[i].Seconds(), StartS: sched[i].Seconds(), Latency: tc.lat[i]}
			}
			p := Point{Completed: 5, DurationS: tc.duration, RequestsPerS: 5 / tc.duration}
			openFigures(&p, sched, recs)
			t.Logf("in flight %g -> %g, behind %q", p.InFlightFirstHalf, p.InFlightSecondHalf, p.Behind)
			if p.OfferedRateS != 1 || p.MaxInFlight != tc.maxIn || *p.KeptUp != tc.kept || (p.Behind == "") != tc.kept {
				t.Errorf("offered %g, max in flight %d (want %d), kept up %v (want %v): %s", p.OfferedRateS, p.MaxInFlight, tc.maxIn, *p.KeptUp, tc.kept, p.Behind)
			}
		})
	}
}

// openFake is an OpenLooper whose server answers each request 0.5 s after
// its scheduled send: it keeps up at any rate.
type openFake struct{ fakeLoop }

func (f *openFake) OpenLoop(_ context.Context, bodies [][]byte, offsets []time.Duration, _ time.Duration, _ bool) (LoopResult, error) {
	lr := LoopResult{}
	for i := range bodies {
		s := offsets[i].Seconds()
		rec := RequestRecord{OK: true, StartS: s, ScheduledS: s, TTFT: 0.1, Latency: 0.5, OutputTokens: 10}
		lr.Exchanges = append(lr.Exchanges, Exchange{Record: rec})
		lr.Issued++
		lr.Completed++
		lr.Tokens += 10
	}
	lr.Duration = offsets[len(offsets)-1] - offsets[0] + 500*time.Millisecond
	return lr, nil
}

// TestLoopOpenLoop: a Loop runs open-loop levels only when it is an
// OpenLooper; the point's figures are the load generator's.
func TestLoopOpenLoop(t *testing.T) {
	bodies := make([][]byte, 200)
	offs, _ := Arrivals(len(bodies), 4, 1, 1) // about 50 s
	b, err := loopAdapter{&fakeLoop{}}.openLoop(context.Background(), bodies, offs, time.Minute, false)
	if !errors.Is(err, ErrNoOpenLoop) || b == nil || b.issued != 0 {
		t.Errorf("closed-only loop: batch %+v, error %v; want ErrNoOpenLoop", b, err)
	}
	b, err = loopAdapter{&openFake{}}.openLoop(context.Background(), bodies, offs, time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.point("", 0, 1, 0)
	t.Logf("offered %.3f, achieved %.3f, in flight %.2f -> %.2f, max %d", p.OfferedRateS, p.AchievedRateS, p.InFlightFirstHalf, p.InFlightSecondHalf, p.MaxInFlight)
	if p.State != "passed" || p.KeptUp == nil || !*p.KeptUp || p.OfferedRateS < 3 || p.OfferedRateS > 5 || p.MaxInFlight < 1 {
		t.Errorf("point %+v", p)
	}
}

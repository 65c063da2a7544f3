package main

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/sgtune/sgtune/search"
)

// TestProgressPlain: without a terminal, progress is the events' lines.
func TestProgressPlain(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf)
	best := 123.0
	for _, ev := range []search.Event{
		{Kind: search.EventLaunching, Trial: 0, Phase: "starting", Text: "trial 0 launching"},
		{Kind: search.EventPhase, Trial: 0, Phase: "C1 r1", Text: "trial 0   C1 r1"},
		{Kind: search.EventPoint, Trial: 0, TokS: 99},
		{Kind: search.EventFinished, Trial: 0, State: search.StateComplete, Best: &best, Text: "trial 0 complete"},
	} {
		p.event(ev)
	}
	p.stop()
	if got := buf.String(); got != "trial 0 launching\ntrial 0   C1 r1\ntrial 0 complete\n" {
		t.Errorf("plain output %q", got)
	}
}

// TestProgressLiveLine: under a pseudo-terminal `sgtune run` redraws a
// status line in place (trial, launches, phase, tok/s, elapsed, best),
// and the same run into a pipe writes plain lines only.
func TestProgressLiveLine(t *testing.T) {
	binDir := buildBins(t, "sgtune", "sglang-sim")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("live", 100, fmt.Sprintf(twoParams, 2)))
	bin := filepath.Join(binDir, "sgtune")
	run := func(db string, tty bool) string {
		cmd := exec.Command(bin, "run", study, "--storage", filepath.Join(dir, db))
		if !tty {
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out)
			}
			return string(out)
		}
		f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out bytes.Buffer
		done := make(chan struct{})
		go func() { _, _ = io.Copy(&out, f); close(done) }() // ends when the pty closes (EIO)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("run under a pty: %v\n%s", err, out.String())
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		return out.String()
	}
	live := run("tty.db", true)
	status := regexp.MustCompile(`\r\x1b\[Ktrial 1 · 2 of 2 launched · C8 r1 · [\d,]+ tok/s · \S+ elapsed · .*best [\d,]+`)
	if !status.MatchString(live) {
		t.Errorf("no live status line under a terminal:\n%q", live)
	}
	plain := run("pipe.db", false)
	if strings.Contains(plain, "\x1b[K") || strings.Contains(plain, "\r") || !strings.Contains(plain, "trial 1 complete: score") {
		t.Errorf("plain output has terminal control or lacks the lines:\n%q", plain)
	}
}

// TestProgressAsideAndTick: a message printed beside a live status line
// (the interrupt's) starts on a cleared line, not glued onto the status,
// which is drawn again below it; between events the line is redrawn with
// the time elapsed (it froze through a server's startup).
func TestProgressAsideAndTick(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf)
	p.live = true
	clock := p.start
	p.now = func() time.Time { return clock }
	p.event(search.Event{Kind: search.EventLaunching, Trial: 0, Phase: "starting", Budget: 4, Text: "trial 0 launching"})
	p.aside(&buf, "sgtune: interrupt: stopping")
	out := buf.String()
	if !strings.Contains(out, "\r\033[Ksgtune: interrupt: stopping\n") || !strings.HasSuffix(out, "\r\033[Ktrial 0 · 0 of 4 launched · starting · 0s elapsed") {
		t.Errorf("aside output %q", out)
	}
	p.mu.Lock()
	clock = clock.Add(5 * time.Second)
	p.mu.Unlock()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() { p.tick(done); close(ended) }()
	time.Sleep(tickEvery + tickEvery/2)
	close(done)
	<-ended
	p.mu.Lock()
	defer p.mu.Unlock()
	if !strings.HasSuffix(buf.String(), "starting · 5s elapsed") {
		t.Errorf("no redraw between events: %q", buf.String())
	}
}

// TestProgressETACountsConfirmations: once the search is over, the time
// left counts the confirmation runs still to start (it said ~3s left with
// three reruns of ~8s each to come).
func TestProgressETACountsConfirmations(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf)
	p.live = true
	t0 := p.start
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	clock := at(0)
	p.now = func() time.Time { return clock }
	p.event(search.Event{Kind: search.EventLaunching, Trial: 0, Phase: "starting", Time: at(0), Launched: 1, Budget: 1})
	p.event(search.Event{Kind: search.EventFinished, Trial: 0, State: search.StateComplete, Time: at(10), Launched: 1, Budget: 1})
	p.event(search.Event{Kind: search.EventConfirming, Trial: -1, Phase: "confirming", Queued: 2, Launched: 1, Budget: 1})
	p.event(search.Event{Kind: search.EventLaunching, Trial: 1, Phase: "starting", Time: at(10), Launched: 1, Budget: 1})
	clock = at(12)
	if got := p.statusLine(); !strings.Contains(got, "confirming: 1 rerun(s) to start") || !strings.Contains(got, "~18s left") {
		t.Errorf("status line %q: want one rerun to start and ~18s left (10 s for it, 8 s of this one)", got)
	}
}

// TestProgressPhaseDropsLastLevelsTokS: a new phase does not show the
// previous level's tok/s as its own ("warm-up C64 · 16,709 tok/s", the
// C16 figure).
func TestProgressPhaseDropsLastLevelsTokS(t *testing.T) {
	p := newProgress(io.Discard)
	p.event(search.Event{Kind: search.EventLaunching, Trial: 0, Phase: "starting"})
	p.event(search.Event{Kind: search.EventPoint, Trial: 0, TokS: 16709})
	p.event(search.Event{Kind: search.EventPhase, Trial: 0, Phase: "warm-up C64"})
	if got := p.statusLine(); strings.Contains(got, "tok/s") {
		t.Errorf("status line %q carries the last level's tok/s", got)
	}
}

// TestProgressETA: the time left counts every launch that ran to an end
// in the mean, divides the launches left among the trials run at once,
// counts the confirmation runs the study queues after its search, and
// starts from the study's stored launches before this run's first ends.
func TestProgressETA(t *testing.T) {
	sec := func(s int) time.Duration { return time.Duration(s) * time.Second }
	type step struct {
		at int // seconds after the start
		ev search.Event
	}
	launch := func(at, trial, launched, budget, parallel int) step {
		return step{at, search.Event{Kind: search.EventLaunching, Trial: trial, Phase: "starting", Launched: launched, Budget: budget, Parallel: parallel}}
	}
	finish := func(at, trial, launched, budget, parallel int) step {
		return step{at, search.Event{Kind: search.EventFinished, Trial: trial, State: search.StateComplete, Launched: launched, Budget: budget, Parallel: parallel}}
	}
	for _, tc := range []struct {
		name  string
		steps []step
		now   int
		want  string // the status line's time left ("" for none)
	}{
		{
			// Trial 0 (10 s) ends under trial 1 (20 s): the mean is 15 s,
			// and two launches left on two groups take one mean, after
			// the 10 s left of the two running.
			name: "two groups: every launch in the mean, launches left shared",
			steps: []step{
				launch(0, 0, 1, 6, 2), launch(0, 1, 2, 6, 2),
				finish(10, 0, 2, 6, 2), finish(20, 1, 2, 6, 2),
				launch(20, 2, 3, 6, 2), launch(20, 3, 4, 6, 2),
			},
			now:  25,
			want: "~25s left",
		},
		{
			// Three launches left on two groups of 10 s each: the idle
			// group runs two (20 s) while the other ends trial 1 and
			// runs one (the serial sum said 40 s).
			name: "two groups: an odd launch left goes to the group free first",
			steps: []step{
				launch(0, 0, 1, 5, 2), finish(10, 0, 1, 5, 2),
				launch(10, 1, 2, 5, 2),
			},
			now:  10,
			want: "~20s left",
		},
		{
			// The budget is spent but 2 configs x 2 rounds of
			// confirmation follow: 4 more runs of 10 s after this one.
			name: "confirmation runs to come once the search ends",
			steps: []step{
				launch(0, 0, 1, 2, 1), finish(10, 0, 1, 2, 1),
				{10, search.Event{Kind: search.EventLaunching, Trial: 1, Launched: 2, Budget: 2, Parallel: 1, Confirms: 4}},
			},
			now:  14,
			want: "~46s left",
		},
		{
			// A run that only resumes a confirmation: no run of its own
			// has ended, the study's 2 stored launches took 40 s.
			name: "stored launches give the mean before this run's first ends",
			steps: []step{
				{0, search.Event{Kind: search.EventStudy, Trial: -1, Launched: 4, Budget: 4, Parallel: 1, Ran: 2, RanFor: sec(40)}},
				{0, search.Event{Kind: search.EventConfirming, Trial: -1, Phase: "confirming", Queued: 3, Launched: 4, Budget: 4, Parallel: 1}},
				launch(0, 5, 4, 4, 1),
			},
			now:  5,
			want: "~55s left",
		},
		{
			// An interrupted trial is run again: its time is no launch's.
			name: "an interrupted trial is not in the mean",
			steps: []step{
				launch(0, 0, 1, 3, 1),
				{1, search.Event{Kind: search.EventFinished, Trial: 0, State: search.StateInterrupted, Launched: 0, Budget: 3, Parallel: 1}},
				launch(1, 1, 1, 3, 1),
			},
			now:  2,
			want: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProgress(io.Discard)
			t0 := p.start
			clock := t0
			p.now = func() time.Time { return clock }
			for _, s := range tc.steps {
				s.ev.Time = t0.Add(sec(s.at))
				clock = s.ev.Time
				p.event(s.ev)
			}
			clock = t0.Add(sec(tc.now))
			got := p.statusLine()
			left := regexp.MustCompile(`~\S+ left`).FindString(got)
			if left != tc.want {
				t.Errorf("status line %q: time left %q, want %q", got, left, tc.want)
			}
		})
	}
}

// TestProgressParallelLine: with two trials in flight the line shows the
// latest launched with its own phase, not the other's, and once it ends
// the one still running (it showed no trial, or the other's phase).
func TestProgressParallelLine(t *testing.T) {
	p := newProgress(io.Discard)
	ev := func(kind search.EventKind, trial int, phase string, tokS float64) {
		p.event(search.Event{Kind: kind, Trial: trial, Phase: phase, TokS: tokS, State: search.StateComplete, Launched: 2, Budget: 2, Parallel: 2})
	}
	ev(search.EventLaunching, 0, "starting", 0)
	ev(search.EventLaunching, 1, "starting", 0)
	ev(search.EventPhase, 0, "C8 r1", 0)
	ev(search.EventPoint, 0, "", 900)
	for _, want := range []struct {
		after func()
		line  string
	}{
		{func() {}, "trial 1 · 2 of 2 launched · starting · "},
		{func() { ev(search.EventFinished, 1, "", 0) }, "trial 0 · 2 of 2 launched · C8 r1 · 900 tok/s · "},
		{func() { ev(search.EventFinished, 0, "", 0) }, "2 of 2 launched · 0s elapsed"},
	} {
		want.after()
		if got := p.statusLine(); !strings.HasPrefix(got, want.line) {
			t.Errorf("status line %q, want it to start %q", got, want.line)
		}
	}
}

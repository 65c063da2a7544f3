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

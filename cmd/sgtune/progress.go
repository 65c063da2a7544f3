package main

import (
	"github.com/sgtune/sgtune/report"

	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/sgtune/sgtune/search"
)

// progress renders a study's events. Every event's line is printed; on a
// terminal a live status line (trial, launches, phase, tok/s so far,
// elapsed, estimated time left, best so far) stays under them, redrawn in
// place. Elsewhere (a file, a pipe, CI) only the plain lines are written.
type progress struct {
	w     io.Writer
	live  bool
	width func() int
	now   func() time.Time

	mu      sync.Mutex
	start   time.Time
	status  string // the status line drawn now ("" for none)
	trial   int
	phase   string
	tokS    float64
	since   time.Time // when the current trial started
	done    []time.Duration
	ev      search.Event // the latest event's study-wide figures
	stopped bool
	// confirming is set once the search is over and its top configs run
	// again; confirmLeft counts those runs not started yet.
	confirming  bool
	confirmLeft int
}

// newProgress writes to w, live when w is a terminal.
func newProgress(w io.Writer) *progress {
	p := &progress{w: w, now: time.Now, width: func() int { return 100 }, trial: -1}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.live = true
		p.width = func() int {
			if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 20 {
				return cols
			}
			return 100
		}
	}
	p.start = p.now()
	return p
}

// event handles one study event (search.Options.Events).
func (p *progress) event(ev search.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ev = ev
	switch ev.Kind {
	case search.EventLaunching:
		p.trial, p.phase, p.tokS, p.since = ev.Trial, ev.Phase, 0, ev.Time
		if p.confirming && p.confirmLeft > 0 {
			p.confirmLeft--
		}
	case search.EventPhase:
		// A new phase's tok/s comes with its first point; the last
		// level's next to it read as this level's.
		p.phase, p.tokS = ev.Phase, 0
	case search.EventPoint:
		if ev.TokS > 0 {
			p.tokS = ev.TokS
		}
	case search.EventFinished:
		if ev.Trial == p.trial {
			if ev.State != search.StateInterrupted && !p.since.IsZero() {
				p.done = append(p.done, ev.Time.Sub(p.since))
			}
			p.trial, p.phase, p.tokS = -1, "", 0
		}
	case search.EventConfirming:
		p.phase = ev.Phase
		p.confirming, p.confirmLeft = true, ev.Queued
	}
	// Phases only move the live line on a terminal; a point's figures come
	// as an event without a line (its line came before).
	if ev.Text != "" && (ev.Kind != search.EventPhase || !p.live) {
		p.line(ev.Text)
	}
	p.draw()
}

// line prints one plain line above the live status line.
func (p *progress) line(s string) {
	p.clear()
	fmt.Fprintln(p.w, s)
}

// clear erases the live status line, if one is drawn.
func (p *progress) clear() {
	if p.live && p.status != "" {
		fmt.Fprint(p.w, "\r\033[K")
		p.status = ""
	}
}

// draw redraws the live status line.
func (p *progress) draw() {
	if !p.live || p.stopped {
		return
	}
	s := p.statusLine()
	if w := p.width() - 1; utf8.RuneCountInString(s) > w {
		s = string([]rune(s)[:w-1]) + "…"
	}
	fmt.Fprint(p.w, "\r\033[K"+s)
	p.status = s
}

// statusLine is the live line: "trial 7 · 5 of 10 launched · C64 r2 ·
// 18,450 tok/s · 3m12s elapsed · ~4m left · best 35,755".
func (p *progress) statusLine() string {
	var parts []string
	if p.trial >= 0 {
		parts = append(parts, fmt.Sprintf("trial %d", p.trial))
	}
	if p.ev.Budget > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d launched", p.ev.Launched, p.ev.Budget))
	}
	if p.confirming {
		parts = append(parts, fmt.Sprintf("confirming: %d rerun(s) to start", p.confirmLeft))
	}
	if p.phase != "" {
		parts = append(parts, p.phase)
	}
	if p.tokS > 0 {
		parts = append(parts, report.Thousands(p.tokS)+" tok/s")
	}
	elapsed := p.now().Sub(p.start)
	parts = append(parts, clock(elapsed)+" elapsed")
	if left := p.eta(); left > 0 {
		parts = append(parts, "~"+clock(left)+" left")
	}
	if p.ev.Best != nil {
		parts = append(parts, "best "+report.Thousands(*p.ev.Best))
	}
	return strings.Join(parts, " · ")
}

// eta estimates the time left from the mean duration of the trials this
// run finished, the launches left in the budget and the confirmation runs
// not started yet.
func (p *progress) eta() time.Duration {
	if len(p.done) == 0 || p.ev.Budget <= 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range p.done {
		sum += d
	}
	mean := sum / time.Duration(len(p.done))
	runs := max(p.ev.Budget-p.ev.Launched, 0)
	if p.confirming { // the search is over, whatever budget it left
		runs = p.confirmLeft
	}
	left := time.Duration(runs) * mean
	if p.trial >= 0 {
		left += max(mean-p.now().Sub(p.since), 0)
	}
	return left
}

// aside prints s to w (stderr, say) as a line of its own: on a terminal
// the live status line is cleared first and drawn again below it.
func (p *progress) aside(w io.Writer, s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintln(w, s)
	p.draw()
}

// tickEvery is how often the live line is redrawn between events: a
// server's startup takes minutes without one, and a frozen elapsed time
// looks like a hang.
const tickEvery = time.Second

// tick redraws the live line every tickEvery until done is closed.
func (p *progress) tick(done <-chan struct{}) {
	if !p.live {
		return
	}
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			p.mu.Lock()
			if p.status != "" {
				p.draw()
			}
			p.mu.Unlock()
		}
	}
}

// stop clears the live line, for the summary that follows.
func (p *progress) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	p.stopped = true
}

package main

import (
	"github.com/sgtune/sgtune/report"

	"fmt"
	"io"
	"os"
	"slices"
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

	mu     sync.Mutex
	start  time.Time
	status string // the status line drawn now ("" for none)
	// trial is the trial the line shows: the latest launched of those
	// running (-1: none); running are this run's trials in flight (with
	// several GPU groups, more than one).
	trial   int
	running map[int]*inFlight
	phase   string // a study-level phase shown while no trial runs ("confirming")
	// ran and ranFor: the launches that ran to an end, this run's and the
	// study's before it, and their total time, for the mean launch.
	ran     int
	ranFor  time.Duration
	ev      search.Event // the latest event's study-wide figures
	stopped bool
	// confirming is set once the search is over and its top configs run
	// again; confirmLeft counts those runs not started yet.
	confirming  bool
	confirmLeft int
}

// inFlight is a running trial as the live line shows it.
type inFlight struct {
	since time.Time // when it launched
	phase string
	tokS  float64 // the latest point's, in its phase
}

// newProgress writes to w, live when w is a terminal.
func newProgress(w io.Writer) *progress {
	p := &progress{w: w, now: time.Now, width: func() int { return 100 }, trial: -1, running: map[int]*inFlight{}}
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
	cur := p.running[ev.Trial]
	switch ev.Kind {
	case search.EventStudy:
		p.ran, p.ranFor = p.ran+ev.Ran, p.ranFor+ev.RanFor
	case search.EventLaunching:
		p.running[ev.Trial] = &inFlight{since: ev.Time, phase: ev.Phase}
		p.trial, p.phase = ev.Trial, ""
		if p.confirming && p.confirmLeft > 0 {
			p.confirmLeft--
		}
	case search.EventPhase:
		// A new phase's tok/s comes with its first point; the last
		// level's next to it read as this level's.
		if cur != nil {
			cur.phase, cur.tokS = ev.Phase, 0
		}
	case search.EventPoint:
		if cur != nil && ev.TokS > 0 {
			cur.tokS = ev.TokS
		}
	case search.EventFinished:
		if cur == nil {
			break
		}
		// Every launch that ran to an end counts, the line's trial or
		// not: with several GPU groups one often ends under a newer one.
		// An interrupted one is run again and counted then.
		if search.RanToEnd(ev.State) && !cur.since.IsZero() {
			p.ran, p.ranFor = p.ran+1, p.ranFor+ev.Time.Sub(cur.since)
		}
		delete(p.running, ev.Trial)
		if ev.Trial == p.trial {
			p.trial = p.latest()
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

// latest returns the running trial launched last (-1: none), for the
// line to show once its trial ends while others run.
func (p *progress) latest() int {
	n := -1
	for num, r := range p.running {
		if n < 0 || r.since.After(p.running[n].since) || (r.since.Equal(p.running[n].since) && num > n) {
			n = num
		}
	}
	return n
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
	phase, tokS := p.phase, 0.0
	if cur := p.running[p.trial]; cur != nil {
		parts = append(parts, fmt.Sprintf("trial %d", p.trial))
		phase, tokS = cur.phase, cur.tokS
	}
	if p.ev.Budget > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d launched", p.ev.Launched, p.ev.Budget))
	}
	if p.confirming {
		parts = append(parts, fmt.Sprintf("confirming: %d rerun(s) to start", p.confirmLeft))
	}
	if phase != "" {
		parts = append(parts, phase)
	}
	if tokS > 0 {
		parts = append(parts, report.Thousands(tokS)+" tok/s")
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

// eta estimates the time left: every launch to come (the budget's, then
// the confirmation runs not yet run to an end, or once confirming those
// not started) takes the mean of the launches that ran to an end, and a
// running trial takes what the mean leaves of it (nothing once past it).
// The launches are dealt to the run's slots (GPU groups) as each comes
// free: every launch taking the same time, the slots free earliest take
// one more than the rest, ceil(runs/slots) launches, and the time left is
// the latest slot's end. Durations that differ by config, and the wait
// for the last search trial before confirmation starts, are left out: a
// coarse figure that stays simple to read.
func (p *progress) eta() time.Duration {
	if p.ran == 0 || p.ev.Budget <= 0 {
		return 0
	}
	mean := p.ranFor / time.Duration(p.ran)
	runs := max(p.ev.Budget-p.ev.Launched, 0) + p.ev.Confirms
	if p.confirming { // the search is over, whatever budget it left
		runs = p.confirmLeft
	}
	free := make([]time.Duration, max(p.ev.Parallel, len(p.running), 1)) // when each slot comes free; an idle one now
	i := 0
	for _, r := range p.running {
		free[i] = mean - min(max(p.now().Sub(r.since), 0), mean)
		i++
	}
	slices.Sort(free)
	var left time.Duration
	for i, f := range free {
		n := runs / len(free)
		if i < runs%len(free) {
			n++
		}
		left = max(left, f+time.Duration(n)*mean)
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

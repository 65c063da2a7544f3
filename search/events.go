package search

import (
	"fmt"
	"time"
)

// EventKind says what happened in a study.
type EventKind string

// The events a study reports, in the order a trial goes through them.
const (
	EventStudy      EventKind = "study"      // the run starts: budget, workers, trials to retry
	EventProposed   EventKind = "proposed"   // a config was proposed and passed the checks
	EventSkipped    EventKind = "skipped"    // a proposal was not launched (infeasible, duplicate, known bad)
	EventLaunching  EventKind = "launching"  // its server is starting
	EventReady      EventKind = "ready"      // its server is ready
	EventPhase      EventKind = "phase"      // a measurement phase starts (warm-up C16, C64 r2, quality)
	EventPoint      EventKind = "point"      // a point was measured
	EventFinished   EventKind = "finished"   // the trial ended (complete, failed, pruned, interrupted)
	EventConfirming EventKind = "confirming" // the top configs are measured again before a winner is declared
	EventNote       EventKind = "note"       // anything else worth a line (timeout reached, space exhausted)
)

// Event is one step of a study, for progress output. Text is the plain line
// printed when the output is not a terminal; the other fields feed a live
// status line.
type Event struct {
	Time  time.Time
	Kind  EventKind
	Trial int    // trial number; -1 for study-level events
	Text  string // one human-readable line, without a newline
	// Phase of a measurement ("starting", "warm-up C16", "C64 r2").
	Phase string
	// TokS is a measured point's output tok/s.
	TokS float64
	// State of a finished trial, and its score when it has one.
	State string
	Score *float64
	// Launched and Budget: the study's launched trials and its budget at
	// the time of the event; Best: the best score so far (nil: none).
	Launched, Budget int
	Best             *float64
	// Parallel is how many trials the run keeps in flight at once (its
	// GPU groups, or its Slurm jobs).
	Parallel int
	// Confirms is how many confirmation runs the study has still to run
	// once its search is over: budget.confirm configs, at most the
	// distinct configs measured complete so far (it confirms no more),
	// times its confirm rounds, less the confirmation runs that ran to an
	// end (this run's and those stored before it); 0 when the study does
	// not confirm.
	Confirms int
	// Ran and RanFor are, for EventStudy, the study's launches that ran to
	// an end before this run (complete, failed or pruned, confirmation
	// runs too) and their total time: the time left has a mean launch
	// before this run's first one ends.
	Ran    int
	RanFor time.Duration
	// Queued is, for EventConfirming, the confirmation runs waiting to
	// start: queued now, or before by an interrupted run or another process.
	Queued int
}

// emit sends an event to the run's listener, filling the study-wide fields.
func (r *runner) emit(ev Event) {
	if r.opt.Events == nil {
		return
	}
	ev.Time = time.Now()
	r.mu.Lock()
	ev.Launched, ev.Budget, ev.Parallel = r.launched, r.budget, r.parallel
	if k := r.st.Budget.Confirm; k > 0 {
		// Runs that ended are not queued again (see queueConfirmations).
		// The engine default, once measured, is measured again too.
		n := min(k, len(r.measured))
		if r.baselineMeasured {
			n++
		}
		ev.Confirms = max(n*max(r.st.Budget.ConfirmRounds, 1)-r.confirmed, 0)
	}
	if r.best != nil {
		b := *r.best
		ev.Best = &b
	}
	r.mu.Unlock()
	r.eventsMu.Lock()
	defer r.eventsMu.Unlock()
	r.opt.Events(ev)
}

// note emits a study-level line.
func (r *runner) note(format string, args ...any) {
	r.emit(Event{Kind: EventNote, Trial: -1, Text: fmt.Sprintf(format, args...)})
}

// trialEvent emits a line about one trial.
func (r *runner) trialEvent(kind EventKind, number int, format string, args ...any) {
	r.emit(Event{Kind: kind, Trial: number, Text: fmt.Sprintf("trial %d %s", number, fmt.Sprintf(format, args...))})
}

package main

import (
	"context"
	"slices"
	"sync"

	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/search"
)

// lockstep runs the workers of a study with parallel GPU groups in turns,
// so that the study is the same run after run. In virtual time a launch
// ends as soon as it starts, and freely running workers would interleave
// their proposals and results in whatever order the Go scheduler picks:
// the same build and seeds measured 20.8 and 22.0 mean launches on the
// GLM landscape. Here a worker holds the turn from joining to its first
// launch and from then on at all times but one: as its server starts,
// the turn passes to the next worker in GPU-group order, and comes back
// once every other worker took its own. So each proposal sees the other
// workers' launches in flight, as on real GPUs with trials of equal
// length, and a worker's result is stored, and its next config proposed,
// while the others wait.
//
// It is a search.Backend (wrapping next) and the run's search.Turns.
type lockstep struct {
	next   search.Backend
	groups [][]int // the study's GPU groups: a launch's worker is its index

	mu     sync.Mutex
	cond   *sync.Cond
	n      int    // workers of the current phase (0: none joined yet)
	joined []bool // per worker: joined this phase
	left   []bool // per worker: left this phase
	turn   int    // the worker whose turn it is
	held   bool   // the turn's worker holds it (else it may take it)
}

func newLockstep(next search.Backend, groups [][]int) *lockstep {
	l := &lockstep{next: next, groups: groups}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Join implements search.Turns: worker w waits until all n workers of the
// phase joined and it is w's turn.
func (l *lockstep) Join(ctx context.Context, w, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		l.n, l.joined, l.left, l.turn, l.held = n, make([]bool, n), make([]bool, n), 0, false
	}
	l.joined[w] = true
	l.cond.Broadcast()
	l.take(ctx, w)
	return ctx.Err()
}

// Leave implements search.Turns: worker w returned; the turn passes on,
// and the phase ends with its last worker.
func (l *lockstep) Leave(w int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.left[w] = true
	if l.turn == w {
		l.held = false
		l.advance()
	}
	if !slices.Contains(l.left, false) {
		l.n = 0 // a later phase (confirmation, takeovers) joins afresh
	}
	l.cond.Broadcast()
}

// Start implements search.Backend: the server starts in its worker's
// turn, the other workers take theirs, and the launch returns in the
// worker's next turn.
func (l *lockstep) Start(ctx context.Context, spec launcher.Spec) (search.Running, error) {
	w := l.worker(spec.GPUs)
	srv, err := l.next.Start(ctx, spec)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 || w < 0 || w >= l.n {
		return srv, err // not a worker of a joined phase: no turns
	}
	if l.held && l.turn == w {
		l.held = false
		l.advance()
		l.cond.Broadcast()
	}
	// Interrupted while waiting, the launch returns as it is: the study
	// loop sees the interrupt in its own context.
	l.take(ctx, w)
	return srv, err
}

// worker is the index of the GPU group gpus (0 for a study without
// groups), -1 when it is none of them.
func (l *lockstep) worker(gpus []int) int {
	if len(l.groups) == 0 {
		return 0
	}
	for i, g := range l.groups {
		if slices.Equal(g, gpus) {
			return i
		}
	}
	return -1
}

// take waits, with l.mu held, until every worker joined, none holds the
// turn and it is w's, and takes it; it returns without it once ctx ends.
func (l *lockstep) take(ctx context.Context, w int) {
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.cond.Broadcast()
	})
	defer stop()
	for !(!l.held && l.turn == w && !slices.Contains(l.joined, false)) {
		if ctx.Err() != nil {
			return
		}
		l.cond.Wait()
	}
	l.held = true
}

// advance passes the turn to the next worker that has not left, in
// group order (the same one when it is the only one left).
func (l *lockstep) advance() {
	for i := 1; i <= l.n; i++ {
		if next := (l.turn + i) % l.n; !l.left[next] {
			l.turn = next
			return
		}
	}
}

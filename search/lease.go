package search

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sgtune/sgtune/storage"
)

// leaseWait is how often a worker waiting for a GPU group asks again.
var leaseWait = 2 * time.Second

// groupLease is a held lease on a GPU group, renewed in the background
// until released.
type groupLease struct {
	resource string
	stop     func()
	mu       sync.Mutex
	err      error // set when a renewal found the lease lost
}

// lost returns why the lease was lost (nil while held).
func (l *groupLease) lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// release stops renewing and gives the lease up.
func (l *groupLease) release() { l.stop() }

// groupResource names a GPU group of this host in the storage's leases.
func (r *runner) groupResource(gpus []int) string {
	g := gpuCSV(gpus)
	if g == "" {
		g = "default"
	}
	return "gpus@" + r.host + ":" + g
}

// leaseGroup takes the lease of a GPU group of the study, so that no other
// process on this storage (another `sgtune run` or `worker` of the study,
// another study) runs a server on it meanwhile: pref if it is free, else
// any other group that neither this process nor another holds. Workers
// started one per host with --parallel 1 thus spread over the host's
// groups instead of queueing for the first. It waits while every group is
// held by a live process, breaks the lease of a holder that died on this
// host, and returns a nil lease (no error) when the run ends first: ctx
// cancelled or the budget spent. It returns the group it took.
func (r *runner) leaseGroup(ctx context.Context, pref []int) (*groupLease, []int, error) {
	cands := [][]int{pref}
	for _, g := range r.st.GPUGroups {
		if !slices.Equal(g, pref) {
			cands = append(cands, g)
		}
	}
	waiting := false
	for {
		var busy []string
		for _, gpus := range cands {
			res := r.groupResource(gpus)
			r.mu.Lock()
			mine := r.held[res]
			r.mu.Unlock()
			if mine {
				continue // another worker of this process runs on it
			}
			// The lease lasts the study's stale window, as its trial does: a
			// worker silent that long is dead for the group too, so a
			// re-run of its trial does not wait past it for the GPUs.
			ok, err := r.store.AcquireLease(ctx, r.study.ID, res, r.owner, r.staleWindow())
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil, nil
				}
				return nil, nil, fmt.Errorf("GPU group %s: take its lease: %w", gpuList(gpus), err)
			}
			if ok {
				r.mu.Lock()
				taken := r.held[res] // a worker of this process took it meanwhile
				if !taken {
					if r.held == nil {
						r.held = map[string]bool{}
					}
					r.held[res] = true
				}
				r.mu.Unlock()
				if taken {
					continue
				}
				if waiting {
					r.note("GPU group %s is free: starting", gpuList(gpus))
				}
				l := r.renewLease(res)
				release := l.stop
				l.stop = func() {
					release()
					r.mu.Lock()
					delete(r.held, res)
					r.mu.Unlock()
				}
				return l, gpus, nil
			}
			l, held, err := r.store.LeaseOf(ctx, res)
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil, nil
				}
				return nil, nil, fmt.Errorf("GPU group %s: read its lease: %w", gpuList(gpus), err)
			}
			if held && ownerDead(l.Holder, r.host) {
				if _, err := r.store.BreakLease(ctx, res, l.Holder); err != nil {
					if ctx.Err() != nil {
						return nil, nil, nil
					}
					return nil, nil, fmt.Errorf("GPU group %s: break the lease of dead %s: %w", gpuList(gpus), l.Holder, err)
				}
				return r.leaseGroup(ctx, gpus) // free now: take it first
			}
			if held {
				busy = append(busy, fmt.Sprintf("%s by %s (lease until %s)", gpuList(gpus), l.Holder, l.Expires.Format(time.TimeOnly)))
			}
		}
		held := "held by this run's other workers"
		if len(busy) > 0 {
			held = "in use (" + strings.Join(busy, "; ") + ")"
		}
		if left, err := r.budgetLeft(ctx); err != nil || !left {
			if cancelled(ctx, err) {
				return nil, nil, nil // interrupted: not a storage failure
			}
			if err == nil {
				r.note("every GPU group is %s and the study's budget is spent: nothing to do", held)
			}
			return nil, nil, err
		}
		if !waiting {
			r.note("every GPU group is %s; waiting for one", held)
			waiting = true
		}
		select {
		case <-ctx.Done():
			return nil, nil, nil
		case <-time.After(leaseWait):
		}
	}
}

// renewLease keeps a held lease alive until its release, each renewal
// extending it by the study's stale window.
func (r *runner) renewLease(res string) *groupLease {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l := &groupLease{resource: res}
	go func() { // owned by the lease: ends on release
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(heartbeatEvery):
			}
			err := r.store.RenewLease(ctx, res, r.owner, r.staleWindow())
			if errors.Is(err, storage.ErrLeaseLost) {
				l.mu.Lock()
				l.err = fmt.Errorf("%s: the lease was taken over by another process: %w", res, err)
				l.mu.Unlock()
				return
			}
			// Another error (a busy database) is retried at the next beat.
		}
	}()
	l.stop = func() {
		cancel()
		<-done
		if err := r.store.ReleaseLease(context.Background(), res, r.owner); err != nil && !errors.Is(err, storage.ErrLeaseLost) {
			r.note("could not release the lease of %s: %v (it expires in %s)", res, err, r.staleWindow())
		}
	}
	return l
}

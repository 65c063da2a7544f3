package search

import (
	"context"
	"errors"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
)

// Backend starts the server of a trial. The real one launches a process
// and drives the load generator against it (Processes); bench-search runs
// the simulator's engine in virtual time behind the same interface, so a
// search is tested exactly as it runs.
type Backend interface {
	// Start starts a server and waits until it is ready. A server that
	// failed to start returns a *launcher.Failure; when ctx ends first the
	// error wraps ctx's error.
	Start(ctx context.Context, spec launcher.Spec) (Running, error)
}

// Running is a started, ready server.
type Running interface {
	// Facts are what the server's startup log said.
	Facts() engine.Facts
	// Measure runs a workload against the server. The server dying ends
	// the measurement; Stop then says how it died.
	Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error)
	// Stop ends the server and returns how it ended: nil after a clean
	// stop, else the failure (a crash during the measurement, a hang the
	// measurement saw). err is set when the server could not be stopped
	// or its GPUs were not released: its GPU group must not be used again.
	Stop(ctx context.Context) (f *launcher.Failure, err error)
}

// Processes is the Backend of real trials: launcher.Start and the load
// generator against the server's URL.
type Processes struct {
	// Target fills in what the load generator needs beyond the URL (the
	// served model name, the API key, the engine's metric names).
	Target objective.Target
}

// crashGrace is how long a failed measurement waits for the engine to exit:
// requests fail the moment the engine dies, usually before the process has
// finished writing its traceback and exited.
const crashGrace = 3 * time.Second

// Start implements Backend.
func (p Processes) Start(ctx context.Context, spec launcher.Spec) (Running, error) {
	srv, err := launcher.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	t := p.Target
	t.URL = srv.URL
	return &process{srv: srv, target: t}, nil
}

type process struct {
	srv    *launcher.Server
	target objective.Target
	hung   bool
}

func (p *process) Facts() engine.Facts { return p.srv.Facts }

// LogErr is the error that cut the server's log short (launcher's
// Server.LogErr).
func (p *process) LogErr() error { return p.srv.LogErr() }

// Failure is how the server failed so far (nil while it runs).
func (p *process) Failure() *launcher.Failure { return p.srv.Failure() }

func (p *process) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with the measurement or when the server exits
		select {
		case <-p.srv.Exited():
			cancel()
		case <-mctx.Done():
		}
	}()
	res, err := objective.Run(mctx, p.target, w, opt)
	if err != nil && ctx.Err() == nil {
		select {
		case <-p.srv.Exited():
		case <-time.After(crashGrace):
		}
		if errors.Is(err, objective.ErrHang) && p.srv.Failure() == nil {
			p.srv.MarkHang()
		}
	}
	return res, err
}

func (p *process) Stop(ctx context.Context) (*launcher.Failure, error) {
	crashed := p.srv.Failure()
	err := p.srv.Stop(ctx)
	if crashed == nil {
		crashed = p.srv.Failure()
	}
	return crashed, err
}

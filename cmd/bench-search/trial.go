package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/sim/virtual"
	"github.com/sgtune/sgtune/space"
)

// virtualBackend starts the simulator's engine in virtual time: the study
// loop starts, measures and stops its servers exactly as it does launched
// processes, and classifies their ends from their logs with the
// launcher's own classification.
type virtualBackend struct {
	profile string
	noiseCV float64
	// command is how many words of a trial's argv are the engine command
	// (the rest are the config's flags).
	command int
}

// startDrawn starts a launch with the given simulator and noise seeds.
func (b *virtualBackend) startDrawn(ctx context.Context, spec launcher.Spec, seed, noise uint64) (search.Running, error) {
	if len(spec.Argv) < b.command {
		return nil, fmt.Errorf("virtual launch: argv %q is shorter than the engine command", spec.Argv)
	}
	flags := spec.Argv[b.command:]
	srv, facts, err := startVirtual(ctx, flags, virtual.Options{Profile: b.profile, Seed: seed, NoiseCV: b.noiseCV, NoiseSeed: noise})
	if err != nil {
		return nil, err
	}
	return &virtualRunning{srv: srv, facts: facts}, nil
}

// startVirtual starts a config in virtual time; a startup failure is a
// *launcher.Failure classified from the startup log.
func startVirtual(ctx context.Context, flags []string, opt virtual.Options) (*virtual.Server, engine.Facts, error) {
	srv, err := virtual.Start(ctx, flags, opt)
	var se *virtual.StartupError
	switch {
	case errors.As(err, &se):
		return nil, engine.Facts{}, launcher.ClassifyLog(engine.SGLang, strings.NewReader(strings.Join(se.Log, "\n")+"\n"), se.ExitCode, false)
	case err != nil:
		return nil, engine.Facts{}, err
	}
	facts, err := virtualFacts(srv)
	return srv, facts, err
}

// virtualFacts parses a virtual server's startup log as the launcher does.
func virtualFacts(srv *virtual.Server) (engine.Facts, error) {
	fp := engine.SGLang.NewLogParser()
	for _, l := range srv.Log() {
		fp.Line(l)
	}
	if !fp.Ready() {
		return engine.Facts{}, errors.New("virtual startup: no ready line")
	}
	return fp.Facts(), nil
}

// virtualRunning is a started virtual server.
type virtualRunning struct {
	srv   *virtual.Server
	facts engine.Facts
}

func (v *virtualRunning) Facts() engine.Facts { return v.facts }

func (v *virtualRunning) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	return v.srv.Measure(ctx, w, opt)
}

// Stop implements search.Running: a virtual server that crashed during the
// measurement is classified from its log, as a process would be.
func (v *virtualRunning) Stop(context.Context) (*launcher.Failure, error) {
	return crashOf(v.srv), nil
}

// crashOf classifies how a virtual server ended (nil while it runs).
func crashOf(srv *virtual.Server) *launcher.Failure {
	if code, exited := srv.Exited(); exited {
		return launcher.ClassifyLog(engine.SGLang, strings.NewReader(srv.LogText()), code, true)
	}
	return nil
}

// try measures one launch of a started (or relaunched) virtual server and
// decides its outcome as the study loop does (search.Decide).
func try(ctx context.Context, st *space.Study, srv *virtual.Server, facts engine.Facts) (search.Outcome, error) {
	res, merr := srv.Measure(ctx, st.Workload, objective.Options{})
	if ctx.Err() != nil {
		return search.Outcome{}, ctx.Err()
	}
	return search.Decide(st, nil, facts, res, merr, crashOf(srv)), nil
}

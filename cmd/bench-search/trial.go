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

// simEngine is how the virtual runner speaks a study's engine: the engine
// whose log classification and log parser read the simulator's startup
// (SGLang's, or vLLM's when the command says --sim-engine vllm), and the
// simulator words of the study's command that shape the server.
type simEngine struct {
	kind *engine.Engine
	// command is how many words of a trial's argv are the engine command
	// (the rest are the config's flags, vLLM's positional model first).
	command int
	// words are the command's --sim-* words passed to virtual.Start before
	// the config's flags (--sim-engine vllm, say); --sim-profile and
	// --sim-speedup are left to virtual.Options and virtual time.
	words []string
}

// newSimEngine is the virtual runner's view of st's engine.
func newSimEngine(st *space.Study) simEngine {
	kind := st.Engine.Kind
	if kind == nil {
		kind = engine.SGLang
	}
	return simEngine{kind: kind, command: len(st.Engine.Command), words: simWords(st.Engine.Command)}
}

// simWords are the --sim-* words of an engine command (each flag with its
// value), without --sim-profile and --sim-speedup.
func simWords(command []string) []string {
	var out []string
	for i := 0; i < len(command); i++ {
		w := command[i]
		if !strings.HasPrefix(w, "--sim-") {
			continue
		}
		name, _, inline := strings.Cut(w, "=")
		words := []string{w}
		if !inline && i+1 < len(command) {
			i++
			words = append(words, command[i])
		}
		if name != "--sim-profile" && name != "--sim-speedup" {
			out = append(out, words...)
		}
	}
	return out
}

// args is what virtual.Start runs for a trial's full argv: the
// simulator words, then the config's flags.
func (e simEngine) args(argv []string) ([]string, error) {
	if len(argv) < e.command {
		return nil, fmt.Errorf("virtual launch: argv %q is shorter than the engine command", argv)
	}
	return append(append([]string(nil), e.words...), argv[e.command:]...), nil
}

// virtualBackend starts the simulator's engine in virtual time: the study
// loop starts, measures and stops its servers exactly as it does launched
// processes, and classifies their ends from their logs with the engine's
// own classification.
type virtualBackend struct {
	profile string
	noiseCV float64
	eng     simEngine
}

// startDrawn starts a launch with the given simulator and noise seeds.
func (b *virtualBackend) startDrawn(ctx context.Context, spec launcher.Spec, seed, noise uint64) (search.Running, error) {
	srv, facts, err := startVirtual(ctx, b.eng, spec.Argv, virtual.Options{Profile: b.profile, Seed: seed, NoiseCV: b.noiseCV, NoiseSeed: noise})
	if err != nil {
		return nil, err
	}
	return &virtualRunning{srv: srv, facts: facts, kind: b.eng.kind}, nil
}

// startVirtual starts a trial's argv in virtual time; a startup failure is
// a *launcher.Failure classified from the startup log by the engine's
// rules.
func startVirtual(ctx context.Context, eng simEngine, argv []string, opt virtual.Options) (*virtual.Server, engine.Facts, error) {
	args, err := eng.args(argv)
	if err != nil {
		return nil, engine.Facts{}, err
	}
	srv, err := virtual.Start(ctx, args, opt)
	var se *virtual.StartupError
	switch {
	case errors.As(err, &se):
		return nil, engine.Facts{}, launcher.ClassifyLog(eng.kind, strings.NewReader(strings.Join(se.Log, "\n")+"\n"), se.ExitCode, false)
	case err != nil:
		return nil, engine.Facts{}, err
	}
	facts, err := virtualFacts(eng.kind, srv)
	return srv, facts, err
}

// virtualFacts parses a virtual server's startup log as the launcher does.
func virtualFacts(kind *engine.Engine, srv *virtual.Server) (engine.Facts, error) {
	fp := kind.NewLogParser()
	for _, l := range srv.Log() {
		fp.Line(l)
	}
	if !fp.Ready() {
		return engine.Facts{}, fmt.Errorf("virtual startup: no %s ready line", kind.Name)
	}
	return fp.Facts(), nil
}

// virtualRunning is a started virtual server.
type virtualRunning struct {
	srv   *virtual.Server
	facts engine.Facts
	kind  *engine.Engine
}

func (v *virtualRunning) Facts() engine.Facts { return v.facts }

func (v *virtualRunning) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	return v.srv.Measure(ctx, w, opt)
}

// Stop implements search.Running: a virtual server that crashed during the
// measurement is classified from its log, as a process would be.
func (v *virtualRunning) Stop(context.Context) (*launcher.Failure, error) {
	return crashOf(v.kind, v.srv), nil
}

// crashOf classifies how a virtual server ended (nil while it runs).
func crashOf(kind *engine.Engine, srv *virtual.Server) *launcher.Failure {
	if code, exited := srv.Exited(); exited {
		return launcher.ClassifyLog(kind, strings.NewReader(srv.LogText()), code, true)
	}
	return nil
}

// try measures one launch of a started (or relaunched) virtual server and
// decides its outcome as the study loop does (search.Decide).
func try(ctx context.Context, st *space.Study, kind *engine.Engine, srv *virtual.Server, facts engine.Facts) (search.Outcome, error) {
	res, merr := srv.Measure(ctx, st.Workload, objective.Options{})
	if ctx.Err() != nil {
		return search.Outcome{}, ctx.Err()
	}
	return search.Decide(st, nil, facts, res, merr, crashOf(kind, srv)), nil
}

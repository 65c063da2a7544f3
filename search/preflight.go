package search

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/space"
)

// Preflight is what a study needs before anything is written. `sgtune
// check` prints it and `sgtune run` refuses to start on its Err, so the two
// can never disagree about a space.
type Preflight struct {
	Survey space.Survey
	// APIKey is the server API key the study names ("" for none).
	APIKey string
	// SpaceSize is the number of distinct configs when the space was
	// enumerated, else 0: once every one has a trial, the study is done.
	SpaceSize int
	// Invalid lists what makes the file unusable although it loaded: a
	// sampler that cannot be built for its space.
	Invalid []error
	// Host lists what stops `sgtune run` on this machine although the file
	// is valid (the engine command, the API key).
	Host []error
	// Runtime lists what is wrong with the study's container runtime
	// (engine.container): not installed, its daemon not answering, the
	// image missing. check and run both refuse them (exit 2): every
	// launch would fail the same way.
	Runtime []error
	// ImageID is the ID the container runtime gives engine.container.image
	// ("" without a container, or when it has no such image).
	ImageID string
	// Warnings are valid but probably not what the user wants.
	Warnings []string
	// grid is the grid sampler's points (budget.sampler grid, else nil),
	// built here and handed to the run's sampler rather than built again.
	grid []map[string]float64
}

// topReasons is how many rejection reasons a no-feasible error names.
const topReasons = 3

// Check surveys a study's space with space.DefaultSurveyLimits and checks
// what each trial needs on this machine. It writes nothing and launches
// nothing.
func Check(st *space.Study, getenv func(string) string) Preflight {
	kind := st.Engine.Kind
	lim := space.DefaultSurveyLimits
	tools := st.Workload.Quality.Enabled && st.Workload.WithDefaults().Quality.ToolRequests > 0 && kind.ToolParserFlag != ""
	if tools {
		lim.Track = []string{kind.ToolParserFlag}
	}
	p := Preflight{Survey: st.Survey(lim)}
	// run builds the sampler only once the study is opened (its database
	// and log directory written): one that cannot be built is refused
	// here, where check sees it too.
	var err error
	if _, p.grid, err = newSampler(st, nil, nil); err != nil {
		p.Invalid = append(p.Invalid, fmt.Errorf("%s: budget.sampler: %w", st.Path, err))
	}
	if p.Survey.Enumerated {
		p.SpaceSize = p.Survey.Size
	}
	if tools && p.Survey.Feasible > 0 && p.Survey.Carrying[kind.ToolParserFlag] == 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"the quality gate asks for tool calls (workload.quality) but no feasible config passes %s: every trial will fail its tool-call gate; add %s to fixed",
			kind.ToolParserFlag, kind.ToolParserFlag))
	}
	if st.SchemaStandIn {
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"%s: engine.version %s: sgtune bundles no flag schema for it; flags and rules are checked as for %s %s (%s), which may refuse what that version accepts or pass what it refuses; engine.flags_schema FILE gives that version's flags",
			st.Path, st.Engine.Version, kind.Name, kind.DefaultVersion, st.Schema.Source))
	}
	switch {
	case len(st.Engine.Command) == 0:
		p.Host = append(p.Host, fmt.Errorf("%s: engine.command is empty", st.Path))
	case st.Engine.Container != nil:
		// The command runs inside the image, not on this host.
		p.ImageID, p.Runtime = probeContainer(st)
	default:
		if _, err := exec.LookPath(st.Engine.Command[0]); err != nil {
			p.Host = append(p.Host, fmt.Errorf("%s: engine.command: cannot run %q: %v (is it installed and on PATH?)",
				st.Path, st.Engine.Command[0], errors.Unwrap(err)))
		}
	}
	key, err := apiKey(st, getenv)
	if err != nil {
		p.Host = append(p.Host, err)
	}
	p.APIKey = key
	return p
}

// NoFeasible reports a space in which no checked config passes the rules:
// a search over it could launch nothing. It names the most frequent reasons
// and is bad input (exit code 2).
func (p *Preflight) NoFeasible() error {
	sv := &p.Survey
	if sv.Feasible > 0 || sv.Checked == 0 {
		return nil
	}
	rs := slices.Clone(sv.Rejections)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Count > rs[j].Count })
	var why []string
	for _, r := range rs[:min(len(rs), topReasons)] {
		why = append(why, fmt.Sprintf("%s: %s (%d configs)", r.Rule, r.Message, r.Count))
	}
	why = append(why, sv.Errors[:min(len(sv.Errors), topReasons)]...)
	scope := fmt.Sprintf("none of its %d configs", sv.Checked)
	if !sv.Enumerated {
		scope = fmt.Sprintf("none of %d sampled configs", sv.Checked)
	}
	return errext.Bad(fmt.Errorf("study %s: no feasible config: %s passes the rules; top reasons: %s (see sgtune check)",
		sv.Study, scope, strings.Join(why, "; ")))
}

// Err is what stops `sgtune run`: a file it cannot search, no feasible
// config, or a problem of this machine (bad input either way: nothing is
// written).
func (p *Preflight) Err() error {
	if len(p.Invalid) > 0 {
		return errext.Bad(errors.Join(p.Invalid...))
	}
	if err := p.NoFeasible(); err != nil {
		return err
	}
	if len(p.Runtime) > 0 {
		return errext.Bad(errors.Join(p.Runtime...))
	}
	if len(p.Host) > 0 {
		return errext.Bad(errors.Join(p.Host...))
	}
	return nil
}

// probeContainer checks that the study's container runtime is installed,
// that its daemon answers and that it holds the image (runs never pull).
func probeContainer(st *space.Study) (string, []error) {
	c := st.Engine.Container
	cl, err := container.NewClient(c.RuntimeName())
	if err != nil {
		return "", []error{fmt.Errorf("%s: engine.container.runtime: %w; valid: a host with %s installed", st.Path, err, c.RuntimeName())}
	}
	ctx := context.Background()
	if err := cl.Ping(ctx); err != nil {
		return "", []error{fmt.Errorf("%s: engine.container.runtime: %w; valid: a running %s daemon this user may use (DOCKER_HOST or CONTAINER_HOST names another socket)", st.Path, err, cl.Name)}
	}
	id, err := cl.ImageID(ctx, c.Image)
	if err != nil {
		return "", []error{fmt.Errorf("%s: engine.container.image: %w; valid: an image present on this host (%s pull %s, or %s load); trials never pull",
			st.Path, err, cl.Name, c.Image, cl.Name)}
	}
	return id, nil
}

// apiKey reads the server API key the study names, if any.
func apiKey(st *space.Study, getenv func(string) string) (string, error) {
	if env := st.Launch.APIKeyEnv; env != "" {
		k := getenv(env)
		if k == "" {
			return "", fmt.Errorf("launch.api_key_env: environment variable %s is empty or unset", env)
		}
		return k, nil
	}
	if f := st.Launch.APIKeyFile; f != "" {
		if !filepath.IsAbs(f) && st.Path != "" {
			f = filepath.Join(filepath.Dir(st.Path), f)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("launch.api_key_file: %v", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return "", nil
}

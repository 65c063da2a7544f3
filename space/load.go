package space

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/shell"
)

// Defaults applied by Load.
var (
	DefaultConcurrency  = []int{1, 16, 64, 128}
	DefaultRequests     = []int{8, 32, 256, 512}
	DefaultMaxTokens    = 256
	DefaultRepeats      = 3
	DefaultJSONRequests = 24
	DefaultToolRequests = 8
	DefaultTrials       = 20
	DefaultSampler      = "bayes"
	// Multi-fidelity: prune a trial whose early level reaches less than
	// this fraction of the best complete trial's at that level, once this
	// many complete trials measured it.
	DefaultPruneFraction    = 0.5
	DefaultPruneMinComplete = 3
	// DefaultConfirm: no configs are measured again after the search; the
	// default sampler races its contenders inside the budget instead.
	DefaultConfirm        = 0
	DefaultStartupTimeout = 20 * time.Minute
	// MaxGridConfigs bounds the space sampler grid lists before its first
	// trial. It holds every config in memory (about 250 MB, built in 2s, at
	// a million configs of four params) and launches them one per trial: a
	// million launches of a minute each take two years, so a larger grid is
	// a mistake in the steps, not a plan.
	MaxGridConfigs = 1000000
	// Samplers are the values budget.sampler accepts (search/sampler's
	// names and the search's own bayes; a test keeps the lists equal):
	// bayes (the search's model, the default), and the baselines random,
	// grid (the space in order) and tpe (goptuna's TPE).
	Samplers = []string{"bayes", "grid", "random", "tpe"}
)

// Load reads and validates a study file. Every problem is reported as
// file:line:col: field: what is wrong; what is valid, and the error wraps
// ErrInvalid.
func Load(path string) (*Study, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Parse(path, data)
}

// Parse validates a study document; path is used in messages and to resolve
// relative paths in it.
func Parse(path string, data []byte) (*Study, error) {
	d := &dec{file: path, lines: strings.Split(string(data), "\n")}
	var doc yaml.Node
	second, err := unmarshal(data, &doc)
	if err != nil {
		d.syntaxError(err)
		return nil, &LoadError{Errs: d.errs}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		d.failAt(1, 1, "", "empty study file; valid: a mapping with name, engine, model, params, ...")
		return nil, &LoadError{Errs: d.errs}
	}
	if second != nil {
		// The first document alone would be the study: a second one
		// (another study pasted below, or the rest of this one after a
		// stray ---) would be silently ignored.
		d.fail(second, "", "a second YAML document starts here; a study file holds one document; valid: one study per file (remove this --- and move what follows to a file of its own, or join it to the study above)")
	}
	st := &Study{Path: path}
	d.study(st, doc.Content[0])
	if len(d.errs) > 0 {
		// In the file's order, whatever order the sections were checked in.
		slices.SortStableFunc(d.errs, func(a, b *FieldError) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
		})
		return nil, &LoadError{Errs: d.errs}
	}
	return st, nil
}

// unmarshal parses the YAML document of a study file into doc (left zero
// for a file with none) and returns the next document when the file holds
// more than one, bar an empty one (a trailing ---). A panic in the YAML
// library on odd input becomes an error so that the CLI reports it as bad
// input.
func unmarshal(data []byte, doc *yaml.Node) (second *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			second, err = nil, fmt.Errorf("cannot parse: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	for {
		var next yaml.Node
		switch err := dec.Decode(&next); {
		case errors.Is(err, io.EOF):
			return nil, nil
		case err != nil:
			return nil, err
		}
		if c := next.Content; len(c) == 1 && c[0].Kind == yaml.ScalarNode && c[0].ShortTag() == "!!null" && c[0].Value == "" {
			continue // nothing but --- (and comments): nothing ignored
		}
		return &next, nil
	}
}

var (
	identRE   = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

var reservedNames = []string{"and", "or", "not", "in", "true", "false", "null", "min", "max", "abs", "predicted", "gpus_per_trial"}

func (d *dec) study(st *Study, root *yaml.Node) {
	m := d.mapping(root, "", "name", "engine", "model", "memory", "fixed", "gpus", "cpus", "params", "derived",
		"constraints", "on_limits_reduced", "workload", "score", "budget", "launch")
	if m.n == nil || m.n.Kind != yaml.MappingNode {
		return
	}
	if !m.str("name", &st.Name) {
		if !m.has("name") {
			m.failKey("name", "missing; valid: a study name such as glm-flash-h200x4")
		}
	} else if strings.TrimSpace(st.Name) == "" || strings.ContainsAny(st.Name, "\n\t") {
		m.failKey("name", "empty or multi-line; valid: a one-line study name")
	}
	// gpus and budget read differently when Slurm places the trials;
	// launch validates the scheduler itself later.
	st.Launch.Scheduler = peekScheduler(m)
	d.engine(st, m)
	d.model(st, m)
	d.memory(st, m)
	d.gpus(st, m)
	d.cpus(st, m)
	if st.Schema == nil {
		return
	}
	d.fixed(st, m)
	d.params(st, m)
	d.derived(st, m)
	d.constraints(st, m)
	d.sharedFlags(st) // after constraints: one may keep two writers apart
	st.OnLimitsReduced = "reject"
	if m.str("on_limits_reduced", &st.OnLimitsReduced) && st.OnLimitsReduced != "reject" && st.OnLimitsReduced != "accept" {
		m.failKey("on_limits_reduced", "%q; valid: reject (default) or accept", st.OnLimitsReduced)
	}
	d.workload(st, m)
	d.score(st, m)
	d.budget(st, m)
	if src := st.Workload.Chat.Source; src != nil && src.Seed == 0 {
		src.Seed = uint64(st.Budget.Seed)
	}
	d.launch(st, m)
}

// command decodes an engine command: a shell-style string or a list of words,
// never with --host/--port (the launcher adds them).
func (d *dec) command(m *mapNode, key string, n *yaml.Node) []string {
	var words []string
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		var err error
		words, err = shell.Split(n.Value)
		switch {
		case err != nil:
			m.failKey(key, "cannot split %q: %v; valid: a shell-style command line", n.Value, err)
		case len(words) == 0:
			m.failKey(key, "empty; valid: a shell-style command line such as \"python3 -m sglang.launch_server\"")
		}
	case n.Kind == yaml.SequenceNode && len(n.Content) > 0:
		for i, c := range n.Content {
			if s, ok := d.scalarString(c, fmt.Sprintf("engine.%s[%d]", key, i)); ok {
				words = append(words, s)
			}
		}
	default:
		m.failKey(key, "got %s; valid: a string or a non-empty list of words", kindName(n))
	}
	for _, w := range words {
		if w == "--host" || w == "--port" || strings.HasPrefix(w, "--host=") || strings.HasPrefix(w, "--port=") {
			m.failKey(key, "contains %s; valid: a command without --host/--port (the launcher adds them)", w)
		}
	}
	return words
}

func (d *dec) engine(st *Study, top *mapNode) {
	valid := strings.Join(engine.Names(), ", ")
	if !top.has("engine") {
		top.failKey("engine", "missing; valid: engine: {name: NAME, command: ...} with NAME one of %s", valid)
		return
	}
	m := d.mapping(top.node("engine"), "engine", "name", "command", "launch_command", "version", "env", "flags_schema", "container")
	st.Engine.Name = engine.SGLang.Name
	m.str("name", &st.Engine.Name)
	kind, err := engine.Lookup(st.Engine.Name)
	if err != nil {
		m.failKey("name", "%q; valid: %s", st.Engine.Name, valid)
		return
	}
	st.Engine.Kind = kind
	if n := m.node("command"); n == nil {
		m.failKey("command", "missing; valid: a command such as %s, or a list of words", strings.Join(kind.Command, " "))
	} else {
		st.Engine.Command = d.command(m, "command", n)
	}
	if n := m.node("launch_command"); n != nil {
		st.Engine.LaunchCommand = d.command(m, "launch_command", n)
	}
	m.str("version", &st.Engine.Version)
	if n := m.node("container"); n != nil {
		st.Engine.Container = d.container(n)
		if st.Slurmed() {
			m.failKey("container", "not run by sgtune with launch.scheduler slurm; valid: leave engine.container out and name the cluster's container launcher in engine.command (docs/study-file.md, \"Containers\")")
		}
	}
	if n := m.node("env"); n != nil {
		if n.Kind != yaml.MappingNode {
			m.failKey("env", "got %s; valid: a mapping of NAME: value", kindName(n))
		} else {
			st.Engine.Env = map[string]string{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if !envNameRE.MatchString(k) {
					d.fail(n.Content[i], "engine.env."+k, "not an environment variable name; valid: letters, digits and _")
					continue
				}
				if v, ok := d.scalarString(n.Content[i+1], "engine.env."+k); ok {
					st.Engine.Env[k] = v
				}
			}
		}
	}
	// The flag schema: an explicit file, else the bundled one for the version.
	var schemaPath string
	if m.str("flags_schema", &schemaPath) {
		if !filepath.IsAbs(schemaPath) {
			schemaPath = filepath.Join(filepath.Dir(st.Path), schemaPath)
		}
		s, err := engine.LoadSchemaFile(schemaPath)
		switch {
		case err != nil:
			m.failKey("flags_schema", "%v; valid: a flag schema file like testdata/flags/%s-%s.yaml", err, kind.Name, kind.DefaultVersion)
		case s.Engine != kind.Name:
			m.failKey("flags_schema", "%s is a schema for engine %q; valid: a schema for %s", schemaPath, s.Engine, kind.Name)
		default:
			st.Schema, st.SchemaFile = s, schemaPath
		}
		return
	}
	s, ok, err := kind.Schema(st.Engine.Version)
	if err != nil {
		m.failKey("version", "no flag schema: %v", err)
		return
	}
	st.Schema, st.SchemaStandIn = s, !ok && st.Engine.Version != ""
}

// container decodes engine.container: the image every trial's command runs
// in, and the runtime and run options to run it with.
func (d *dec) container(n *yaml.Node) *container.Spec {
	m := d.mapping(n, "engine.container", "runtime", "image", "options", "volumes")
	c := &container.Spec{}
	if m.str("runtime", &c.Runtime) && !slices.Contains(container.Runtimes, c.Runtime) {
		m.failKey("runtime", "%q; valid: %s", c.Runtime, strings.Join(container.Runtimes, " or "))
	}
	if !m.str("image", &c.Image) && !m.has("image") {
		m.failKey("image", "missing; valid: an image by tag or digest, e.g. lmsysorg/sglang:v0.5.21")
	} else if m.has("image") && strings.TrimSpace(c.Image) == "" {
		m.failKey("image", "empty; valid: an image by tag or digest, e.g. lmsysorg/sglang:v0.5.21")
	}
	c.Options = d.words(m, "options")
	if o := container.ReservedOption(c.Options); o != "" {
		m.failKey("options", "contains %s, which sgtune sets itself (name, labels, GPUs, host network, no pull, kept until removed); valid: other run options such as --ipc=host, --shm-size=32g", o)
	}
	c.Volumes = d.words(m, "volumes")
	for i, v := range c.Volumes {
		if !strings.Contains(v, ":") {
			d.fail(m.node("volumes").Content[i], fmt.Sprintf("engine.container.volumes[%d]", i), "%q; valid: HOST_PATH:CONTAINER_PATH[:ro]", v)
		}
	}
	return c
}

// words decodes an optional list of strings (or one shell-style string).
func (d *dec) words(m *mapNode, key string) []string {
	n := m.node(key)
	if n == nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		w, err := shell.Split(n.Value)
		if err != nil {
			m.failKey(key, "cannot split %q: %v; valid: a list of words", n.Value, err)
		}
		return w
	}
	var out []string
	for i, c := range m.list(key) {
		if s, ok := d.scalarString(c, fmt.Sprintf("%s[%d]", join(m.path, key), i)); ok {
			out = append(out, s)
		}
	}
	return out
}

func (d *dec) model(st *Study, top *mapNode) {
	n := top.node("model")
	// blame is where a problem with the path is reported.
	blame := func(format string, args ...any) { top.failKey("model", format, args...) }
	field := "model"
	switch {
	case n == nil:
		top.failKey("model", "missing; valid: model: {path: org/name} or model: org/name")
		return
	case n.Kind == yaml.ScalarNode:
		top.str("model", &st.Model)
	default:
		m := d.mapping(n, "model", "path", "served_name", "hybrid", "moe", "revision")
		if !m.str("path", &st.Model) && !m.has("path") {
			m.failKey("path", "missing; valid: a model path or Hugging Face id")
		}
		m.str("served_name", &st.ServedModelName)
		m.bool("hybrid", &st.Hybrid)
		m.bool("moe", &st.MoE)
		m.str("revision", &st.ModelRevision)
		blame = func(format string, args ...any) { m.failKey("path", format, args...) }
		field = "model.path"
	}
	if strings.Contains(st.Model, "$") {
		st.Model = expandEnv(st.Model, field, blame)
	}
	if st.Model == "" && len(d.errs) == 0 {
		top.failKey("model", "empty; valid: a model path or Hugging Face id")
	}
}

// envRefRE matches $NAME and ${NAME} (and a lone $) in model.path.
var envRefRE = regexp.MustCompile(`\$(\{[^}]*\}?|[A-Za-z_][A-Za-z0-9_]*)?`)

// expandEnv replaces $NAME and ${NAME} in a model path with the variable's
// value: a model built into a cache, such as `make llama-server`'s, is
// named by the variable its build prints. An unset or empty variable is bad
// input (reported through blame): a trial must not start on a path that is
// not the model.
func expandEnv(path, field string, blame func(format string, args ...any)) string {
	bad := false
	out := envRefRE.ReplaceAllStringFunc(path, func(ref string) string {
		name := strings.TrimPrefix(ref, "$")
		if strings.HasPrefix(name, "{") {
			name = strings.TrimSuffix(strings.TrimPrefix(name, "{"), "}")
			if !strings.HasSuffix(ref, "}") {
				name = ""
			}
		}
		if !envNameRE.MatchString(name) {
			blame("%q: %q is not a variable reference; valid: $NAME or ${NAME}", path, ref)
			bad = true
			return ref
		}
		v := os.Getenv(name)
		if v == "" {
			blame("%s refers to $%s, which is not set; valid: export %s=PATH to the model, or write the path itself in %s", path, name, name, field)
			bad = true
		}
		return v
	})
	if bad {
		return path
	}
	return out
}

func (d *dec) memory(st *Study, top *mapNode) {
	n := top.node("memory")
	if n == nil {
		return
	}
	m := d.mapping(n, "memory", "reference", "kv_tokens_per_state_slot", "kv_tokens_per_mem_fraction_point",
		"speculative_kv_tokens", "kv_tokens_per_speculative_state")
	mem := &st.Memory
	if !m.has("reference") {
		m.failKey("reference", "missing; valid: reference: {kv_tokens: N, mem_fraction_static: F, state_slots: S} from one startup log")
	} else {
		r := d.mapping(m.node("reference"), "memory.reference", "kv_tokens", "mem_fraction_static", "gpu_memory_utilization", "state_slots")
		r.int("kv_tokens", &mem.RefKVTokens)
		r.float("mem_fraction_static", &mem.RefMemFraction)
		// vLLM's startups are sized by --gpu-memory-utilization; the hint
		// keeps one reference fraction whatever the engine calls it.
		if r.has("gpu_memory_utilization") {
			if r.has("mem_fraction_static") {
				r.failKey("gpu_memory_utilization", "given with mem_fraction_static; valid: one of the two (the reference startup's fraction)")
			}
			r.float("gpu_memory_utilization", &mem.RefMemFraction)
		}
		r.int("state_slots", &mem.RefStateSlots)
		if mem.RefKVTokens <= 0 {
			r.failKey("kv_tokens", "must be a positive integer; valid: the #tokens of a KV Cache is allocated line")
		}
		if mem.RefMemFraction <= 0 || mem.RefMemFraction > 1 {
			r.failKey("mem_fraction_static", "must be in (0, 1]; valid: the --mem-fraction-static (SGLang) or gpu_memory_utilization: the --gpu-memory-utilization (vLLM) of that startup")
		}
		if mem.RefStateSlots < 0 {
			r.failKey("state_slots", "must be >= 0")
		}
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{
		{"kv_tokens_per_state_slot", &mem.PerStateSlot}, {"kv_tokens_per_mem_fraction_point", &mem.PerMemFractionPoint},
		{"speculative_kv_tokens", &mem.SpecFixed}, {"kv_tokens_per_speculative_state", &mem.PerSpecState},
	} {
		if m.float(f.key, f.dst) && *f.dst < 0 {
			m.failKey(f.key, "%v is negative; valid: >= 0", *f.dst)
		}
	}
}

func (d *dec) gpus(st *Study, top *mapNode) {
	st.GPUsPerTrial = 1
	m := d.mapping(top.node("gpus"), "gpus", "per_trial", "groups")
	if m.int("per_trial", &st.GPUsPerTrial) && st.GPUsPerTrial < 1 {
		m.failKey("per_trial", "%d; valid: an integer >= 1", st.GPUsPerTrial)
		return
	}
	groups := m.list("groups")
	if m.has("groups") && st.Slurmed() {
		m.failKey("groups", "not used with launch.scheduler slurm (Slurm places each trial on the GPUs it allocates); valid: leave gpus.groups out")
		return
	}
	if !m.has("groups") {
		g := make([]int, st.GPUsPerTrial)
		for i := range g {
			g[i] = i
		}
		st.GPUGroups = [][]int{g}
		return
	}
	if len(groups) == 0 {
		m.failKey("groups", "empty; valid: a list of GPU id lists such as [[0,1,2,3],[4,5,6,7]]")
	}
	seen := map[int]bool{}
	for i, g := range groups {
		path := fmt.Sprintf("gpus.groups[%d]", i)
		g = deref(g)
		if g.Kind != yaml.SequenceNode {
			d.fail(g, path, "got %s; valid: a list of GPU ids such as [0,1,2,3]", kindName(g))
			continue
		}
		var ids []int
		for j, c := range g.Content {
			id, ok := d.intOf(deref(c), fmt.Sprintf("%s[%d]", path, j))
			if !ok {
				continue
			}
			if id < 0 {
				d.fail(c, fmt.Sprintf("%s[%d]", path, j), "GPU id %d; valid: >= 0", id)
			} else if seen[id] {
				d.fail(c, fmt.Sprintf("%s[%d]", path, j), "GPU %d is in two groups; valid: disjoint groups", id)
			}
			seen[id] = true
			ids = append(ids, id)
		}
		if len(g.Content) != st.GPUsPerTrial {
			d.fail(g, path, "%d GPUs; valid: exactly gpus.per_trial = %d", len(g.Content), st.GPUsPerTrial)
		}
		st.GPUGroups = append(st.GPUGroups, ids)
	}
}

// cpus reads cpus.per_trial: how many CPU cores one trial's server may use
// (CPU engines such as llama.cpp; the rules check thread counts against it).
func (d *dec) cpus(st *Study, top *mapNode) {
	if !top.has("cpus") {
		return
	}
	m := d.mapping(top.node("cpus"), "cpus", "per_trial")
	if !m.int("per_trial", &st.CPUsPerTrial) {
		if !m.has("per_trial") {
			m.failKey("per_trial", "missing; valid: the number of CPU cores a trial's server may use, e.g. 2")
		}
		return
	}
	if st.CPUsPerTrial < 1 {
		m.failKey("per_trial", "%d; valid: an integer >= 1", st.CPUsPerTrial)
	}
}

// checkFlagTokens validates engine flag words a study emits.
// flagNode is where a flag was written in the study file.
type flagNode struct {
	node *yaml.Node
	path string
}

// checkFlagTokens parses words with the study's schema and refuses flags a
// study must not set, at the flag's place in at (by the name as written)
// or else at n.
func (d *dec) checkFlagTokens(st *Study, n *yaml.Node, path string, words []string, at map[string]flagNode) []engine.FlagArg {
	args, err := st.Schema.ParseArgv(words)
	if err != nil {
		d.fail(n, path, "%v", err)
		return nil
	}
	fail := func(a engine.FlagArg, format string, args ...any) {
		if w, ok := at[a.Name]; ok {
			d.fail(w.node, w.path, format, args...)
			return
		}
		d.fail(n, path, format, args...)
	}
	model, _ := st.Schema.Lookup(st.Engine.Kind.ModelFlag)
	served, _ := st.Schema.Lookup(st.Engine.Kind.ServedNameFlag)
	apiKey, _ := st.Schema.Lookup(st.Engine.Kind.APIKeyFlag)
	for _, a := range args {
		switch {
		case apiKey != nil && a.Spec == apiKey:
			// A key written here reached every trial's log, status --json
			// and no request: the load generator sends the launch's key.
			fail(a, "%s sets the server's API key; valid: launch.api_key_env or launch.api_key_file, which the load generator sends too and no log or export records", a.Name)
		case a.Spec.Owner == "launcher":
			fail(a, "%s is set by the launcher; valid: leave it out", a.Name)
		case a.Spec == model:
			fail(a, "%s comes from model.path; valid: leave it out", a.Name)
		case a.Spec == served:
			fail(a, "%s comes from model.served_name; valid: leave it out", a.Name)
		}
	}
	return args
}

func (d *dec) fixed(st *Study, top *mapNode) {
	n := top.node("fixed")
	st.Fixed = map[string]string{}
	st.fixedSettings = map[string]fixedSetting{}
	if n == nil {
		return
	}
	var words []string
	at := map[string]flagNode{} // each flag's place, for the checks below
	switch n.Kind {
	case yaml.ScalarNode:
		w, err := shell.Split(n.Value)
		if err != nil {
			d.fail(n, "fixed", "%v; valid: shell-style flags", err)
		}
		words = w
	case yaml.SequenceNode:
		for i, c := range n.Content {
			s, ok := d.scalarString(c, fmt.Sprintf("fixed[%d]", i))
			if !ok {
				continue
			}
			w, err := shell.Split(s)
			if err != nil {
				d.fail(c, fmt.Sprintf("fixed[%d]", i), "%v; valid: shell-style flags", err)
			}
			for _, word := range w {
				if _, seen := at[word]; !seen {
					at[word] = flagNode{c, fmt.Sprintf("fixed[%d]", i)}
				}
			}
			words = append(words, w...)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], deref(n.Content[i+1])
			path := "fixed." + k.Value
			at[k.Value] = flagNode{k, path}
			spec, ok := st.Schema.Lookup(k.Value)
			if !ok {
				d.fail(k, path, "unknown flag %s (did you mean %s?); valid: a flag of %s", k.Value, st.Schema.Closest(k.Value), st.Schema.Source)
				continue
			}
			if spec.Type == "bool" {
				switch on := v.Value == "true" || v.Value == "True" || v.Value == "TRUE"; {
				case scalarTag(v) != "!!bool":
					d.fail(v, path, "%s is a switch; valid: true or false", k.Value)
				case st.Schema.IsNegation(k.Value):
					d.fail(k, path, "%s is the negation of %s; valid: %s: false", k.Value, spec.Name, spec.Name)
				case on:
					words = append(words, k.Value)
				case spec.Negation() != "":
					// Off is written as the negation (llama.cpp's
					// --no-cont-batching, vLLM's --no-NAME); leaving it out
					// keeps the default.
					words = append(words, spec.Negation())
					if _, seen := at[spec.Negation()]; !seen {
						at[spec.Negation()] = flagNode{k, path}
					}
				default:
					// Off writes nothing (a switch with no negation), yet
					// the setting is fixed: a param may not search it.
					st.fixedSettings[spec.Setting()] = fixedSetting{path: path}
				}
				continue
			}
			if v.Kind == yaml.SequenceNode && spec.Nargs == "+" {
				words = append(words, k.Value)
				for j, c := range v.Content {
					if s, ok := d.scalarString(c, fmt.Sprintf("%s[%d]", path, j)); ok {
						words = append(words, s)
					}
				}
				continue
			}
			s, ok := d.scalarString(v, path)
			if !ok {
				continue
			}
			if err := spec.ValidateValue(s); err != nil {
				d.fail(v, path, "%v", err)
				continue
			}
			words = append(words, k.Value, s)
		}
	default:
		d.fail(n, "fixed", "got %s; valid: a mapping of flag: value, a list, or a string of flags", kindName(n))
	}
	args := d.checkFlagTokens(st, n, "fixed", words, at)
	for _, a := range args {
		w, ok := at[a.Name]
		if !ok {
			w = flagNode{n, "fixed"}
		}
		if _, dup := st.Fixed[a.Spec.Name]; dup {
			d.fail(w.node, w.path, "%s given twice; valid: each flag once", a.Name)
		} else if f, dup := st.fixedSettings[a.Spec.Setting()]; dup {
			d.fail(w.node, w.path, "%s sets the switch that %s; valid: one of them", a.Name, f.says())
		}
		st.Fixed[a.Spec.Name] = strings.Join(a.Values, " ")
		st.fixedSettings[a.Spec.Setting()] = fixedSetting{path: w.path, word: a.Name}
	}
	st.fixedArgv = words
}

// fixedSetting is where fixed sets an engine setting (engine.FlagSpec.Setting)
// and the word it writes there: "" where false writes nothing.
type fixedSetting struct{ path, word string }

// says tells what fixed does with the setting, for messages.
func (f fixedSetting) says() string {
	if f.word == "" {
		return f.path + " is false, which writes nothing"
	}
	return f.path + " writes " + f.word
}

// fixedConflict says why a flag a param or derived entry writes clashes
// with fixed ("" when it does not): the flag itself is fixed, or fixed
// sets the same setting another way (vLLM's --no-NAME for --NAME, or a
// false switch, which writes nothing).
func (st *Study) fixedConflict(spec *engine.FlagSpec, written string) string {
	if _, dup := st.Fixed[spec.Name]; dup {
		return written + " is also a fixed flag"
	}
	if f, dup := st.fixedSettings[spec.Setting()]; dup {
		return written + " is also fixed: " + f.says()
	}
	return ""
}

func (d *dec) params(st *Study, top *mapNode) {
	names := map[string]bool{}
	// Every param's place, for a when: that names one not declared yet.
	d.paramAt = map[string]int{}
	for i, pn := range top.list("params") {
		if name := peekName(pn); name != "" {
			if _, dup := d.paramAt[name]; !dup {
				d.paramAt[name] = i
			}
		}
	}
	defer func() { d.paramAt, d.self, d.selfAt = nil, "", 0 }()
	for i, pn := range top.list("params") {
		path := fmt.Sprintf("params[%d]", i)
		if name := peekName(pn); name != "" {
			path = "params[" + name + "]"
		}
		nerr := len(d.errs)
		m := d.mapping(pn, path, "name", "type", "low", "high", "step", "log", "choices", "flag", "flags", "template", "values", "default", "when")
		var p Param
		if m.str("name", &p.Name) {
			m.path = "params[" + p.Name + "]"
		}
		switch {
		case !m.has("name"):
			m.failKey("name", "missing; valid: a lower-case identifier such as ep or mem_fraction")
		case !identRE.MatchString(p.Name) || slices.Contains(reservedNames, p.Name):
			m.failKey("name", "%q; valid: a lower-case identifier (letters, digits, _) that is not one of %s", p.Name, strings.Join(reservedNames, ", "))
		case names[p.Name]:
			m.failKey("name", "%q used twice; valid: unique names", p.Name)
		}
		if !m.str("type", &p.Type) {
			m.failKey("type", "missing; valid: int, float, categorical or bool")
			continue
		}
		switch p.Type {
		case "int":
			d.intParam(&p, m)
		case "float":
			d.floatParam(&p, m)
		case "categorical":
			for _, k := range []string{"low", "high", "step", "log"} {
				if m.has(k) {
					m.failKey(k, "not used by a categorical param; valid: choices")
				}
			}
			cn := m.list("choices")
			if len(cn) == 0 {
				m.failKey("choices", "missing or empty; valid: a list of values such as [1, 4]")
			}
			for j, c := range cn {
				s, ok := d.scalarString(c, fmt.Sprintf("%s.choices[%d]", m.path, j))
				if ok && slices.Contains(p.Choices, s) {
					d.fail(c, fmt.Sprintf("%s.choices[%d]", m.path, j), "%q listed twice; valid: distinct choices", s)
				}
				p.Choices = append(p.Choices, s)
			}
		case "bool":
			for _, k := range []string{"low", "high", "step", "log", "choices"} {
				if m.has(k) {
					m.failKey(k, "not used by a bool param; valid: values or flag")
				}
			}
			p.Choices = []string{"true", "false"}
		default:
			m.failKey("type", "%q; valid: int, float, categorical or bool", p.Type)
			continue
		}
		p.unchecked = len(d.errs) != nerr
		d.paramMapping(st, &p, m, len(d.errs) == nerr)
		if !p.unchecked {
			d.paramDefault(&p, m)
		}
		if m.str("when", &p.When) {
			d.self, d.selfAt = p.Name, i
			p.when, _ = d.compile(st, m.at("when"), m.path+".when", p.When, names, false)
			d.self = ""
		}
		names[p.Name] = true
		st.Params = append(st.Params, p)
		d.emitted = append(d.emitted, d.emittedFlags(st, &st.Params[len(st.Params)-1], m))
	}
}

// paramDefault reads a param's default: the value the engine runs
// without the param's flag. It must lie in the param's domain, and a
// param with a value that passes no flag has that value as its default
// already: another default: contradicts it.
func (d *dec) paramDefault(p *Param, m *mapNode) {
	n := m.node("default")
	if n == nil {
		return
	}
	text, ok := d.scalarString(n, m.path+".default")
	if !ok {
		return
	}
	v, err := p.normalize(text)
	if err != nil {
		m.failKey("default", "%s is not a value of %s; valid: %s", text, p.Name, p.domainText())
		return
	}
	text = p.text(v)
	if silent, ok := p.flagless(); ok && silent != text {
		m.failKey("default", "%s, but %s=%s passes no flag, so the engine's default is %s; valid: default: %s, or no default:", text, p.Name, silent, silent, silent)
		return
	}
	p.Default = text
}

// peekName reads a param's name before its mapping is checked, for paths.
func peekName(n *yaml.Node) string {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" && n.Content[i+1].Kind == yaml.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

func (d *dec) intParam(p *Param, m *mapNode) {
	var low, high int
	step := 1
	okL, okH := m.int("low", &low), m.int("high", &high)
	if !m.has("low") {
		m.failKey("low", "missing; valid: an integer")
	}
	if !m.has("high") {
		m.failKey("high", "missing; valid: an integer")
	}
	if m.int("step", &step) && step < 1 {
		m.failKey("step", "%d; valid: an integer >= 1", step)
		step = 1
	}
	m.bool("log", &p.Log)
	if m.has("choices") {
		m.failKey("choices", "not used by an int param; valid: low/high/step, or type: categorical")
	}
	if okL && okH {
		switch {
		case low > high:
			m.failKey("high", "%d is below low %d; valid: high >= low", high, low)
		case (high-low)%step != 0:
			m.failKey("high", "%d is not low + k*step (low %d, step %d); valid: e.g. %d", high, low, step, high-(high-low)%step)
		case p.Log && low < 1:
			m.failKey("low", "%d with log: true; valid: low >= 1", low)
		case p.Log && step != 1:
			m.failKey("step", "%d with log: true; valid: step 1 or log: false", step)
		}
	}
	p.Low, p.High, p.Step = float64(low), float64(high), float64(step)
}

func (d *dec) floatParam(p *Param, m *mapNode) {
	okL, okH := m.float("low", &p.Low), m.float("high", &p.High)
	if !m.has("low") {
		m.failKey("low", "missing; valid: a number")
	}
	if !m.has("high") {
		m.failKey("high", "missing; valid: a number")
	}
	if m.float("step", &p.Step) && p.Step <= 0 {
		m.failKey("step", "%v; valid: a number > 0", p.Step)
		p.Step = 0
	}
	m.bool("log", &p.Log)
	if m.has("choices") {
		m.failKey("choices", "not used by a float param; valid: low/high/step, or type: categorical")
	}
	if okL && okH {
		switch {
		case p.Low > p.High:
			m.failKey("high", "%v is below low %v; valid: high >= low", p.High, p.Low)
		case p.Log && p.Low <= 0:
			m.failKey("low", "%v with log: true; valid: low > 0", p.Low)
		case p.Log && p.Step > 0:
			m.failKey("step", "step with log: true; valid: one of them")
		case p.Step > 0 && !nearInt((p.High-p.Low)/p.Step):
			m.failKey("high", "%v is not low + k*step (low %v, step %v); valid: a multiple of step above low", p.High, p.Low, p.Step)
		}
	}
}

func nearInt(x float64) bool {
	r := float64(int64(x + 0.5))
	return x-r < 1e-6 && r-x < 1e-6
}

// paramMapping reads flag/flags/template/values and validates every flag text
// the param can emit.
func (d *dec) paramMapping(st *Study, p *Param, m *mapNode, validate bool) {
	n := 0
	if m.str("flag", &p.Flag) {
		n++
	}
	for j, fnode := range m.list("flags") {
		if s, ok := d.scalarString(fnode, fmt.Sprintf("%s.flags[%d]", m.path, j)); ok {
			p.Flags = append(p.Flags, s)
		}
	}
	if m.has("flags") {
		n++
	}
	if m.str("template", &p.Template) {
		n++
		if !strings.Contains(p.Template, "{value}") {
			m.failKey("template", "%q has no {value}; valid: flag text with {value}, e.g. \"--cuda-graph-max-bs {value}\"", p.Template)
		}
	}
	if n > 1 {
		m.failKey("flag", "flag, flags and template are exclusive; valid: one of them")
	}
	if vn := m.node("values"); vn != nil {
		if vn.Kind != yaml.MappingNode {
			m.failKey("values", "got %s; valid: a mapping of value: flag text", kindName(vn))
		} else {
			p.Values = map[string]string{}
			for i := 0; i+1 < len(vn.Content); i += 2 {
				k, _ := d.scalarString(vn.Content[i], m.path+".values")
				path := m.path + ".values." + k
				if !slices.Contains(p.Choices, k) && p.Type != "int" && p.Type != "float" {
					d.fail(vn.Content[i], path, "%q is not a value of this param; valid: %s", k, strings.Join(p.Choices, ", "))
					continue
				}
				vv := deref(vn.Content[i+1])
				text := ""
				if vv.ShortTag() != "!!null" {
					text, _ = d.scalarString(vv, path)
				}
				p.Values[k] = text
			}
		}
	}
	if !validate {
		return // the domain is broken; its emitted values would only repeat that
	}
	// Every emitted text must parse against the flag schema.
	if p.Type == "bool" && p.Flag != "" {
		spec, ok := st.Schema.Lookup(p.Flag)
		switch {
		case ok && spec.Type != "bool" && p.Values == nil:
			m.failKey("flag", "%s takes a value, so a bool param cannot switch it; valid: a switch flag, or values: {true: ..., false: ...}", p.Flag)
			return
		case ok && st.Schema.IsNegation(p.Flag):
			m.failKey("flag", "%s is the negation of %s; valid: flag: %s (false writes %s)", p.Flag, spec.Name, spec.Name, p.Flag)
			return
		case ok && spec.Type == "bool":
			// true and false write what differs from the engine's default:
			// the flag, the negation (llama.cpp's --no-cont-batching), or
			// nothing.
			p.switchWords = map[string][]string{"true": spec.SwitchWords(true), "false": spec.SwitchWords(false)}
		}
	}
	valueAt := d.valueNodes(p, m)
	for _, v := range d.sampleValues(p) {
		words, err := p.emit(v)
		if err != nil {
			m.failKey(p.mappingKey(v), "%v", err)
			continue
		}
		// A value the flag does not take is wrong where the value is
		// written (high: 1.2, an item of choices), not at the flag: the
		// flag's rule is in the message.
		if at, ok := valueAt[v]; ok && p.mappingKey(v) != "values" {
			var ve *engine.ValueError
			if _, err := st.Schema.ParseArgv(words); errors.As(err, &ve) && strings.Contains(ve.Value, v) {
				d.fail(at.node, at.path, "%v", err)
				continue
			}
		}
		if args := d.checkFlagTokens(st, m.at(p.mappingKey(v)), m.path+"."+p.mappingKey(v), words, nil); args != nil {
			for _, a := range args {
				if why := st.fixedConflict(a.Spec, a.Name); why != "" {
					m.failKey(p.mappingKey(v), "%s; valid: search it or fix it, not both", why)
				}
			}
		}
		if len(d.errs) >= maxErrors {
			return
		}
	}
}

// valueNodes are where the values sampleValues lists are written: an int
// or float param's low and high, each choice of a categorical one (a bool
// param's true and false are written nowhere).
func (d *dec) valueNodes(p *Param, m *mapNode) map[string]flagNode {
	out := map[string]flagNode{}
	add := func(v string, n *yaml.Node, path string) {
		if _, dup := out[v]; !dup && n != nil {
			out[v] = flagNode{n, path}
		}
	}
	switch p.Type {
	case "int":
		add(strconv.Itoa(int(p.Low)), m.node("low"), m.path+".low")
		add(strconv.Itoa(int(p.High)), m.node("high"), m.path+".high")
	case "float":
		add(formatGrid(p.Low, p.Low, p.Step), m.node("low"), m.path+".low")
		add(formatGrid(p.High, p.Low, p.Step), m.node("high"), m.path+".high")
	case "categorical":
		if cn := m.node("choices"); cn != nil && cn.Kind == yaml.SequenceNode {
			for j, c := range cn.Content {
				if c := deref(c); c != nil && c.Kind == yaml.ScalarNode {
					v := c.Value
					if c.ShortTag() == "!!bool" {
						v, _ = d.scalarString(c, "")
					}
					add(v, c, fmt.Sprintf("%s.choices[%d]", m.path, j))
				}
			}
		}
	}
	return out
}

// withValuesKeys returns vals followed by the keys of p's values: mapping
// that vals lacks, in sorted order: every value whose words a study can
// pass the engine.
func (p *Param) withValuesKeys(vals []string) []string {
	for _, k := range slices.Sorted(maps.Keys(p.Values)) {
		if !slices.Contains(vals, k) {
			vals = append(vals, k)
		}
	}
	return vals
}

// mappingKey names the field an emitted value came from, for messages.
func (p *Param) mappingKey(v string) string {
	if _, ok := p.Values[v]; ok {
		return "values"
	}
	switch {
	case p.Template != "":
		return "template"
	case len(p.Flags) > 0:
		return "flags"
	}
	return "flag"
}

// sampleValues lists the values whose emitted text is validated at load.
func (d *dec) sampleValues(p *Param) []string {
	switch p.Type {
	case "int":
		return []string{strconv.Itoa(int(p.Low)), strconv.Itoa(int(p.High))}
	case "float":
		return []string{formatGrid(p.Low, p.Low, p.Step), formatGrid(p.High, p.Low, p.Step)}
	}
	return p.Choices
}

// emit gives the engine words for one value of the param.
func (p *Param) emit(v string) ([]string, error) {
	if text, ok := p.Values[v]; ok {
		return shell.Split(strings.ReplaceAll(text, "{value}", v))
	}
	switch {
	case p.Template != "":
		return shell.Split(strings.ReplaceAll(p.Template, "{value}", v))
	case len(p.Flags) > 0:
		var out []string
		for _, f := range p.Flags {
			out = append(out, f, v)
		}
		return out, nil
	case p.Flag != "":
		if p.Type == "bool" {
			if w, ok := p.switchWords[v]; ok {
				return w, nil
			}
			if v == "true" {
				return []string{p.Flag}, nil
			}
			return nil, nil
		}
		return []string{p.Flag, v}, nil
	case p.Values != nil && p.Type == "categorical":
		return nil, fmt.Errorf("values has no entry for %q; valid: an entry per choice, or a flag", v)
	}
	return nil, nil
}

// compile parses an expression and checks its names: earlier params, and
// predicted.* when allowPredicted.
func (d *dec) compile(st *Study, n *yaml.Node, path, src string, params map[string]bool, allowPredicted bool) (*Expr, error) {
	e, err := ParseExpr(src)
	if err != nil {
		d.fail(n, path, "%v in %q; valid: an expression such as \"speculative == 'EAGLE' and ep >= 2\" (see docs/study-file.md)", err, src)
		return nil, err
	}
	for _, name := range e.Names() {
		switch {
		case params[name], name == "gpus_per_trial":
		case strings.HasPrefix(name, "predicted.") && allowPredicted:
			if !slices.Contains(predictedNames, name) {
				d.fail(n, path, "unknown name %s (did you mean %s?); valid: %s", name, engine.Nearest(name, predictedNames), strings.Join(predictedNames, ", "))
				return nil, errors.New("bad name")
			}
		case name != "" && name == d.self:
			d.fail(n, path, "refers to %s itself; valid: earlier params only", name)
			return nil, errors.New("bad name")
		case d.paramAt != nil && !allowPredicted && d.laterParam(name):
			d.fail(n, path, "%s is params[%d], declared after this one; when: may use earlier params only: move it above", name, d.paramAt[name])
			return nil, errors.New("bad name")
		default:
			valid := make([]string, 0, len(params)+1)
			for k := range params {
				valid = append(valid, k)
			}
			slices.Sort(valid)
			valid = append(valid, "gpus_per_trial")
			if allowPredicted {
				valid = append(valid, predictedNames...)
			}
			near := engine.Nearest(name, valid)
			shown := strings.Join(valid, ", ")
			if !allowPredicted {
				shown += " (earlier params only)"
			}
			d.fail(n, path, "unknown name %s in %q (did you mean %s?); valid: %s", name, src, near, shown)
			return nil, errors.New("bad name")
		}
	}
	// A comparison that no value of its param can pass (a typo of a
	// choice) would silently shrink the space: it is an error here.
	probs := e.checkComparisons(st.domainOf)
	for _, p := range probs {
		line, col := d.exprPos(n, src, p.pos)
		d.failAt(line, col, path, "%s", p.msg)
	}
	if len(probs) > 0 {
		return nil, errors.New("bad comparison")
	}
	return e, nil
}

// laterParam reports whether name is a param of the file that params has
// not reached yet (while params are decoded).
func (d *dec) laterParam(name string) bool {
	i, ok := d.paramAt[name]
	return ok && i > d.selfAt
}

var predictedNames = []string{"predicted.requested_max_running_requests", "predicted.max_running_requests",
	"predicted.state_slots", "predicted.state_ratio", "predicted.kv_tokens", "predicted.kv_tokens_needed"}

func (st *Study) paramNames() map[string]bool {
	out := map[string]bool{}
	for _, p := range st.Params {
		out[p.Name] = true
	}
	return out
}

func (d *dec) derived(st *Study, top *mapNode) {
	names := st.paramNames()
	for i, dn := range top.list("derived") {
		m := d.mapping(dn, fmt.Sprintf("derived[%d]", i), "flag", "value", "when")
		var dv Derived
		if !m.str("flag", &dv.Flag) {
			m.failKey("flag", "missing; valid: an engine flag such as --speculative-num-draft-tokens")
			continue
		}
		m.path = "derived[" + dv.Flag + "]"
		spec, ok := st.Schema.Lookup(dv.Flag)
		if !ok {
			m.failKey("flag", "unknown flag %s (did you mean %s?); valid: a flag of %s", dv.Flag, st.Schema.Closest(dv.Flag), st.Schema.Source)
			continue
		}
		if spec.Owner != "" {
			m.failKey("flag", "%s is set by sgtune; valid: another flag", dv.Flag)
		}
		if why := st.fixedConflict(spec, dv.Flag); why != "" {
			m.failKey("flag", "%s; valid: derive it or fix it, not both", why)
		}
		if !m.str("value", &dv.Value) {
			m.failKey("value", "missing; valid: an expression such as spec_steps + 1")
			continue
		}
		dv.line, dv.col = m.at("value").Line, m.at("value").Column
		dv.value, _ = d.compile(st, m.at("value"), m.path+".value", dv.Value, names, false)
		if dv.value != nil {
			d.derivedValue(st, m, &dv, spec)
		}
		if m.str("when", &dv.When) {
			dv.when, _ = d.compile(st, m.at("when"), m.path+".when", dv.When, names, false)
		}
		st.Derived = append(st.Derived, dv)
		d.derivedFlags = append(d.derivedFlags, derivedFlag{setting: spec.Setting(), index: i, at: flagNode{m.at("flag"), m.path + ".flag"}})
	}
}

// derivedValue checks a derived value against its flag where that can be
// seen without resolving a config: a value that reads no param is known
// (its words must pass the flag schema), and one that reads params must
// give a kind the flag can take ('abc' for an integer flag resolved to
// nothing launchable, config after config).
func (d *dec) derivedValue(st *Study, m *mapNode, dv *Derived, spec *engine.FlagSpec) {
	n, path := m.at("value"), m.path+".value"
	if !slices.ContainsFunc(dv.value.Names(), func(name string) bool { return name != "gpus_per_trial" }) {
		v, err := dv.value.Eval(st.env(nil, nil))
		if err != nil {
			d.fail(n, path, "%q cannot be evaluated: %v; valid: an expression such as spec_steps + 1", dv.Value, err)
			return
		}
		if _, err := st.Schema.ParseArgv(dv.words(v)); err != nil {
			d.fail(n, path, "%q gives %s: %v", dv.Value, literal(v), err)
		}
		return
	}
	kinds := dv.value.kinds(st.domainOf)
	if kinds == nil {
		return
	}
	var takes string
	switch spec.Type {
	case "bool":
		if !kinds["bool"] {
			takes = "no value (it is a switch); valid: an expression that gives true or false, such as speculative == 'EAGLE'"
		}
	case "int", "float":
		if !kinds["number"] {
			takes = "a number; valid: an expression that gives a number, such as spec_steps + 1"
			if spec.Type == "int" {
				takes = "an integer; valid: an expression that gives an integer, such as spec_steps + 1"
			}
		}
	default:
		if !kinds["number"] && !kinds["string"] {
			takes = "a value; valid: an expression that gives a string or a number"
		}
	}
	if takes != "" {
		d.fail(n, path, "%q gives %s, and %s takes %s", dv.Value, kindsText(kinds), dv.Flag, takes)
	}
}

func (d *dec) constraints(st *Study, top *mapNode) {
	names := st.paramNames()
	for i, cn := range top.list("constraints") {
		path := fmt.Sprintf("constraints[%d]", i)
		s, ok := d.scalarString(cn, path)
		if !ok {
			continue
		}
		if e, err := d.compile(st, deref(cn), path, s, names, true); err == nil {
			st.Constraints = append(st.Constraints, s)
			st.constraints = append(st.constraints, e)
		}
	}
}

func positive(m *mapNode, key string, v int) {
	if m.has(key) && v < 1 {
		m.failKey(key, "%d; valid: an integer >= 1", v)
	}
}

func (d *dec) workload(st *Study, top *mapNode) {
	w := &st.Workload
	m := d.mapping(top.node("workload"), "workload", "kind", "chat", "matrix", "quality", "hang_timeout_s")
	w.Kind = "chat"
	if m.str("kind", &w.Kind) && w.Kind != "chat" && w.Kind != "matrix" {
		m.failKey("kind", "%q; valid: chat or matrix", w.Kind)
	}
	if m.float("hang_timeout_s", &w.HangTimeout) && w.HangTimeout < 0 {
		m.failKey("hang_timeout_s", "%v; valid: seconds >= 0 (0 = default)", w.HangTimeout)
	}
	c := d.mapping(m.node("chat"), "workload.chat", "concurrency", "requests", "max_tokens", "repeats", "warmup",
		"prompt_tokens", "prompts_file", "reuse_prompts", "ignore_eos", "capacity_search", "source", "rate_search")
	ch := &w.Chat
	ch.MaxTokens, ch.Repeats = DefaultMaxTokens, DefaultRepeats
	hasC, hasR := c.intList("concurrency", &ch.Concurrency), c.intList("requests", &ch.Requests)
	switch {
	case !c.has("concurrency") && !c.has("requests") && c.has("rate_search"):
		// Open-loop probes only.
	case !c.has("concurrency") && !c.has("requests"):
		ch.Concurrency = slices.Clone(DefaultConcurrency)
		ch.Requests = slices.Clone(DefaultRequests)
	case !c.has("requests"):
		c.failKey("concurrency", "requests is missing; valid: one request count per concurrency level")
	case !c.has("concurrency"):
		c.failKey("requests", "concurrency is missing; valid: a list of concurrency levels")
	case hasC && hasR && len(ch.Concurrency) != len(ch.Requests):
		c.failKey("requests", "%d counts for %d concurrency levels; valid: one count per level", len(ch.Requests), len(ch.Concurrency))
	case hasC && hasR && len(ch.Concurrency) == 0:
		c.failKey("concurrency", "empty; valid: at least one level")
	case hasC && hasR:
		for i, n := range ch.Requests {
			if lvl := ch.Concurrency[i]; n >= 1 && n < lvl {
				c.failKey("requests", "%d at concurrency %d; valid: at least as many requests as the level's concurrency (fewer never have %d in flight)", n, lvl, lvl)
				break
			}
		}
	}
	for i := range ch.Concurrency {
		if ch.Concurrency[i] < 1 {
			d.fail(c.at("concurrency"), fmt.Sprintf("workload.chat.concurrency[%d]", i), "%d; valid: an integer >= 1", ch.Concurrency[i])
		}
		if i < len(ch.Requests) && ch.Requests[i] < 1 {
			d.fail(c.at("requests"), fmt.Sprintf("workload.chat.requests[%d]", i), "%d; valid: an integer >= 1", ch.Requests[i])
		}
	}
	c.int("max_tokens", &ch.MaxTokens)
	positive(c, "max_tokens", ch.MaxTokens)
	c.int("repeats", &ch.Repeats)
	positive(c, "repeats", ch.Repeats)
	warm := true
	c.bool("warmup", &warm)
	ch.Warmup = &warm
	if c.int("prompt_tokens", &ch.PromptTokens) && ch.PromptTokens < 0 {
		c.failKey("prompt_tokens", "%d; valid: an integer >= 0 (0 = the load generator's default)", ch.PromptTokens)
	}
	if c.str("prompts_file", &ch.PromptsFile) {
		if !filepath.IsAbs(ch.PromptsFile) {
			ch.PromptsFile = filepath.Join(filepath.Dir(st.Path), ch.PromptsFile)
		}
		if _, err := objective.ReadPrompts(ch.PromptsFile); err != nil {
			c.failKey("prompts_file", "%v; valid: a readable file of prompts, one per line or JSONL with a prompt, text or content string (a relative path is relative to the study file)", err)
		}
	}
	c.bool("reuse_prompts", &ch.ReusePrompts)
	c.bool("ignore_eos", &ch.IgnoreEOS)
	if c.has("rate_search") {
		ch.RateSearch = d.rateSearch(c)
	}
	if rs := ch.RateSearch; rs != nil && rs.Arrival == objective.ArrivalTrace && !c.has("source") {
		d.fail(c.node("rate_search"), "workload.chat.rate_search.arrival", "trace without workload.chat.source.dataset; valid: a source dataset with a timestamp on every request (Mooncake JSONL, the Azure trace CSV)")
	}
	if c.has("source") {
		ch.Source = d.source(st, c)
		if ch.PromptsFile != "" {
			c.failKey("source", "set with prompts_file; valid: one of them (source.dataset reads a file of prompts too)")
		}
	}
	if c.has("capacity_search") {
		cs := d.mapping(c.node("capacity_search"), "workload.chat.capacity_search", "slo", "max_probes")
		ch.CapacitySearch = &objective.CapacitySearch{SLO: d.sloList(cs, "workload.chat.capacity_search")}
		if cs.int("max_probes", &ch.CapacitySearch.MaxProbes) && ch.CapacitySearch.MaxProbes < 0 {
			cs.failKey("max_probes", "%d; valid: an integer >= 0 (0 = default 3)", ch.CapacitySearch.MaxProbes)
		}
	}

	mx := d.mapping(m.node("matrix"), "workload.matrix", "contexts", "concurrency", "duration_s", "max_output", "warmup")
	mt := &w.Matrix
	mx.intList("contexts", &mt.Contexts)
	mx.intList("concurrency", &mt.Concurrency)
	mt.DurationS, mt.MaxOutput = 30, 4096
	if mx.float("duration_s", &mt.DurationS) && mt.DurationS <= 0 {
		mx.failKey("duration_s", "%v; valid: seconds > 0", mt.DurationS)
	}
	mx.int("max_output", &mt.MaxOutput)
	positive(mx, "max_output", mt.MaxOutput)
	if mx.has("warmup") {
		mwarm := true
		mx.bool("warmup", &mwarm)
		mt.Warmup = &mwarm
	}
	if w.Kind == "matrix" {
		if len(mt.Contexts) == 0 {
			mx.failKey("contexts", "missing or empty; valid: context lengths such as [8192, 32768]")
		}
		if len(mt.Concurrency) == 0 {
			mx.failKey("concurrency", "missing or empty; valid: concurrency levels such as [1, 16, 64]")
		}
		for i, v := range mt.Contexts {
			if v < 1 {
				d.fail(mx.at("contexts"), fmt.Sprintf("workload.matrix.contexts[%d]", i), "%d; valid: an integer >= 1", v)
			}
		}
		for i, v := range mt.Concurrency {
			if v < 1 {
				d.fail(mx.at("concurrency"), fmt.Sprintf("workload.matrix.concurrency[%d]", i), "%d; valid: an integer >= 1", v)
			}
		}
	}

	q := d.mapping(m.node("quality"), "workload.quality", "enabled", "json_requests", "tool_requests", "min_pass")
	w.Quality = objective.QualitySpec{Enabled: true, JSONRequests: DefaultJSONRequests, ToolRequests: DefaultToolRequests, MinPass: 1}
	q.bool("enabled", &w.Quality.Enabled)
	if q.int("json_requests", &w.Quality.JSONRequests) && w.Quality.JSONRequests < 0 {
		q.failKey("json_requests", "%d; valid: an integer >= 0", w.Quality.JSONRequests)
	}
	if q.int("tool_requests", &w.Quality.ToolRequests) && w.Quality.ToolRequests < 0 {
		q.failKey("tool_requests", "%d; valid: an integer >= 0", w.Quality.ToolRequests)
	}
	// 0 would mean "unset" to objective.Workload.WithDefaults (min_pass 1),
	// so an explicit 0 is rejected rather than silently made strict.
	if w.Quality.Enabled && w.Quality.JSONRequests == 0 && w.Quality.ToolRequests == 0 {
		q.failKey("json_requests", "0 with tool_requests 0; valid: at least one check, or enabled: false to turn the gates off")
	}
	if q.float("min_pass", &w.Quality.MinPass) && !(w.Quality.MinPass > 0 && w.Quality.MinPass <= 1) {
		q.failKey("min_pass", "%v; valid: a fraction in (0, 1]; use enabled: false to turn the gates off", w.Quality.MinPass)
	}
}

// source decodes workload.chat.source: a dataset file (read now, so that a
// bad one is refused before anything runs), or length distributions, with
// an optional shared system prompt and conversation turns.
func (d *dec) source(st *Study, c *mapNode) *objective.SourceSpec {
	m := d.mapping(c.node("source"), "workload.chat.source", "dataset", "input_tokens", "output_tokens",
		"shared_prefix_tokens", "prefix_groups", "turns", "seed")
	src := &objective.SourceSpec{}
	var seed int
	if m.int("seed", &seed) {
		if seed < 0 {
			m.failKey("seed", "%d; valid: an integer >= 0 (default: budget.seed)", seed)
		}
		src.Seed = uint64(seed)
	}
	src.InputTokens = d.lengthDist(m, "input_tokens")
	src.OutputTokens = d.lengthDist(m, "output_tokens")
	if m.int("shared_prefix_tokens", &src.SharedPrefix) && src.SharedPrefix < 0 {
		m.failKey("shared_prefix_tokens", "%d; valid: an integer >= 0 (0: no shared system prompt)", src.SharedPrefix)
	}
	if m.int("prefix_groups", &src.PrefixGroups) && src.PrefixGroups < 1 {
		m.failKey("prefix_groups", "%d; valid: an integer >= 1", src.PrefixGroups)
	}
	if m.has("prefix_groups") && src.SharedPrefix == 0 {
		m.failKey("prefix_groups", "set without shared_prefix_tokens; valid: shared_prefix_tokens N > 0 with it")
	}
	if m.int("turns", &src.Turns) && src.Turns < 1 {
		m.failKey("turns", "%d; valid: an integer >= 1", src.Turns)
	}
	if !m.str("dataset", &src.Dataset) {
		return src
	}
	if src.InputTokens != nil {
		m.failKey("input_tokens", "set with dataset; valid: one of them (a dataset gives each prompt)")
	}
	if !filepath.IsAbs(src.Dataset) {
		src.Dataset = filepath.Join(filepath.Dir(st.Path), src.Dataset)
	}
	ds, err := objective.LoadDataset(src.Dataset)
	if err != nil {
		m.failKey("dataset", "%v", err)
		return src
	}
	if rs := st.Workload.Chat.RateSearch; rs != nil && rs.Arrival == objective.ArrivalTrace && !ds.Timed {
		m.failKey("dataset", "%s has no timestamps, and rate_search.arrival is trace; valid: a trace (Mooncake JSONL with timestamp, the Azure trace CSV, or a timestamp column), or arrival poisson", ds.Path)
	}
	if flag, limit := contextLimit(st); limit > 0 {
		if e, n := ds.Longest(); n > limit {
			m.failKey("dataset", "%s:%d: a request of about %d tokens (prompt and output) exceeds %s %d; valid: requests that fit the context (a longer %s, or a dataset without them)",
				ds.Path, e.Line, n, flag, limit, flag)
		}
	}
	return src
}

// rateSearch decodes workload.chat.rate_search; its SLO is the score's,
// set once the score is read.
func (d *dec) rateSearch(c *mapNode) *objective.RateSearch {
	m := d.mapping(c.node("rate_search"), "workload.chat.rate_search", "start", "max", "requests", "tolerance",
		"arrival", "burstiness", "max_probes")
	rs := &objective.RateSearch{}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"start", &rs.Start}, {"max", &rs.Max}, {"tolerance", &rs.Tolerance}, {"burstiness", &rs.Burstiness}} {
		if m.float(f.key, f.dst) && *f.dst <= 0 {
			m.failKey(f.key, "%v; valid: a number > 0", *f.dst)
		}
	}
	if m.int("requests", &rs.Requests) && rs.Requests < 1 {
		m.failKey("requests", "%d; valid: an integer >= 8", rs.Requests)
	}
	if m.int("max_probes", &rs.MaxProbes) && rs.MaxProbes < 1 {
		m.failKey("max_probes", "%d; valid: an integer >= 1 (default 16)", rs.MaxProbes)
	}
	if m.str("arrival", &rs.Arrival) && !slices.Contains([]string{objective.ArrivalPoisson, objective.ArrivalGamma, objective.ArrivalTrace}, rs.Arrival) {
		m.failKey("arrival", "%q; valid: poisson (default), gamma (with burstiness) or trace (the source dataset's timestamps)", rs.Arrival)
		rs.Arrival = ""
	}
	if m.has("burstiness") && rs.Arrival != "gamma" {
		m.failKey("burstiness", "set with arrival %q; valid: arrival: gamma with it (poisson has burstiness 1)", cmp.Or(rs.Arrival, "poisson"))
	}
	if msg := rs.WithDefaults().Check(); msg != "" {
		m.failKey("start", "%s; valid: start <= max, requests >= 8, tolerance < 1", msg)
	}
	return rs
}

// contextLimit is the context length a study fixes, with its flag, when
// it fixes one (SGLang's --context-length, vLLM's --max-model-len).
func contextLimit(st *Study) (string, int) {
	for _, f := range []string{"--context-length", "--max-model-len"} {
		if v, ok := st.Fixed[f]; ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return f, n
			}
		}
	}
	return "", 0
}

// lengthDist decodes a length distribution ({dist: lognormal, mean: 800,
// stddev: 400, min: 16, max: 4000}); nil when key is absent.
func (d *dec) lengthDist(m *mapNode, key string) *objective.LengthDist {
	if !m.has(key) {
		return nil
	}
	l := d.mapping(m.node(key), join(m.path, key), "dist", "mean", "stddev", "min", "max")
	ld := &objective.LengthDist{}
	if !l.str("dist", &ld.Dist) {
		l.failKey("dist", "missing; valid: %s", strings.Join(objective.Dists, ", "))
		return ld
	}
	l.float("mean", &ld.Mean)
	l.float("stddev", &ld.StdDev)
	l.int("min", &ld.Min)
	l.int("max", &ld.Max)
	if msg := ld.Check(); msg != "" {
		l.failKey("dist", "%s; valid: {dist: fixed, mean: N}, {dist: uniform, min: A, max: B}, or {dist: normal|lognormal, mean: M, stddev: S[, min: A, max: B]}", msg)
	}
	return ld
}

func (d *dec) score(st *Study, top *mapNode) {
	s := &st.Score
	m := d.mapping(top.node("score"), "score", "metric", "concurrency", "slo", "context")
	s.Metric = "output_tok_s"
	valid := []string{"output_tok_s", "goodput", "capacity", "max_rate"}
	if m.str("metric", &s.Metric) && !slices.Contains(valid, s.Metric) {
		m.failKey("metric", "%q (did you mean %s?); valid: %s", s.Metric, engine.Nearest(s.Metric, valid), strings.Join(valid, ", "))
	}
	levels := st.Workload.Chat.Concurrency
	if st.Workload.Kind == "matrix" {
		levels = st.Workload.Matrix.Concurrency
	}
	if m.int("concurrency", &s.Concurrency) {
		// No levels: the workload's own error says why; do not add one.
		if s.Metric == "max_rate" {
			m.failKey("concurrency", "set with metric max_rate, which scores open-loop rates; valid: leave it out")
		} else if s.Metric != "capacity" && len(levels) > 0 && !slices.Contains(levels, s.Concurrency) {
			m.failKey("concurrency", "%d is not a measured level; valid: one of %v", s.Concurrency, levels)
		}
	} else if len(levels) > 0 {
		s.Concurrency = slices.Max(levels)
		if slices.Contains(levels, 64) {
			s.Concurrency = 64
		}
	}
	s.SLO = d.sloList(m, "score")
	if s.Metric == "max_rate" {
		switch {
		case st.Workload.Kind != "chat":
			m.failKey("metric", "max_rate with workload.kind %s; valid: a chat workload (its rate_search)", st.Workload.Kind)
		case st.Workload.Chat.RateSearch == nil:
			m.failKey("metric", "max_rate without workload.chat.rate_search; valid: rate_search: {start: 1} (the rates probed) in workload.chat")
		case len(s.SLO) == 0:
			m.failKey("metric", "max_rate without score.slo; valid: an SLO the rate must hold, e.g. slo: [{metric: ttft, percentile: p99, max_s: 1}]")
		}
	}
	if rs := st.Workload.Chat.RateSearch; rs != nil {
		rs.SLO = s.SLO
		if s.Metric != "max_rate" && st.Workload.Kind == "chat" && len(st.Workload.Chat.Concurrency) == 0 {
			m.failKey("metric", "%s with only rate_search probes (no workload.chat.concurrency levels); valid: max_rate, or concurrency levels to score", s.Metric)
		}
	}
	if m.int("context", &s.Context) && st.Workload.Kind == "matrix" && !slices.Contains(st.Workload.Matrix.Contexts, s.Context) {
		m.failKey("context", "%d is not a measured context; valid: one of %v", s.Context, st.Workload.Matrix.Contexts)
	}
	// The loader reports problems with their line; objective's own checks
	// are the backstop for anything it knows that the loader does not.
	if len(d.errs) == 0 {
		if err := st.Workload.WithDefaults().Validate(); err != nil {
			m.failKey("metric", "%v", err)
		} else if err := s.Validate(); err != nil {
			m.failKey("metric", "%v", err)
		}
	}
}

// sloList decodes the "slo" list of m: [{metric, percentile, max_s}, ...].
func (d *dec) sloList(m *mapNode, prefix string) []objective.SLO {
	var out []objective.SLO
	for i, sn := range m.list("slo") {
		path := fmt.Sprintf("%s.slo[%d]", prefix, i)
		sm := d.mapping(sn, path, "metric", "percentile", "max_s")
		var slo objective.SLO
		metrics, pcts := []string{"ttft", "latency", "itl"}, []string{"mean", "p50", "p90", "p99"}
		if !sm.str("metric", &slo.Metric) || !slices.Contains(metrics, slo.Metric) {
			sm.failKey("metric", "%q; valid: %s", slo.Metric, strings.Join(metrics, ", "))
		}
		slo.Percentile = "p99"
		if sm.str("percentile", &slo.Percentile) && !slices.Contains(pcts, slo.Percentile) {
			sm.failKey("percentile", "%q; valid: %s", slo.Percentile, strings.Join(pcts, ", "))
		}
		switch {
		case sm.node("max_s") == nil:
			sm.failKey("max_s", "missing; valid: seconds > 0, e.g. 5")
		case !sm.float("max_s", &slo.Max):
			// float said what is wrong with it
		case slo.Max <= 0:
			sm.failKey("max_s", "%v; valid: seconds > 0, e.g. 5", slo.Max)
		}
		out = append(out, slo)
	}
	return out
}

func (d *dec) budget(st *Study, top *mapNode) {
	b := &st.Budget
	m := d.mapping(top.node("budget"), "budget", "trials", "timeout", "sampler", "seed", "parallel", "prune", "confirm", "confirm_rounds", "baseline")
	b.Trials, b.Sampler, b.Parallel = DefaultTrials, DefaultSampler, len(st.GPUGroups)
	b.Baseline = BaselineDefault
	if m.str("baseline", &b.Baseline) && b.Baseline != BaselineDefault && b.Baseline != BaselineNone {
		m.failKey("baseline", "%q; valid: default (launch the engine's default config first, and hold the winner against it) or none", b.Baseline)
	}
	b.Prune = Prune{Rule: "fraction", Fraction: DefaultPruneFraction, MinComplete: DefaultPruneMinComplete}
	b.Confirm, b.ConfirmRounds = DefaultConfirm, 1
	if n := m.node("prune"); n != nil {
		pm := d.mapping(n, "budget.prune", "rule", "fraction", "min_complete")
		if pm.str("rule", &b.Prune.Rule) && !slices.Contains([]string{"fraction", "median", "off"}, b.Prune.Rule) {
			pm.failKey("rule", "%q; valid: fraction (default), median, off", b.Prune.Rule)
		}
		if pm.float("fraction", &b.Prune.Fraction) && (b.Prune.Fraction <= 0 || b.Prune.Fraction >= 1) {
			pm.failKey("fraction", "%v; valid: between 0 and 1 (default %v)", b.Prune.Fraction, DefaultPruneFraction)
		}
		if pm.int("min_complete", &b.Prune.MinComplete) && b.Prune.MinComplete < 1 {
			pm.failKey("min_complete", "%d; valid: >= 1", b.Prune.MinComplete)
		}
	}
	if m.int("confirm", &b.Confirm) && b.Confirm < 0 {
		m.failKey("confirm", "%d; valid: >= 0 (0 turns confirmation off)", b.Confirm)
	}
	if m.int("confirm_rounds", &b.ConfirmRounds) && b.ConfirmRounds < 1 {
		m.failKey("confirm_rounds", "%d; valid: >= 1", b.ConfirmRounds)
	}
	m.int("trials", &b.Trials)
	positive(m, "trials", b.Trials)
	m.duration("timeout", &b.Timeout)
	if m.str("sampler", &b.Sampler) && !slices.Contains(Samplers, b.Sampler) {
		m.failKey("sampler", "%q; valid: %s", b.Sampler, strings.Join(Samplers, ", "))
	}
	// The grid proposes each config in turn: it lists the space, so its
	// size is bounded (counted from the params, before anything is
	// listed). Refused here, a file that run cannot search is refused by
	// check too, before anything is written.
	if b.Sampler == "grid" {
		if _, finite := st.Bound(); !finite {
			m.failKey("sampler", `"grid" needs a finite space: give every float param a step, or use bayes (%s)`, continuous(st))
		} else if n, over := st.Over(MaxGridConfigs); over {
			m.failKey("sampler", `"grid" lists every config before its first trial, and the space has more than %d (up to %.0f); use coarser steps or fewer choices%s, or sampler bayes or random`,
				MaxGridConfigs, n, mostValues(st))
		}
	}
	var seed int
	if m.int("seed", &seed) {
		b.Seed = int64(seed)
	}
	if st.Slurmed() {
		// Slurm places the trials: parallel is how many one worker keeps
		// in flight, bounded by the cluster, not by local GPU groups.
		b.Parallel = 1
		if m.int("parallel", &b.Parallel) && b.Parallel < 1 {
			m.failKey("parallel", "%d; valid: 1 or more (trials one worker keeps in flight as Slurm jobs)", b.Parallel)
		}
	} else if m.int("parallel", &b.Parallel) && (b.Parallel < 1 || b.Parallel > len(st.GPUGroups)) {
		m.failKey("parallel", "%d; valid: 1..%d (one trial per GPU group)", b.Parallel, len(st.GPUGroups))
	}
	if b.Parallel < 1 {
		b.Parallel = 1
	}
}

// continuous says which params of st have no finite set of values (a
// float without a step), for messages: "m has no step".
func continuous(st *Study) string {
	var names []string
	for i := range st.Params {
		if _, finite := st.Params[i].count(); !finite {
			names = append(names, st.Params[i].Name)
		}
	}
	switch len(names) {
	case 0:
		return "every param has a step"
	case 1:
		return names[0] + " has no step"
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " have no step"
}

// mostValues names the params of a finite space with the most values,
// for messages: " (a has 1000 values, b 451, c 2)"; "" when none has more
// than one.
func mostValues(st *Study) string {
	type counted struct {
		name string
		n    float64
	}
	var ps []counted
	for i := range st.Params {
		if n, _ := st.Params[i].count(); n > 1 {
			ps = append(ps, counted{st.Params[i].Name, n})
		}
	}
	slices.SortStableFunc(ps, func(a, b counted) int { return cmp.Compare(b.n, a.n) })
	var out []string
	for i, p := range ps[:min(len(ps), 3)] {
		if i == 0 {
			out = append(out, fmt.Sprintf("%s has %.0f values", p.name, p.n))
		} else {
			out = append(out, fmt.Sprintf("%s %.0f", p.name, p.n))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, ", ") + ")"
}

func (d *dec) launch(st *Study, top *mapNode) {
	l := &st.Launch
	m := d.mapping(top.node("launch"), "launch", "startup_timeout", "api_key_env", "api_key_file", "on_stale",
		"scheduler", "slurm", "stale_after")
	l.StartupTimeout, l.OnStale = DefaultStartupTimeout, "retry"
	l.Scheduler, l.StaleAfter = SchedulerLocal, DefaultStaleAfter
	if m.str("scheduler", &l.Scheduler) && l.Scheduler != SchedulerLocal && l.Scheduler != SchedulerSlurm {
		m.failKey("scheduler", "%q; valid: local (default: processes on this host) or slurm (one Slurm job per trial)", l.Scheduler)
	}
	if m.duration("stale_after", &l.StaleAfter) && l.StaleAfter < MinStaleAfter {
		m.failKey("stale_after", "%s is too short; valid: a Go duration of at least %s (a running trial proves its worker alive every 10s)",
			l.StaleAfter, MinStaleAfter)
	}
	switch {
	case l.Scheduler == SchedulerSlurm:
		d.slurm(st, m)
	case m.has("slurm"):
		m.failKey("slurm", "set, but launch.scheduler is %s; valid: scheduler: slurm, or leave launch.slurm out", l.Scheduler)
	}
	if m.duration("startup_timeout", &l.StartupTimeout) && l.StartupTimeout <= 0 {
		m.failKey("startup_timeout", "must be positive; valid: a Go duration such as 20m")
	}
	m.str("api_key_env", &l.APIKeyEnv)
	if m.str("api_key_file", &l.APIKeyFile) && !filepath.IsAbs(l.APIKeyFile) {
		l.APIKeyFile = filepath.Join(filepath.Dir(st.Path), l.APIKeyFile)
	}
	if m.str("on_stale", &l.OnStale) && l.OnStale != "retry" && l.OnStale != "fail" {
		m.failKey("on_stale", "%q; valid: retry (default) or fail", l.OnStale)
	}
}

// peekScheduler reads launch.scheduler before the rest of the file is
// decoded ("" when absent or not a string); launch reports its errors.
func peekScheduler(top *mapNode) string {
	n := top.node("launch")
	if n == nil || n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if v := deref(n.Content[i+1]); n.Content[i].Value == "scheduler" && v != nil && v.Kind == yaml.ScalarNode {
			return v.Value
		}
	}
	return ""
}

// sbatchOwned are the sbatch options sgtune sets itself for a trial's job;
// launch.slurm.extra_sbatch must not repeat them.
var sbatchOwned = map[string]string{
	"--output": "", "-o": "", "--error": "", "-e": "", "--open-mode": "", "--job-name": "", "-J": "",
	"--parsable": "", "--wrap": "", "--export": "", "--requeue": "", "--no-requeue": "",
	"--ntasks-per-node": "nodes", "--nodes": "nodes", "-N": "nodes",
	"--gres": "gres", "--gpus": "gpus_per_node", "-G": "gpus_per_node", "--gpus-per-node": "gpus_per_node",
	"--partition": "partition", "-p": "partition", "--account": "account", "-A": "account",
	"--time": "time_limit", "-t": "time_limit",
}

// multiNodeFlags are the engine flags a multi-node trial's launch sets.
var multiNodeFlags = []string{"--nnodes", "--node-rank", "--dist-init-addr"}

// slurm decodes launch.slurm.
func (d *dec) slurm(st *Study, launch *mapNode) {
	s := &st.Launch.Slurm
	m := d.mapping(launch.node("slurm"), "launch.slurm", "partition", "account", "time_limit", "gpus_per_node",
		"gres", "extra_sbatch", "pending_timeout", "nodes")
	s.Nodes, s.PendingTimeout = 1, DefaultPendingTimeout
	for _, f := range []struct {
		key string
		dst *string
	}{{"partition", &s.Partition}, {"account", &s.Account}} {
		key, dst := f.key, f.dst
		if m.str(key, dst) && (*dst == "" || strings.ContainsAny(*dst, " \t\n,")) {
			m.failKey(key, "%q; valid: one Slurm %s name", *dst, key)
		}
	}
	if m.duration("time_limit", &s.TimeLimit) && s.TimeLimit < time.Minute {
		m.failKey("time_limit", "%s; valid: a Go duration of at least 1m, e.g. 2h (Slurm counts minutes)", s.TimeLimit)
	}
	if m.duration("pending_timeout", &s.PendingTimeout) && s.PendingTimeout <= 0 {
		m.failKey("pending_timeout", "must be positive; valid: a Go duration such as 10m")
	}
	if m.int("nodes", &s.Nodes) && s.Nodes < 1 {
		m.failKey("nodes", "%d; valid: 1 or more", s.Nodes)
		s.Nodes = 1
	}
	s.CPUsPerTask = st.CPUsPerTrial
	if !st.Engine.Kind.UsesGPUs {
		// A CPU engine's job asks for its cores, not for GPUs.
		for _, k := range []string{"gres", "gpus_per_node"} {
			if m.has(k) {
				m.failKey(k, "%s runs on CPUs: its jobs ask for no GPUs; valid: leave %s out (cpus.per_trial sets --cpus-per-task)", st.Engine.Name, k)
			}
		}
		if s.Nodes > 1 {
			m.failKey("nodes", "%d: multi-node trials need an engine launched with --nnodes/--node-rank/--dist-init-addr (sglang), not %s; valid: 1",
				s.Nodes, st.Engine.Name)
		}
	} else {
		d.slurmGPUs(st, m, s)
	}
	for i, n := range m.list("extra_sbatch") {
		path := fmt.Sprintf("launch.slurm.extra_sbatch[%d]", i)
		v, ok := d.scalarString(n, path)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(v, "=")
		if len(name) > 2 && name[1] != '-' {
			name = name[:2] // a short option with its value attached: -N2
		}
		if !strings.HasPrefix(v, "-") || strings.ContainsAny(name, " \t\n") {
			d.fail(n, path, "%q; valid: one sbatch option per item, its value after =, e.g. --qos=high or --constraint=h200", v)
			continue
		}
		if field, owned := sbatchOwned[name]; owned {
			if field != "" {
				d.fail(n, path, "%s is set by sgtune; valid: launch.slurm.%s", name, field)
			} else {
				d.fail(n, path, "%s is set by sgtune for every trial's job; valid: leave it out", name)
			}
			continue
		}
		s.ExtraSbatch = append(s.ExtraSbatch, v)
	}
}

// slurmGPUs reads how a GPU engine's job asks for its GPUs: gpus.per_trial
// split evenly over launch.slurm.nodes, as --gres=gpu:N, gres or
// gpus_per_node.
func (d *dec) slurmGPUs(st *Study, m *mapNode, s *Slurm) {
	per := st.GPUsPerTrial
	if per%s.Nodes != 0 {
		m.failKey("nodes", "%d nodes do not split gpus.per_trial = %d evenly; valid: a divisor of %d", s.Nodes, per, per)
		return
	}
	perNode := per / s.Nodes
	if s.Nodes > 1 {
		if st.Engine.Name != "sglang" {
			m.failKey("nodes", "%d: multi-node trials need an engine launched with --nnodes/--node-rank/--dist-init-addr (sglang), not %s; valid: 1",
				s.Nodes, st.Engine.Name)
		}
		for _, f := range multiNodeFlags {
			if _, ok := st.Fixed[f]; ok {
				m.failKey("nodes", "%d with %s in fixed: the launch sets %s for each node; valid: leave %s out of fixed",
					s.Nodes, f, strings.Join(multiNodeFlags, ", "), f)
			}
		}
	}
	s.GPURequest = fmt.Sprintf("--gres=gpu:%d", perNode)
	var g int
	hasG := m.int("gpus_per_node", &g)
	if hasG {
		if g != perNode {
			m.failKey("gpus_per_node", "%d; valid: gpus.per_trial / launch.slurm.nodes = %d", g, perNode)
		}
		s.GPURequest = fmt.Sprintf("--gpus-per-node=%d", perNode)
	}
	var gres string
	if m.str("gres", &gres) {
		parts := strings.Split(gres, ":")
		n, err := strconv.Atoi(parts[len(parts)-1])
		switch {
		case hasG:
			m.failKey("gres", "set together with gpus_per_node; valid: one of the two")
		case parts[0] != "gpu" || len(parts) < 2 || len(parts) > 3 || err != nil || strings.ContainsAny(gres, " ,"):
			m.failKey("gres", "%q; valid: gpu:COUNT or gpu:TYPE:COUNT, e.g. gpu:h200:%d", gres, perNode)
		case n != perNode:
			m.failKey("gres", "%q asks for %d GPUs per node; valid: gpus.per_trial / launch.slurm.nodes = %d", gres, n, perNode)
		default:
			s.GPURequest = "--gres=" + gres
		}
	}
}

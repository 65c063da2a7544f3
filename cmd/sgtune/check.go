package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/shell"
	"github.com/sgtune/sgtune/space"
)

// reasonsPerRule bounds the reasons the text output lists per rule.
const reasonsPerRule = 8

// mergeAbove is how many reasons differing only in their numbers keep a
// line each (see mergeNumbers): as many as a rule lists, so that a
// param's choices (state slots 64, 128, 192, 256) keep their arithmetic.
const mergeAbove = reasonsPerRule

type ruleGroup struct {
	rule  string
	total int
	items []space.RejectionCount
}

// groupRejections groups distinct rejections by rule, biggest rule first;
// within a rule, reasons that differ only in their numbers are one line
// (see mergeNumbers), most configs first.
func groupRejections(rs []space.RejectionCount) []ruleGroup {
	idx := map[string]int{}
	var out []ruleGroup
	for _, r := range rs {
		i, ok := idx[r.Rule]
		if !ok {
			i = len(out)
			idx[r.Rule] = i
			out = append(out, ruleGroup{rule: r.Rule})
		}
		out[i].total += r.Count
		out[i].items = append(out[i].items, r)
	}
	for i := range out {
		out[i].items = mergeNumbers(out[i].items)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].total > out[j].total })
	return out
}

// mergeNumbers merges reasons that read the same but for their numbers
// ("predicted KV tokens -20643: no memory left", "... -108858: ...") into
// one, each number shown as the range it spans (-197072…-20643), with the
// counts summed, when more than mergeAbove of them do; fewer (a param's
// choices: 128 // 5 = 25, 256 // 5 = 51) keep a line each. Most
// configs first, then by text. A number is a word of its own, bar
// punctuation around it: fp8 or glm45 stay as they are.
func mergeNumbers(items []space.RejectionCount) []space.RejectionCount {
	type merged struct {
		words    []string
		numAt    []int // indices of the words that are numbers
		lo, hi   []float64
		loS, hiS []string
		count    int
		rule     string
		members  []space.RejectionCount
	}
	var order []string
	by := map[string]*merged{}
	for _, it := range items {
		words := strings.Split(it.Message, " ")
		shape := make([]string, len(words))
		var nums []float64
		var texts []string
		var at []int
		for i, w := range words {
			pre, core, post := splitNumber(w)
			if v, err := strconv.ParseFloat(core, 64); err == nil && core != "" {
				// NUL cannot occur in a reason: the key tells numbers apart.
				shape[i] = pre + "\x00" + post
				nums, texts, at = append(nums, v), append(texts, core), append(at, i)
				continue
			}
			shape[i] = w
		}
		key := strings.Join(shape, " ")
		m := by[key]
		if m == nil {
			m = &merged{words: words, numAt: at, lo: slices.Clone(nums), hi: slices.Clone(nums), loS: slices.Clone(texts), hiS: slices.Clone(texts), rule: it.Rule}
			by[key] = m
			order = append(order, key)
		}
		for k, v := range nums {
			if v < m.lo[k] {
				m.lo[k], m.loS[k] = v, texts[k]
			}
			if v > m.hi[k] {
				m.hi[k], m.hiS[k] = v, texts[k]
			}
		}
		m.count += it.Count
		m.members = append(m.members, it)
	}
	out := make([]space.RejectionCount, 0, len(order))
	for _, key := range order {
		m := by[key]
		if len(m.members) <= mergeAbove {
			out = append(out, m.members...)
			continue
		}
		words := slices.Clone(m.words)
		for k, i := range m.numAt {
			pre, _, post := splitNumber(words[i])
			num := m.loS[k]
			if m.lo[k] != m.hi[k] {
				num += "…" + m.hiS[k]
			}
			words[i] = pre + num + post
		}
		out = append(out, space.RejectionCount{Rule: m.rule, Message: strings.Join(words, " "), Count: m.count})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Message < out[j].Message
	})
	return out
}

// splitNumber splits a word into leading punctuation, its core and
// trailing punctuation: "(~192" is "(~", "192", "".
func splitNumber(w string) (pre, core, post string) {
	core = strings.TrimLeft(w, "(~[")
	pre = w[:len(w)-len(core)]
	trimmed := strings.TrimRight(core, "):;,]%")
	return pre, trimmed, core[len(trimmed):]
}

// checkCmd is `sgtune check STUDY_FILE [--json]`.
func (a *app) checkCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check STUDY_FILE",
		Short: "Validate a study file and explain which configs would be rejected; launches nothing",
		Long: `check validates a study file, prints the size of its search space, checks
every config (or a deterministic sample when the space is large or
continuous) against SGLang's rules and the study's constraints, and explains
each distinct rejection with its numbers. It launches nothing and writes
nothing. Exit code 2 when the study file is invalid or no checked config is
feasible (sgtune run would refuse it). Warnings about this machine (engine
command not on PATH, API key unset or unreadable) do not change the exit code.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			invalid := func(err error) error {
				if asJSON {
					// The document says the file is invalid and why, one
					// problem per entry, as the text does per line.
					if jerr := writeJSON(a.stdout, struct {
						Path   string   `json:"path"`
						Valid  bool     `json:"valid"`
						Errors []string `json:"errors"`
					}{args[0], false, strings.Split(err.Error(), "\n")}); jerr != nil {
						return jerr
					}
				}
				return badInput(err)
			}
			st, err := space.Load(args[0])
			if err != nil {
				return invalid(err)
			}
			pre := search.Check(st, a.getenv)
			if len(pre.Invalid) > 0 {
				// run refuses it (pre.Err) before writing anything.
				return invalid(errors.Join(pre.Invalid...))
			}
			sv := pre.Survey
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(sv); err != nil {
					return err
				}
			} else {
				printSurvey(a.stdout, st, &pre)
			}
			// With --json, stdout holds only the document.
			warnTo := a.stdout
			if asJSON {
				warnTo = a.stderr
			}
			for _, w := range pre.Warnings {
				fmt.Fprintf(warnTo, "warning: %s\n", w)
			}
			for _, h := range pre.Host {
				fmt.Fprintf(warnTo, "warning: %v; sgtune run will refuse to start on this machine\n", h)
			}
			if len(pre.Runtime) > 0 {
				return errext.Bad(errors.Join(pre.Runtime...))
			}
			return pre.NoFeasible()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the survey as JSON")
	return cmd
}

func printSurvey(w io.Writer, st *space.Study, pre *search.Preflight) {
	sv := &pre.Survey
	verdict := "valid"
	if pre.NoFeasible() != nil {
		verdict = "valid file, but no config is feasible"
	}
	fmt.Fprintf(w, "study %s (%s): %s\n", st.Name, st.Path, verdict)
	engine := st.Engine.Name
	if st.Engine.Version != "" {
		engine += " " + st.Engine.Version
	}
	fmt.Fprintf(w, "engine: %s, command: %s, flags from %s\n", engine, shell.Join(st.Engine.Command), sv.Schema)
	if c := st.Engine.Container; c != nil {
		id := pre.ImageID
		if id == "" {
			id = "not found"
		}
		fmt.Fprintf(w, "container: %s run %s (image ID %s)", c.RuntimeName(), c.Image, id)
		if len(c.Options)+len(c.Volumes) > 0 {
			fmt.Fprintf(w, ", options %s", shell.Join(append(slices.Clone(c.Options), c.Volumes...)))
		}
		fmt.Fprintln(w, "; the command runs inside it, with the trial's GPUs and a name and labels per trial")
	}
	cpus := ""
	if st.CPUsPerTrial > 0 {
		cpus = fmt.Sprintf(", %d CPUs per trial", st.CPUsPerTrial)
	}
	fmt.Fprintf(w, "model: %s; %d GPUs per trial, %d GPU group(s)%s; on_limits_reduced: %s\n", st.Model, st.GPUsPerTrial, len(st.GPUGroups), cpus, st.OnLimitsReduced)
	fmt.Fprintf(w, "params: %s\n", sv.ParamList())
	switch {
	case sv.Enumerated:
		fmt.Fprintf(w, "space: %d configs, every one checked\n", sv.Size)
	case sv.Continuous:
		fmt.Fprintf(w, "space: continuous; checked a deterministic sample of %d configs\n", sv.Checked)
	default:
		fmt.Fprintf(w, "space: up to %.0f configs; checked a deterministic sample of %d\n", sv.Bound, sv.Checked)
	}
	pct := 0.0
	if sv.Checked > 0 {
		pct = 100 * float64(sv.Feasible) / float64(sv.Checked)
	}
	fmt.Fprintf(w, "feasible: %d (%.1f%%), infeasible: %d\n", sv.Feasible, pct, sv.Infeasible)
	for _, e := range sv.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	if len(sv.Rejections) > 0 {
		fmt.Fprintf(w, "rejections by rule (a config can break several):\n")
		for _, g := range groupRejections(sv.Rejections) {
			fmt.Fprintf(w, "  %s: %d configs\n", g.rule, g.total)
			for i, r := range g.items {
				if i == reasonsPerRule && len(g.items) > reasonsPerRule+1 {
					fmt.Fprintf(w, "    ... and %d more %s reasons (see --json)\n", len(g.items)-reasonsPerRule, g.rule)
					break
				}
				fmt.Fprintf(w, "    %6d  %s\n", r.Count, r.Message)
			}
		}
	}
	if sv.Example != nil {
		fmt.Fprintf(w, "example feasible config: %s\n", shell.Join(st.Argv(sv.Example)))
	}
	printBaseline(w, sv.Baseline, sv.Errors)
}

// printBaseline prints the engine-default config a run launches first
// (budget.baseline: default): its command line, what it sets and leaves
// to the engine, and the rules that would reject it before launch. errs
// are the space's errors check listed: one the default meets too is
// named, not repeated.
func printBaseline(w io.Writer, b *space.SurveyBaseline, errs []string) {
	if b == nil {
		return
	}
	if b.Error != "" {
		why := b.Error
		if slices.ContainsFunc(errs, func(e string) bool { return strings.HasPrefix(e, b.Error) }) {
			why = "the error above"
		}
		fmt.Fprintf(w, "engine default (budget.baseline: default): cannot be resolved (%s); the run stores it infeasible\n", why)
		return
	}
	fmt.Fprintf(w, "engine default (budget.baseline: default, launched first and counted in budget.trials): %s\n", shell.Join(b.Argv))
	set := b.Params.String()
	if set == "" {
		set = "no param"
	}
	left := ""
	if len(b.Omitted) > 0 {
		left = "; left to the engine (neither a flagless value nor default:): " + strings.Join(b.Omitted, ", ")
	}
	fmt.Fprintf(w, "  sets %s%s\n", set, left)
	if len(b.Rejections) > 0 {
		fmt.Fprintf(w, "  the rules reject it before launch; the run stores it infeasible:\n")
		for _, r := range b.Rejections {
			fmt.Fprintf(w, "    %s: %s\n", r.Rule, r.Message)
		}
	}
}

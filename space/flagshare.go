package space

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sgtune/sgtune/engine"
)

// A flag two params emit is emitted twice by every config that has both
// active with such values, and the engine takes one of the two: each such
// config would be rejected at survey time naming neither param. So is a
// derived flag that a param or another derived entry writes too. Two
// writers may share a flag when no config has both writing it: their when:
// conditions never hold together (one written per branch), or a
// constraint rejects those configs. That is decided here by enumerating
// the params the conditions and those constraints read, and left to the
// survey when one of them is continuous or there are too many
// combinations. (A flag fixed: writes is refused outright, by
// fixedConflict: every config has it.)

// maxShareCombos bounds the combinations enumerated to decide whether two
// writers sharing a flag can both write it, and maxShareTotal those of all
// pairs of a study (a file of many params sharing one flag).
const (
	maxShareCombos = 100000
	maxShareTotal  = 1000000
)

// emittedFlag is where a param writes one flag: the field the flag text is
// in and the values that emit it.
type emittedFlag struct {
	at      flagNode
	written string          // the flag as written there
	values  map[string]bool // values (as text) that emit it
}

// derivedFlag is where a derived entry writes its flag: the setting
// (engine.FlagSpec.Setting) and the entry's flag field and index in the
// file.
type derivedFlag struct {
	setting string
	index   int
	at      flagNode
}

// flagWriter is what may write a flag in a config: a param, or a derived
// entry.
type flagWriter struct {
	param   int      // the param's index in st.Params; -1 for a derived entry
	derived *Derived // the derived entry, else nil
}

func paramWriter(i int) flagWriter         { return flagWriter{param: i} }
func derivedWriter(dv *Derived) flagWriter { return flagWriter{param: -1, derived: dv} }

// emittedFlags lists the flags a param emits, by the setting they write
// (engine.FlagSpec.Setting: the canonical name, or --NAME for vLLM's
// --no-NAME), with where each is written: its flag, flags item, template or values entry. Values
// that do not parse still name their flags (a param whose values its flag
// does not take is most often one given another param's flag by mistake).
func (d *dec) emittedFlags(st *Study, p *Param, m *mapNode) map[string]*emittedFlag {
	out := map[string]*emittedFlag{}
	for _, v := range p.withValuesKeys(d.sampleValues(p)) {
		words, err := p.emit(v)
		if err != nil {
			continue
		}
		for _, w := range flagWords(st.Schema, words) {
			spec, _ := st.Schema.Lookup(w)
			e := out[spec.Setting()]
			if e == nil {
				e = &emittedFlag{at: d.flagSite(p, m, v, w), written: w, values: map[string]bool{}}
				out[spec.Setting()] = e
			}
			e.values[v] = true
		}
	}
	return out
}

// flagWords are the words of argv that name a flag of the schema (the name
// part of --flag=value).
func flagWords(s *engine.FlagSchema, argv []string) []string {
	var out []string
	for _, w := range argv {
		if !strings.HasPrefix(w, "-") {
			continue
		}
		name, _, _ := strings.Cut(w, "=")
		if _, ok := s.Lookup(name); ok {
			out = append(out, name)
		}
	}
	return out
}

// flagSite is the field of p that writes flag w for value v.
func (d *dec) flagSite(p *Param, m *mapNode, v, w string) flagNode {
	if _, ok := p.Values[v]; ok {
		if vn := m.node("values"); vn != nil && vn.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(vn.Content); i += 2 {
				if k := deref(vn.Content[i]); k != nil && k.Kind == yaml.ScalarNode && scalarText(k) == v {
					return flagNode{deref(vn.Content[i+1]), m.path + ".values." + v}
				}
			}
		}
		return flagNode{m.at("values"), m.path + ".values"}
	}
	switch {
	case p.Template != "":
		return flagNode{m.at("template"), m.path + ".template"}
	case len(p.Flags) > 0:
		if fn := m.node("flags"); fn != nil && fn.Kind == yaml.SequenceNode {
			for j, c := range fn.Content {
				if c := deref(c); c != nil && c.Kind == yaml.ScalarNode && c.Value == w {
					return flagNode{c, fmt.Sprintf("%s.flags[%d]", m.path, j)}
				}
			}
		}
		return flagNode{m.at("flags"), m.path + ".flags"}
	}
	return flagNode{m.at("flag"), m.path + ".flag"}
}

// scalarText is a scalar's text as a param value: booleans spelled true or
// false, whatever their YAML spelling.
func scalarText(n *yaml.Node) string {
	if n.ShortTag() == "!!bool" {
		var b bool
		if n.Decode(&b) == nil {
			return fmt.Sprint(b)
		}
	}
	return n.Value
}

// sharedFlags reports each param that emits a flag an earlier param emits
// too, and each derived entry whose flag a param or an earlier derived
// entry writes too, when some config has both writing it and passes the
// constraints.
func (d *dec) sharedFlags(st *Study) {
	emitted := d.emitted
	if len(emitted) != len(st.Params) || len(d.derivedFlags) != len(st.Derived) {
		return
	}
	budget := maxShareTotal
	for j := range st.Params {
		for _, flag := range slices.Sorted(maps.Keys(emitted[j])) {
			for i := range j {
				ei, ej := emitted[i][flag], emitted[j][flag]
				if ei == nil {
					continue
				}
				if both, decided := st.coEmit(paramWriter(i), paramWriter(j), flag, &budget); !decided || !both {
					continue
				}
				d.fail(ej.at.node, ej.at.path, "%s is also %s; valid: one param per flag (two may share one where no config has both writing it: when: conditions that never hold together, or a constraint)",
					ej.written, ei.says(st.Params[i].Name, ej.written))
				break
			}
		}
	}
	// A derived entry is blamed, whatever its place: the param is where
	// the flag is searched, the entry what repeats it.
	const apart = "where no config has both writing it: when: conditions that never hold together, or a constraint"
	for j, dj := range d.derivedFlags {
		dv := &st.Derived[j]
		other, valid := "", ""
		for i := range st.Params {
			if ei := emitted[i][dj.setting]; ei != nil {
				if both, decided := st.coEmit(paramWriter(i), derivedWriter(dv), dj.setting, &budget); decided && both {
					other = ei.says(st.Params[i].Name, dv.Flag)
					valid = "derive it or search it, not both (a param and a derived entry may share a flag " + apart + ")"
					break
				}
			}
		}
		for i := 0; i < j && other == ""; i++ {
			if di := d.derivedFlags[i]; di.setting == dj.setting {
				if both, decided := st.coEmit(derivedWriter(&st.Derived[i]), derivedWriter(dv), dj.setting, &budget); decided && both {
					other = fmt.Sprintf("derived[%d]'s flag", di.index)
					if st.Derived[i].Flag != dv.Flag {
						other += " (as " + st.Derived[i].Flag + ")"
					}
					valid = "one derived entry per flag (two may share one " + apart + ")"
				}
			}
		}
		if other != "" {
			d.fail(dj.at.node, dj.at.path, "%s is also %s; valid: %s", dv.Flag, other, valid)
		}
	}
}

// says names where e's param (named name) writes the flag, for messages:
// "params[a]'s flag" or "written by params[a].values.x", with " (as
// --no-x)" where it spells the flag otherwise than written, the other
// writer's spelling.
func (e *emittedFlag) says(name, written string) string {
	out := fmt.Sprintf("params[%s]'s flag", name)
	if strings.Contains(e.at.path, ".values") {
		out = "written by " + e.at.path
	}
	if e.written != written {
		out += " (as " + e.written + ")"
	}
	return out
}

// coEmit reports whether some config has writers a and b both writing
// flag (a setting), a param active with a value that emits it, a derived
// entry with its when: holding and a value that writes it, that passes the
// constraints on params; decided is false when that cannot be told by
// enumerating the params their when: conditions and the constraints read
// (a continuous one, a prediction, a condition that did not compile, or
// more combinations than maxShareCombos or what is left of budget, which
// it spends).
func (st *Study) coEmit(a, b flagWriter, flag string, budget *int) (both, decided bool) {
	index := map[string]int{}
	for k, p := range st.Params {
		index[p.Name] = k
	}
	inSet := map[int]bool{}
	read := map[int]bool{} // read by a condition or a constraint
	var queue []int
	// need adds the params names; reads says their values are read too,
	// else only whether they are active (their own when: is followed).
	need := func(names []string, reads bool) {
		for _, name := range names {
			if r, ok := index[name]; ok { // else gpus_per_trial: fixed
				read[r] = read[r] || reads
				if !inSet[r] {
					inSet[r] = true
					queue = append(queue, r)
				}
			}
		}
	}
	add := func(names []string) { need(names, true) }
	for _, w := range []flagWriter{a, b} {
		if w.derived == nil {
			need([]string{st.Params[w.param].Name}, false)
			continue
		}
		dv := w.derived
		if dv.When != "" && dv.when == nil || dv.value == nil {
			return false, false
		}
		if dv.when != nil {
			add(dv.when.Names())
		}
		// A value that gives a number or a string writes the flag whatever
		// the values of the params it reads, once they are all active
		// (derive writes nothing for an unset name): those are followed,
		// not enumerated. One that may give true, false or null is.
		k := dv.value.kinds(st.domainOf)
		need(dv.value.Names(), k == nil || k["bool"] || k["null"])
	}
	// The params the conditions read, the ones those read, ..., and
	// those of the constraints on any of them. A constraint that cannot be
	// evaluated here (on a continuous param, or on predicted.*: nothing is
	// predicted at load) may be what keeps the two apart: undecided.
	var cons []*Expr
	used := make([]bool, len(st.constraints))
	for {
		for len(queue) > 0 {
			k := queue[0]
			queue = queue[1:]
			p := &st.Params[k]
			if p.When != "" && p.when == nil {
				return false, false
			}
			if p.when != nil {
				add(p.when.Names())
			}
		}
		for c, e := range st.constraints {
			if used[c] || !slices.ContainsFunc(e.Names(), func(n string) bool { k, ok := index[n]; return ok && inSet[k] }) {
				continue
			}
			used[c] = true
			if slices.ContainsFunc(e.Names(), func(n string) bool {
				if strings.HasPrefix(n, "predicted.") {
					return true
				}
				k, ok := index[n]
				if !ok {
					return false
				}
				_, finite := st.Params[k].count()
				return !finite
			}) {
				return false, false
			}
			cons = append(cons, e)
			add(e.Names())
		}
		if len(queue) == 0 {
			break
		}
	}
	order := slices.Sorted(maps.Keys(inSet))
	// domain is what k may take: every value where it is read, else one
	// stand-in (a param writer unread: some value of it emits the flag; a
	// param a derived value reads: active with some value).
	domain := map[int][]any{}
	combos := 1
	for _, k := range order {
		domain[k] = []any{nil}
		if read[k] {
			// Counted before it is listed: a fine-stepped float's
			// millions of values would be refused below anyway.
			if n, finite := st.Params[k].count(); !finite || n+1 > maxShareCombos {
				return false, false
			}
			domain[k] = st.Params[k].values()
		}
		combos *= len(domain[k]) + 1
		if combos > maxShareCombos || combos > *budget {
			return false, false
		}
	}
	*budget -= combos
	standIn := map[string]bool{} // active params with a stand-in value
	writes := func(w flagWriter, p Params) bool {
		return w.derived != nil && st.derivedWrites(w.derived, p, standIn)
	}
	var rec func(n int, p Params, onA, onB bool) bool
	rec = func(n int, p Params, onA, onB bool) bool {
		if n == len(order) {
			if !(onA || writes(a, p)) || !(onB || writes(b, p)) {
				return false
			}
			env := st.env(p, nil)
			for _, e := range cons {
				// As in Check: an unset name passes, an error rejects.
				if ok, err := e.EvalBool(env); !errors.Is(err, errUnset) && (err != nil || !ok) {
					return false
				}
			}
			return true
		}
		k := order[n]
		par := &st.Params[k]
		on, err := st.active(par, p)
		if err != nil {
			on = false
		}
		if !on {
			return rec(n+1, p, onA, onB)
		}
		for _, v := range domain[k] {
			emitting := v == nil // an unread param writer: some value emits it
			if v != nil {
				p[par.Name] = v
				emitting = st.emitsFlag(par, par.text(v), flag)
			} else {
				standIn[par.Name] = true
			}
			ok := rec(n+1, p, onA || (k == a.param && emitting), onB || (k == b.param && emitting))
			delete(p, par.Name)
			delete(standIn, par.Name)
			if ok {
				return true
			}
		}
		return false
	}
	return rec(0, Params{}, false, false), true
}

// derivedWrites reports whether dv writes its flag in config p, where the
// params in standIn are active with a value not enumerated (dv's value
// then gives a number or a string: it writes whatever they are). As in
// derive: a when: that is false or reads an unset name writes nothing, nor
// does a value that reads one or gives false or null; an error fails the
// config, which then writes nothing either.
func (st *Study) derivedWrites(dv *Derived, p Params, standIn map[string]bool) bool {
	env := st.env(p, nil)
	if dv.when != nil {
		if on, err := dv.when.EvalBool(env); err != nil || !on {
			return false
		}
	}
	names := dv.value.Names()
	if slices.ContainsFunc(names, func(n string) bool { return standIn[n] }) {
		return !slices.ContainsFunc(names, func(n string) bool { _, set := env[n]; return !set && !standIn[n] })
	}
	v, err := dv.value.Eval(env)
	return err == nil && len(dv.words(v)) > 0
}

// emitsFlag reports whether value v of par writes flag (a setting).
func (st *Study) emitsFlag(par *Param, v, flag string) bool {
	words, err := par.emit(v)
	if err != nil {
		return false
	}
	for _, w := range flagWords(st.Schema, words) {
		if spec, _ := st.Schema.Lookup(w); spec.Setting() == flag {
			return true
		}
	}
	return false
}

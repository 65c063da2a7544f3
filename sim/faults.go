package sim

import (
	"fmt"
	"strings"
)

// Facts returns the values fault predicates are evaluated against.
func (pl *Plan) Facts(a *Args) map[string]any {
	return map[string]any{
		"tp_size":                    pl.TP,
		"ep_size":                    pl.EP,
		"dp_size":                    pl.DP,
		"world_size":                 pl.worldSize(),
		"disable_radix_cache":        !pl.Radix,
		"disable_cuda_graph":         !pl.CUDAGraph,
		"disable_overlap_schedule":   !pl.Overlap,
		"state_slots":                pl.StateSlots,
		"mem_fraction_static":        pl.MemFraction,
		"speculative_algorithm":      pl.SpecAlgorithm,
		"speculative_num_steps":      pl.SpecSteps,
		"enable_dp_attention":        a.Bool("enable_dp_attention"),
		"chunked_prefill_size":       pl.ChunkedPrefill,
		"cuda_graph_max_bs":          pl.GraphMaxBS,
		"max_running_requests":       pl.EffectiveMRR,
		"kv_cache_dtype":             pl.KVDtype,
		"mamba_radix_cache_strategy": pl.Strategy,
		"moe_a2a_backend":            a.String("moe_a2a_backend", "none"),
		"attention_backend":          a.String("attention_backend", ""),
	}
}

// worldSize is how many GPUs the launch uses: TP x PP, times DP for vLLM,
// whose data-parallel engines each have their own TP x PP ranks, and for
// SGLang's DP replicas (--dp-size without DP attention).
func (pl *Plan) worldSize() int {
	if pl.Dialect == EngineVLLM {
		return pl.TP * pl.PP * pl.DP
	}
	return pl.TP * pl.PP * pl.replicas()
}

// MatchFaults returns the rules whose predicates hold.
func MatchFaults(rules []FaultRule, facts map[string]any) ([]FaultRule, error) {
	var out []FaultRule
	for _, r := range rules {
		ok, err := matchAll(r.When, facts)
		if err != nil {
			return nil, fmt.Errorf("fault %s: %w", r.Name, err)
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func matchAll(when map[string]any, facts map[string]any) (bool, error) {
	for k, cond := range when {
		v, ok := facts[k]
		if !ok {
			return false, fmt.Errorf("unknown fact %q", k)
		}
		m, err := matchCond(v, cond)
		if err != nil {
			return false, fmt.Errorf("%s: %w", k, err)
		}
		if !m {
			return false, nil
		}
	}
	return true, nil
}

func matchCond(v any, cond any) (bool, error) {
	if m, ok := cond.(map[string]any); ok {
		for op, want := range m {
			var r bool
			switch op {
			case "eq":
				r = equal(v, want)
			case "ne":
				r = !equal(v, want)
			case "lt", "le", "gt", "ge":
				a, ok1 := num(v)
				b, ok2 := num(want)
				if !ok1 || !ok2 {
					return false, fmt.Errorf("%s needs numbers", op)
				}
				r = map[string]bool{"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[op]
			case "in":
				list, ok := want.([]any)
				if !ok {
					return false, fmt.Errorf("in needs a list")
				}
				for _, w := range list {
					if equal(v, w) {
						r = true
					}
				}
			default:
				return false, fmt.Errorf("unknown operator %q", op)
			}
			if !r {
				return false, nil
			}
		}
		return true, nil
	}
	return equal(v, cond), nil
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func equal(a, b any) bool {
	if x, ok := num(a); ok {
		y, ok := num(b)
		return ok && x == y
	}
	if x, ok := a.(string); ok {
		y, ok := b.(string)
		return ok && strings.EqualFold(x, y)
	}
	return a == b
}

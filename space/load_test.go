package space

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadBadFiles(t *testing.T) {
	tests := []struct {
		file string
		want []string // substrings of the error
	}{
		{"bad-yaml.yaml", []string{"bad-yaml.yaml:", "bad YAML"}},
		{"unknown-field.yaml", []string{"unknown-field.yaml:9:5: params[ep].choises: unknown field (did you mean choices?)"}},
		{"wrong-type.yaml", []string{"wrong-type.yaml:7:14: gpus.per_trial: got \"four\"; valid: an integer"}},
		{"out-of-range.yaml", []string{"out-of-range.yaml:10:11: params[mem_fraction].high: --mem-fraction-static 1.5 is above 1; valid: <= 1"}},
		// A tab is named at its own line and column, whatever the YAML
		// parser's message and line.
		{"tabs.yaml", []string{"tabs.yaml:12:1: bad YAML: a tab at 12:1; YAML indents with spaces only; valid: indent with spaces"}},
		{"unknown-flag.yaml", []string{"unknown-flag.yaml:8:3: fixed.--mem-fraction-statc: unknown flag --mem-fraction-statc (did you mean --mem-fraction-static?)"}},
		{"bad-workload.yaml", []string{
			"bad-workload.yaml:10:15: workload.chat.requests: 2 counts for 3 concurrency levels; valid: one count per level",
			"bad-workload.yaml:13:34: score.slo[0].percentile: \"p95\"; valid: mean, p50, p90, p99",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, err := Load(filepath.Join("..", "testdata", "studies", "bad", tt.file))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}

// base is a minimal valid study; cases append or replace lines.
const base = `name: t
engine:
  name: sglang
  command: python3 -m sglang.launch_server
model: {path: org/model}
`

// compareParams are params of every kind for the comparison checks.
const compareParams = `params:
  - {name: ep, type: categorical, choices: [1, 4], flag: --ep-size}
  - {name: radix, type: bool, values: {false: --disable-radix-cache}}
  - {name: mf, type: categorical, choices: [0.78, 0.85]}
  - {name: mf2, type: float, low: 0.7, high: 0.9, step: 0.05}
  - {name: slots, type: categorical, choices: [auto, 256, 384], flag: --max-mamba-cache-size, values: {auto: ""}}
  - {name: speculative, type: categorical, choices: [none, EAGLE], values: {none: "", EAGLE: --speculative-algorithm EAGLE --speculative-eagle-topk 1}}
`

// Comparisons that some value of their param passes load, whatever the
// kinds and ranges.
func TestLoadComparisonsThatCanHold(t *testing.T) {
	for _, c := range []string{
		"ep == 4", "ep == 4.0", "4 == ep", "ep in [1, 4]", "ep not in [4]", "ep > 2", "-1 < ep", "ep == 1 or ep == gpus_per_trial",
		"radix == true", "radix != false", "not radix",
		"mf < 0.8", "mf2 <= 0.95", "mf2 == 2", // a number beyond a range says something still
		"slots == 'auto' or slots > 128", "slots in ['auto', 256]",
		"speculative == 'EAGLE'", "speculative < 'F'", "speculative != 'none'",
		"predicted.max_running_requests >= 100",
	} {
		t.Run(c, func(t *testing.T) {
			if _, err := Parse("t.yaml", []byte(base+compareParams+"constraints: [\""+c+"\"]\n")); err != nil {
				t.Error(err)
			}
		})
	}
}

// Derived values that some config can resolve load, whatever their kind.
func TestLoadDerivedValuesThatCanResolve(t *testing.T) {
	for _, dv := range []string{
		"{flag: --speculative-num-draft-tokens, value: ep + 1}",
		"{flag: --speculative-num-draft-tokens, value: gpus_per_trial * 2}",
		"{flag: --speculative-num-draft-tokens, value: \"'7'\"}",
		"{flag: --speculative-num-draft-tokens, value: slots}", // 256 and 384 resolve; auto does not
		// Not --speculative-algorithm: speculative's EAGLE writes it too.
		"{flag: --kv-cache-dtype, value: \"'fp8_e5m2'\", when: speculative == 'EAGLE'}",
		"{flag: --enable-metrics, value: radix}",
		"{flag: --enable-metrics, value: ep > 1 and not radix}",
		"{flag: --speculative-num-draft-tokens, value: 'null'}",
	} {
		t.Run(dv, func(t *testing.T) {
			if _, err := Parse("t.yaml", []byte(base+compareParams+"derived:\n  - "+dv+"\n")); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestLoadErrorTable(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"empty", ``, "t.yaml:1:1: empty study file"},
		{"not a mapping", `- a`, "t.yaml:1:1: got a list; valid: a mapping"},
		{"missing engine", "name: x\nmodel: m\n", "t.yaml:1:1: engine: missing"},
		{"engine name", strings.Replace(base, "name: sglang", "name: tgi", 1), `t.yaml:3:9: engine.name: "tgi"; valid: sglang, llamacpp, vllm`},
		{"command empty", strings.Replace(base, "command: python3 -m sglang.launch_server", `command: ""`, 1), `t.yaml:4:12: engine.command: empty; valid: a shell-style command line`},
		{"command quote", strings.Replace(base, "launch_server", "launch_server 'x", 1), `engine.command: cannot split "python3 -m sglang.launch_server 'x": unterminated single quote`},
		{"command host", strings.Replace(base, "launch_server", "launch_server --port 1", 1), "engine.command: contains --port"},
		{"unknown top", base + "parms: []\n", "t.yaml:6:1: parms: unknown field (did you mean params?)"},
		{"container runtime", strings.Replace(base, "launch_server\n", "launch_server\n  container: {runtime: lxc, image: x}\n", 1),
			`t.yaml:5:24: engine.container.runtime: "lxc"; valid: docker or podman`},
		{"container no image", strings.Replace(base, "launch_server\n", "launch_server\n  container: {runtime: docker}\n", 1),
			"t.yaml:5:14: engine.container.image: missing; valid: an image by tag or digest"},
		{"container reserved option", strings.Replace(base, "launch_server\n", "launch_server\n  container: {image: x, options: [--ipc=host, --gpus=all]}\n", 1),
			"t.yaml:5:34: engine.container.options: contains --gpus, which sgtune sets itself"},
		{"container volume", strings.Replace(base, "launch_server\n", "launch_server\n  container: {image: x, volumes: [/models]}\n", 1),
			`t.yaml:5:35: engine.container.volumes[0]: "/models"; valid: HOST_PATH:CONTAINER_PATH[:ro]`},
		{"container unknown field", strings.Replace(base, "launch_server\n", "launch_server\n  container: {image: x, volume: [a:b]}\n", 1),
			"engine.container.volume: unknown field (did you mean volumes?)"},
		{"container with slurm", strings.Replace(base, "launch_server\n", "launch_server\n  container: {image: x}\n", 1) + "launch: {scheduler: slurm}\n",
			"t.yaml:5:14: engine.container: not run by sgtune with launch.scheduler slurm"},
		{"duplicate key", base + "name: again\n", "t.yaml:6:1: name: given twice"},
		{"int param type", base + "params:\n  - {name: ep, type: int, low: a, high: 4, flag: --ep-size}\n", `t.yaml:7:32: params[ep].low: got "a"; valid: an integer`},
		{"int step", base + "params:\n  - {name: ep, type: int, low: 1, high: 4, step: 2, flag: --ep-size}\n", "params[ep].high: 4 is not low + k*step"},
		{"low > high", base + "params:\n  - {name: ep, type: int, low: 5, high: 4, flag: --ep-size}\n", "params[ep].high: 4 is below low 5"},
		{"bad param type", base + "params:\n  - {name: ep, type: integer}\n", `params[ep].type: "integer"; valid: int, float, categorical or bool`},
		{"bad name", base + "params:\n  - {name: Ep, type: bool}\n", `params[Ep].name: "Ep"; valid: a lower-case identifier`},
		{"reserved name", base + "params:\n  - {name: min, type: bool}\n", `params[min].name: "min"; valid`},
		{"dup name", base + "params:\n  - {name: a, type: bool}\n  - {name: a, type: bool}\n", `params[a].name: "a" used twice`},
		// A value the flag does not take is blamed where the value is
		// written, not at the flag: line, column and field of the value.
		{"range high beyond the flag", base + "params:\n  - name: mf\n    type: float\n    low: 0.5\n    high: 1.20\n    flag: --mem-fraction-static\n",
			"t.yaml:10:11: params[mf].high: --mem-fraction-static 1.2 is above 1; valid: <= 1"},
		{"range low below the flag", base + "params:\n  - name: mf\n    type: float\n    low: 0.0\n    high: 0.9\n    flag: --mem-fraction-static\n",
			"t.yaml:9:10: params[mf].low: --mem-fraction-static 0 is below 0.01; valid: >= 0.01"},
		{"int range through a template", base + "params:\n  - {name: r, type: int, low: 0, high: 8, template: '--max-running-requests={value}'}\n",
			"t.yaml:7:31: params[r].low: --max-running-requests 0 is below 1; valid: >= 1"},
		{"choice the flag does not take", base + "params:\n  - name: chunk\n    type: categorical\n    choices: [2048, 4k, big]\n    flag: --chunked-prefill-size\n",
			`t.yaml:9:21: params[chunk].choices[1]: --chunked-prefill-size "4k" is not an integer; valid: an integer`},
		{"choice item in a block list", base + "params:\n  - name: kv\n    type: categorical\n    choices:\n      - auto\n      - fp9\n    flags: [--kv-cache-dtype]\n",
			`t.yaml:11:9: params[kv].choices[1]: --kv-cache-dtype "fp9" is not a valid choice`},
		// SGLang's --schedule-policy is a closed argparse list: a value
		// outside it fails at launch, so it is an error at its item.
		{"schedule policy not a choice", base + "params:\n  - {name: sp, type: categorical, choices: [fcfs, lpm, fifo], flag: --schedule-policy}\n",
			`t.yaml:7:56: params[sp].choices[2]: --schedule-policy "fifo" is not a valid choice (did you mean fcfs?); valid: lpm, random, fcfs, dfs-weight, lof, priority, routing-key, hrrn`},
		{"choices int flag", base + "params:\n  - {name: ep, type: categorical, choices: [1, x], flag: --ep-size}\n", `--ep-size "x" is not an integer`},
		{"choice flag choices", base + "params:\n  - {name: kv, type: categorical, choices: [auto, fp9], flag: --kv-cache-dtype}\n", `--kv-cache-dtype "fp9" is not a valid choice`},
		{"bool on value flag", base + "params:\n  - {name: ep, type: bool, flag: --ep-size}\n", "params[ep].flag: --ep-size takes a value"},
		{"unknown param flag", base + "params:\n  - {name: r, type: bool, flag: --disable-radix}\n", "unknown flag --disable-radix (did you mean --disable-radix-cache?)"},
		{"values unknown key", base + "params:\n  - {name: r, type: bool, values: {maybe: --disable-radix-cache}}\n", `params[r].values.maybe: "maybe" is not a value of this param`},
		{"values missing choice", base + "params:\n  - {name: s, type: categorical, choices: [a, b], values: {a: --enable-metrics}}\n", `values has no entry for "b"`},
		{"when unknown name", base + "params:\n  - {name: s, type: bool, when: spec == 1}\n", "params[s].when: unknown name spec"},
		// A when: naming a param declared below says so, not "unknown
		// name" with a did-you-mean of an unrelated earlier name.
		{"when later param", base + "params:\n  - {name: s, type: bool, when: t}\n  - {name: t, type: bool}\n",
			"t.yaml:7:33: params[s].when: t is params[1], declared after this one; when: may use earlier params only: move it above"},
		{"when later param in a comparison", base + "params:\n  - {name: gpus, type: int, low: 1, high: 2}\n" +
			"  - {name: mem_fraction, type: float, low: 0.7, high: 0.9, flag: --mem-fraction-static, when: \"schedule_policy == 'lpm'\"}\n" +
			"  - {name: chunk, type: bool}\n  - {name: schedule_policy, type: categorical, choices: [fcfs, lpm], flag: --schedule-policy}\n",
			"params[mem_fraction].when: schedule_policy is params[3], declared after this one; when: may use earlier params only: move it above"},
		{"when itself", base + "params:\n  - {name: a, type: bool}\n  - {name: s, type: bool, when: s or a}\n",
			"t.yaml:8:33: params[s].when: refers to s itself; valid: earlier params only"},
		{"when syntax", base + "params:\n  - {name: s, type: bool, when: 'a =='}\n", "params[s].when: unexpected"},
		{"constraint predicted", base + "constraints: ['predicted.kv > 1']\n", "unknown name predicted.kv (did you mean predicted.kv_tokens?)"},
		{"fixed launcher flag", base + "fixed: {--port: 8000}\n", "--port is set by the launcher"},
		{"fixed api key", base + "fixed: {--api-key: sekrit}\n", "t.yaml:6:9: fixed.--api-key: --api-key sets the server's API key; valid: launch.api_key_env or launch.api_key_file"},
		// Each flag is blamed at its own key, not at the mapping's first.
		{"fixed launcher flag on its line", base + "fixed:\n  --tp-size: 4\n  --port: 30000\n", "t.yaml:8:3: fixed.--port: --port is set by the launcher; valid: leave it out"},
		{"fixed list element", base + "fixed: [--tp-size 4, --port 30000]\n", "t.yaml:6:22: fixed[1]: --port is set by the launcher"},
		{"param api key", base + "params:\n  - {name: k, type: categorical, choices: [a, b], flag: --api-key}\n", "--api-key sets the server's API key"},
		{"fixed model path", base + "fixed: '--model-path x'\n", "--model-path comes from model.path"},
		{"fixed switch value", base + "fixed: {--enable-metrics: 1}\n", "fixed.--enable-metrics: --enable-metrics is a switch; valid: true or false"},
		{"fixed and param", base + "fixed: {--ep-size: 4}\nparams:\n  - {name: ep, type: categorical, choices: [1], flag: --ep-size}\n", "--ep-size is also a fixed flag"},
		// vLLM's --NAME and --no-NAME set one switch: fixing it false (written
		// --no-NAME) and searching --NAME is a conflict, wherever it is written.
		{"vllm fixed off, param on", vllmBase + "fixed: {--enable-prefix-caching: false}\nparams:\n  - {name: pc, type: bool, values: {true: --enable-prefix-caching, false: ''}}\n",
			"t.yaml:10:36: params[pc].values: --enable-prefix-caching is also fixed: fixed.--enable-prefix-caching writes --no-enable-prefix-caching; valid: search it or fix it, not both"},
		{"vllm fixed off, param flag", vllmBase + "fixed: {--enforce-eager: false}\nparams:\n  - {name: eager, type: bool, flag: --enforce-eager}\n",
			"t.yaml:10:37: params[eager].flag: --enforce-eager is also fixed: fixed.--enforce-eager writes --no-enforce-eager; valid: search it or fix it, not both"},
		{"vllm fixed --no-NAME, param on", vllmBase + "fixed: [--no-async-scheduling]\nparams:\n  - {name: a, type: bool, values: {true: --async-scheduling, false: ''}}\n",
			"params[a].values: --async-scheduling is also fixed: fixed[0] writes --no-async-scheduling"},
		{"vllm fixed on, derived off", vllmBase + "fixed: {--enable-prefix-caching: true}\nparams:\n  - {name: s, type: bool}\nderived:\n  - {flag: --no-enable-prefix-caching, value: s}\n",
			"derived[--no-enable-prefix-caching].flag: --no-enable-prefix-caching is also fixed: fixed.--enable-prefix-caching writes --enable-prefix-caching; valid: derive it or fix it, not both"},
		{"vllm fixed both spellings", vllmBase + "fixed:\n  --enable-prefix-caching: true\n  --no-enable-prefix-caching: true\n",
			"t.yaml:10:3: fixed.--no-enable-prefix-caching: --no-enable-prefix-caching sets the switch that fixed.--enable-prefix-caching writes --enable-prefix-caching; valid: one of them"},
		// A switch with no negation fixed false writes nothing, and is fixed.
		{"fixed false, param", base + "fixed: {--enable-metrics: false}\nparams:\n  - {name: m, type: bool, flag: --enable-metrics}\n",
			"params[m].flag: --enable-metrics is also fixed: fixed.--enable-metrics is false, which writes nothing; valid: search it or fix it, not both"},
		// Two params that emit one flag are an error at the second's flag,
		// naming the first (each config would emit the flag twice).
		{"two params one flag", base + "params:\n  - {name: a, type: categorical, choices: [2048, 4096], flag: --chunked-prefill-size}\n  - {name: b, type: int, low: 1024, high: 8192, step: 1024, flag: --chunked-prefill-size}\n",
			"t.yaml:8:67: params[b].flag: --chunked-prefill-size is also params[a]'s flag; valid: one param per flag"},
		{"two params one flag, other types", base + "params:\n  - {name: a, type: float, low: 0.5, high: 0.9, flag: --mem-fraction-static}\n  - {name: b, type: categorical, choices: [fcfs, lpm], flag: --mem-fraction-static}\n",
			"t.yaml:8:62: params[b].flag: --mem-fraction-static is also params[a]'s flag"},
		{"flag in another param's values", base + "params:\n  - {name: a, type: categorical, choices: [2048, 4096], flag: --chunked-prefill-size}\n  - {name: b, type: bool, values: {true: --chunked-prefill-size -1}}\n",
			"t.yaml:8:42: params[b].values.true: --chunked-prefill-size is also params[a]'s flag"},
		{"values of two params", base + "params:\n  - {name: c, type: categorical, choices: [x, y], values: {x: --chunked-prefill-size 4096, y: ''}}\n" +
			"  - {name: d, type: bool, values: {true: --chunked-prefill-size 8192, false: ''}}\nconstraints: [\"c == 'x' or not d or gpus_per_trial == 1\"]\n",
			"t.yaml:8:42: params[d].values.true: --chunked-prefill-size is also written by params[c].values.x"},
		{"flags item", base + "params:\n  - {name: a, type: int, low: 1, high: 4, flag: --ep-size}\n  - {name: b, type: int, low: 1, high: 4, flags: [--tp-size, --ep]}\n",
			"t.yaml:8:62: params[b].flags[1]: --ep is also params[a]'s flag (as --ep-size)"},
		// vLLM's --NAME and --no-NAME set one switch: two params writing
		// them are two params on one setting.
		{"vllm one switch, two params", vllmBase + "params:\n  - {name: a, type: bool, values: {true: --enable-prefix-caching, false: ''}}\n  - {name: b, type: bool, values: {true: --no-enable-prefix-caching, false: ''}}\n",
			"t.yaml:10:42: params[b].values.true: --no-enable-prefix-caching is also written by params[a].values.true (as --enable-prefix-caching)"},
		{"shared flag, conditions that can hold together", base + compareParams +
			"  - {name: s1, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: speculative == 'EAGLE'}\n" +
			"  - {name: s2, type: int, low: 2, high: 4, flag: --speculative-num-steps, when: ep == 4}\n",
			"t.yaml:14:50: params[s2].flag: --speculative-num-steps is also params[s1]'s flag"},
		// A derived flag a param writes too is an error at the entry's
		// flag, naming the param, as for two params (each config with
		// both would emit it twice, rejected at survey time naming
		// neither).
		{"derived flag a param writes", base + compareParams +
			"  - {name: steps, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: speculative == 'EAGLE'}\n" +
			"  - {name: draft, type: int, low: 2, high: 4, flag: --speculative-num-draft-tokens, when: speculative == 'EAGLE'}\n" +
			"derived:\n  - flag: --speculative-num-draft-tokens\n    value: steps + 1\n    when: speculative == 'EAGLE'\n",
			"t.yaml:16:11: derived[--speculative-num-draft-tokens].flag: --speculative-num-draft-tokens is also params[draft]'s flag; valid: derive it or search it, not both"},
		{"derived flag in a param's values", base + compareParams +
			"  - {name: draft, type: bool, values: {true: --speculative-num-draft-tokens 4, false: ''}}\n" +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: ep + 1}\n",
			"t.yaml:15:12: derived[--speculative-num-draft-tokens].flag: --speculative-num-draft-tokens is also written by params[draft].values.true"},
		// The derived value's params must be active for it to write: here
		// they are wherever the param writes the flag.
		{"derived flag, value's param active with the param", base + compareParams +
			"  - {name: steps, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: speculative == 'EAGLE'}\n" +
			"  - {name: draft, type: int, low: 2, high: 4, flag: --speculative-num-draft-tokens, when: ep == 4}\n" +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: steps + 1}\n",
			"derived[--speculative-num-draft-tokens].flag: --speculative-num-draft-tokens is also params[draft]'s flag"},
		{"vllm derived switch a param writes", vllmBase + "params:\n  - {name: a, type: bool, values: {true: --enable-prefix-caching, false: ''}}\n  - {name: s, type: bool}\n" +
			"derived:\n  - {flag: --no-enable-prefix-caching, value: s}\n",
			"derived[--no-enable-prefix-caching].flag: --no-enable-prefix-caching is also written by params[a].values.true (as --enable-prefix-caching)"},
		{"two derived entries one flag", base + compareParams +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: 4, when: speculative == 'EAGLE'}\n  - {flag: --speculative-num-draft-tokens, value: ep + 1, when: radix}\n",
			"t.yaml:15:12: derived[--speculative-num-draft-tokens].flag: --speculative-num-draft-tokens is also derived[0]'s flag; valid: one derived entry per flag"},
		{"fixed and derived", base + "fixed: {--speculative-num-draft-tokens: 4}\n" + compareParams +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: ep + 1}\n",
			"derived[--speculative-num-draft-tokens].flag: --speculative-num-draft-tokens is also a fixed flag; valid: derive it or fix it, not both"},
		{"gpus group size", base + "gpus: {per_trial: 2, groups: [[0, 1], [2]]}\n", "gpus.groups[1]: 1 GPUs; valid: exactly gpus.per_trial = 2"},
		{"gpus overlap", base + "gpus: {per_trial: 1, groups: [[0], [0]]}\n", "GPU 0 is in two groups"},
		{"kind", base + "workload: {kind: soak}\n", `workload.kind: "soak"; valid: chat or matrix`},
		{"prompts file", base + "workload: {chat: {prompts_file: nope.txt}}\n", "t.yaml:6:33: workload.chat.prompts_file: prompts file: open nope.txt: no such file or directory; valid: a readable file of prompts"},
		{"requests below level", base + "workload: {chat: {concurrency: [1, 16], requests: [4, 8]}}\n", "t.yaml:6:51: workload.chat.requests: 8 at concurrency 16; valid: at least as many requests as the level's concurrency"},
		{"concurrency zero", base + "workload: {chat: {concurrency: [0], requests: [1]}}\n", "workload.chat.concurrency[0]: 0; valid: an integer >= 1"},
		{"min_pass zero", base + "workload: {quality: {min_pass: 0}}\n", "workload.quality.min_pass: 0; valid: a fraction in (0, 1]; use enabled: false to turn the gates off"},
		{"min_pass negative", base + "workload: {quality: {min_pass: -0.5}}\n", "workload.quality.min_pass: -0.5; valid: a fraction in (0, 1]"},
		{"min_pass over 1", base + "workload: {quality: {min_pass: 1.5}}\n", "workload.quality.min_pass: 1.5; valid: a fraction in (0, 1]"},
		{"score level", base + "score: {concurrency: 48}\n", "score.concurrency: 48 is not a measured level"},
		{"duration", base + "launch: {startup_timeout: 20}\n", "launch.startup_timeout: got an integer (20); valid: a Go duration"},
		{"duration negative", base + "launch: {startup_timeout: -2m}\n", `launch.startup_timeout: -2m is negative; valid: a duration >= 0`},
		{"metric hint", base + "score: {metric: tok_s}\n", `score.metric: "tok_s" (did you mean output_tok_s?)`},
		{"when hint", base + "params:\n  - {name: ab, type: bool, values: {false: --disable-radix-cache}}\n  - {name: s, type: bool, values: {false: --disable-cuda-graph}, when: abc}\n",
			`params[s].when: unknown name abc in "abc" (did you mean ab?); valid: ab, gpus_per_trial (earlier params only)`},
		{"duration text", base + "launch: {startup_timeout: soon}\n", `launch.startup_timeout: "soon" is not a duration`},
		{"sampler", base + "budget: {sampler: cmaes}\n", `budget.sampler: "cmaes"; valid: bayes, grid, random, tpe`},
		{"grid continuous", base + "params:\n  - {name: m, type: float, low: 0.7, high: 0.9, flag: --mem-fraction-static}\n  - {name: t, type: float, low: 0.1, high: 0.5, log: true, flag: --schedule-conservativeness}\nbudget: {sampler: grid}\n",
			`t.yaml:9:19: budget.sampler: "grid" needs a finite space: give every float param a step, or use bayes (m and t have no step)`},
		// The grid's size is counted from the params before anything is
		// listed: check and run printed nothing while they built a
		// billion points and ran out of memory.
		{"grid huge", base + "params:\n  - {name: mf, type: float, low: 0.5, high: 0.95, step: 0.001, flag: --mem-fraction-static}\n" +
			"  - {name: sc, type: float, low: 0.1, high: 1.5, step: 0.001, flag: --schedule-conservativeness}\n" +
			"  - {name: cp, type: int, low: 512, high: 16384, step: 16, flag: --chunked-prefill-size}\nbudget: {sampler: grid}\n",
			`t.yaml:10:19: budget.sampler: "grid" lists every config before its first trial, and the space has more than 1000000 (up to 627428043); use coarser steps or fewer choices (sc has 1401 values, cp 993, mf 451), or sampler bayes or random`},
		// Where Bound is over only through when: params, the configs are
		// counted: 1 + 1000 × 1000 here (see TestOverCountsConditional for
		// one under the cap).
		{"grid conditional", base + "params:\n  - {name: a, type: int, low: 1, high: 1001, flag: --max-running-requests}\n" +
			"  - {name: b, type: int, low: 1, high: 1000, flag: --cuda-graph-max-bs, when: a > 1}\nbudget: {sampler: grid}\n",
			`t.yaml:9:19: budget.sampler: "grid" lists every config before its first trial, and the space has more than 1000000 (up to 1002001)`},
		// One float's 400 million values are counted, not listed (over 6 GB).
		{"grid fine step", base + "params:\n  - {name: mf, type: float, low: 0.1, high: 0.9, step: 0.000000002, flag: --mem-fraction-static}\nbudget: {sampler: grid}\n",
			`t.yaml:8:19: budget.sampler: "grid" lists every config before its first trial, and the space has more than 1000000 (up to 400000001); use coarser steps or fewer choices (mf has 400000001 values), or sampler bayes or random`},
		// The count of a range with high below low is 0, not a panic.
		{"float low > high with a step", base + "params:\n  - {name: mf, type: float, low: 0.9, high: 0.1, step: 0.1, flag: --mem-fraction-static}\n",
			"t.yaml:7:45: params[mf].high: 0.1 is below low 0.9; valid: high >= low"},
		{"trials", base + "budget: {trials: 0}\n", "budget.trials: 0; valid: an integer >= 1"},
		{"parallel", base + "budget: {parallel: 3}\n", "budget.parallel: 3; valid: 1..1"},
		{"limits", base + "on_limits_reduced: warn\n", `on_limits_reduced: "warn"; valid: reject (default) or accept`},
		{"memory ref", base + "memory: {kv_tokens_per_state_slot: 1}\n", "memory.reference: missing"},
		{"derived flag", base + "params:\n  - {name: s, type: int, low: 1, high: 2}\nderived:\n  - {flag: --speculative-num-draft, value: s + 1}\n",
			"derived[--speculative-num-draft].flag: unknown flag --speculative-num-draft (did you mean --speculative-num-draft-tokens?)"},
		{"derived value", base + "params:\n  - {name: s, type: int, low: 1, high: 2}\nderived:\n  - {flag: --speculative-num-draft-tokens, value: s +}\n",
			"derived[--speculative-num-draft-tokens].value: unexpected"},
		{"big int", base + "gpus: {per_trial: 99999999999}\n", "gpus.per_trial: 99999999999 is out of range"},
		{"tab before a key", base + "params:\n  - name: a\n\ttype: bool\n", "t.yaml:8:1: bad YAML: a tab at 8:1; YAML indents with spaces only; valid: indent with spaces"},
		{"tab after spaces", base + "params:\n  - name: a\n  \t type: bool\n", "t.yaml:8:3: bad YAML: a tab at 8:3"},
		{"tab after a dash", base + "params:\n  -\tname: a\n    type: bool\n", "t.yaml:7:4: bad YAML: a tab at 7:4"},
		{"tab on a blank line", base + "\t\nparams: []\n", "t.yaml:6:1: bad YAML: a tab at 6:1"},
		{"second document", base + "---\nname: second\n", "t.yaml:6:1: a second YAML document starts here; a study file holds one document; valid: one study per file"},
		{"second document after an empty one", base + "---\n# nothing\n---\nname: second\n", "t.yaml:8:1: a second YAML document starts here"},
		{"second document unparsable", base + "---\nname: [second\n", "t.yaml:"},
		// A comparison no value of its param passes is an error where the
		// constant is, not a space silently shrunk to the other branch.
		{"when choice typo", base + compareParams + "  - {name: steps, type: int, low: 1, high: 5, step: 2, flag: --speculative-num-steps, when: speculative == 'EAGEL'}\n",
			"t.yaml:13:108: params[steps].when: speculative never takes 'EAGEL' (did you mean 'EAGLE'?): speculative == 'EAGEL' is always false; valid: 'none', 'EAGLE'"},
		{"when bool with a string", base + compareParams + "  - {name: steps, type: int, low: 1, high: 5, flag: --speculative-num-steps, when: \"radix == 'true'\"}\n",
			"t.yaml:13:94: params[steps].when: radix is a bool param and 'true' is a string: radix == 'true' is always false; valid: true, false"},
		{"constraint choice typo", base + compareParams + "constraints:\n  - speculative == 'EAGEL' or ep == 4\n",
			"t.yaml:14:20: constraints[0]: speculative never takes 'EAGEL' (did you mean 'EAGLE'?): speculative == 'EAGEL' is always false; valid: 'none', 'EAGLE'"},
		{"constraint case typo", base + compareParams + "constraints: [\"speculative != 'eagle'\"]\n",
			"t.yaml:13:31: constraints[0]: speculative never takes 'eagle' (did you mean 'EAGLE'?): speculative != 'eagle' is always true; valid: 'none', 'EAGLE'"},
		{"number choice as a string", base + compareParams + "constraints: [\"ep == '4'\"]\n",
			"constraints[0]: the choices of ep are numbers and '4' is a string: ep == '4' is always false; valid: 1, 4"},
		{"number not a choice", base + compareParams + "constraints: ['ep == 2 or ep == gpus_per_trial']\n",
			"constraints[0]: ep never takes 2: ep == 2 is always false; valid: 1, 4"},
		{"float not a choice", base + compareParams + "constraints: ['mf == 0.8']\n",
			"constraints[0]: mf never takes 0.8: mf == 0.8 is always false; valid: 0.78, 0.85"},
		{"in list item", base + compareParams + "constraints: [\"speculative in ['none', 'EAGEL']\"]\n",
			"t.yaml:13:40: constraints[0]: speculative never takes 'EAGEL' (did you mean 'EAGLE'?): that item of speculative in [...] never matches"},
		{"string choices with a number", base + compareParams + "constraints: ['speculative == 3']\n",
			"constraints[0]: the choices of speculative are strings and 3 is a number: speculative == 3 is always false; valid: 'none', 'EAGLE'"},
		{"order string choices", base + compareParams + "constraints: ['speculative > 3']\n",
			"t.yaml:13:30: constraints[0]: the choices of speculative are strings and 3 is a number: speculative > 3 cannot be evaluated for any of them; valid: speculative == or != one of 'none', 'EAGLE'"},
		{"order string choices in when", base + compareParams + "  - {name: steps, type: int, low: 1, high: 5, flag: --speculative-num-steps, when: 3 <= speculative}\n",
			"params[steps].when: the choices of speculative are strings and 3 is a number: 3 <= speculative cannot be evaluated for any of them"},
		{"order a bool", base + compareParams + "constraints: ['radix > false']\n",
			"constraints[0]: radix is a bool param, which cannot be ordered: radix > false cannot be evaluated; valid: radix, not radix, or radix == true"},
		{"int param with a string", base + compareParams + "constraints: [\"mf2 < 'high'\"]\n",
			"constraints[0]: mf2 is a float param and 'high' is a string: mf2 < 'high' cannot be evaluated for any of them; valid: a number (mf2 is 0.7..0.9 step 0.05)"},
		// A derived value whose kind the flag cannot take is an error at
		// the entry, not a space whose every config fails to resolve.
		{"derived string for an int flag", base + compareParams + "derived:\n  - {flag: --speculative-num-draft-tokens, value: \"'abc'\"}\n",
			`t.yaml:14:51: derived[--speculative-num-draft-tokens].value: "'abc'" gives 'abc': --speculative-num-draft-tokens "abc" is not an integer; valid: an integer`},
		{"derived string param for an int flag", base + compareParams + "derived:\n  - {flag: --speculative-num-draft-tokens, value: speculative}\n",
			`t.yaml:14:51: derived[--speculative-num-draft-tokens].value: "speculative" gives a string, and --speculative-num-draft-tokens takes an integer; valid: an expression that gives an integer`},
		{"derived condition for an int flag", base + compareParams + "derived:\n  - {flag: --speculative-num-draft-tokens, value: ep > 1}\n",
			`derived[--speculative-num-draft-tokens].value: "ep > 1" gives a boolean, and --speculative-num-draft-tokens takes an integer`},
		{"derived number for a switch", base + compareParams + "derived:\n  - {flag: --enable-metrics, value: ep * 2}\n",
			`derived[--enable-metrics].value: "ep * 2" gives a number, and --enable-metrics takes no value (it is a switch); valid: an expression that gives true or false`},
		{"derived division by zero", base + "derived:\n  - {flag: --speculative-num-draft-tokens, value: gpus_per_trial // 0}\n",
			`t.yaml:7:51: derived[--speculative-num-draft-tokens].value: "gpus_per_trial // 0" cannot be evaluated: division by zero`},
		{"derived when typo", base + compareParams + "derived:\n  - {flag: --speculative-num-draft-tokens, value: 4, when: speculative == 'EAGEL'}\n",
			"derived[--speculative-num-draft-tokens].when: speculative never takes 'EAGEL'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("not ErrInvalid: %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n%v\nwant substring\n%s", err, tt.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "t.yaml:") {
					t.Errorf("line %q is not file:line:col: ...", line)
				}
			}
		})
	}
}

// Params that share a flag load when no config has both active with
// values that emit it: exclusive when: conditions, or values that write
// the flag only where the other param is off.
func TestLoadSharedFlagExclusive(t *testing.T) {
	for name, params := range map[string]string{
		"exclusive branches": "  - {name: s1, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: speculative == 'EAGLE'}\n" +
			"  - {name: s2, type: int, low: 2, high: 4, flag: --speculative-num-steps, when: speculative == 'none'}\n",
		"negated condition": "  - {name: s1, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: radix}\n" +
			"  - {name: s2, type: int, low: 2, high: 4, flag: --speculative-num-steps, when: not radix}\n",
		"the other's value": "  - {name: c, type: categorical, choices: [on, off], values: {on: --chunked-prefill-size 4096, off: ''}}\n" +
			"  - {name: s, type: int, low: 1024, high: 2048, step: 1024, flag: --chunked-prefill-size, when: c == 'off'}\n",
		"a constraint": "  - {name: c, type: categorical, choices: [x, y], values: {x: --chunked-prefill-size 4096, y: ''}}\n" +
			"  - {name: d, type: bool, values: {true: --chunked-prefill-size 8192, false: ''}}\n" +
			"constraints: [\"not (c == 'x' and d)\"]\n",
		// Not decided at load (a continuous param's ranges): the survey
		// rejects configs that emit it twice, if any.
		"continuous condition": "  - {name: mfc, type: float, low: 0.7, high: 0.9}\n" +
			"  - {name: s1, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: mfc < 0.8}\n" +
			"  - {name: s2, type: int, low: 2, high: 4, flag: --speculative-num-steps, when: mfc >= 0.8}\n",
		// A constraint on a continuous param keeps them apart: not
		// decided at load either (it was read as passing, and refused).
		"constraint on a continuous param": "  - {name: mfc, type: float, low: 0.7, high: 0.9}\n" +
			"  - {name: c, type: categorical, choices: [x, y], values: {x: --chunked-prefill-size 4096, y: ''}}\n" +
			"  - {name: d, type: bool, values: {true: --chunked-prefill-size 8192, false: ''}}\n" +
			"constraints: [\"mfc > 2 or not (c == 'x' and d)\"]\n",
		"nested conditions": "  - {name: s1, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: speculative == 'EAGLE'}\n" +
			"  - {name: t, type: bool, values: {false: --disable-cuda-graph}, when: speculative == 'none'}\n" +
			"  - {name: s2, type: int, low: 2, high: 4, flag: --speculative-num-steps, when: t}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse("t.yaml", []byte(base+compareParams+params)); err != nil {
				t.Error(err)
			}
		})
	}
}

// A derived entry and a param, or two derived entries, that write one
// flag load when no config has both writing it.
func TestLoadDerivedSharedFlagExclusive(t *testing.T) {
	for name, rest := range map[string]string{
		"exclusive branches": "  - {name: draft, type: int, low: 2, high: 4, flag: --speculative-num-draft-tokens, when: speculative == 'none'}\n" +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: ep + 1, when: speculative == 'EAGLE'}\n",
		// derive writes nothing where the value reads an inactive param.
		"value's param inactive": "  - {name: steps, type: int, low: 1, high: 3, when: speculative == 'EAGLE'}\n" +
			"  - {name: draft, type: int, low: 2, high: 4, flag: --speculative-num-draft-tokens, when: speculative == 'none'}\n" +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: steps + 1}\n",
		// A switch derived false writes nothing.
		"value false": "  - {name: m, type: bool, flag: --enable-metrics, when: radix}\n" +
			"derived:\n  - {flag: --enable-metrics, value: ep > 1 and not radix}\n",
		"a constraint": "  - {name: draft, type: int, low: 2, high: 4, flag: --speculative-num-draft-tokens}\n" +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: 4, when: radix}\n" +
			"constraints: [not radix]\n",
		"two derived entries": "derived:\n  - {flag: --speculative-num-draft-tokens, value: 4, when: speculative == 'EAGLE'}\n" +
			"  - {flag: --speculative-num-draft-tokens, value: ep + 1, when: speculative == 'none'}\n",
		// Not decided at load (a continuous param's ranges): left to the
		// survey.
		"continuous condition": "  - {name: mfc, type: float, low: 0.7, high: 0.9}\n" +
			"  - {name: draft, type: int, low: 2, high: 4, flag: --speculative-num-draft-tokens, when: mfc < 0.8}\n" +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: 4, when: mfc >= 0.8}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse("t.yaml", []byte(base+compareParams+rest)); err != nil {
				t.Error(err)
			}
		})
	}
}

// Document markers that leave one study in the file load.
func TestLoadOneDocument(t *testing.T) {
	for name, doc := range map[string]string{
		"leading ---":       "---\n" + base,
		"trailing ---":      base + "---\n",
		"trailing --- note": base + "---\n# end of study\n",
		"document end":      base + "...\n",
	} {
		t.Run(name, func(t *testing.T) {
			if st, err := Parse("t.yaml", []byte(doc)); err != nil || st.Name != "t" {
				t.Errorf("%v (study %+v)", err, st)
			}
		})
	}
}

func TestQualityMinPassValid(t *testing.T) {
	tests := []struct {
		name, quality string
		json, tool    int
		minPass       float64
	}{
		{"unset", "{}", 24, 8, 1},
		{"small fraction", "{min_pass: 0.01}", 24, 8, 0.01},
		{"one", "{min_pass: 1}", 24, 8, 1},
		{"tool gate only", "{json_requests: 0, tool_requests: 8, min_pass: 0.5}", 0, 8, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Parse("t.yaml", []byte(base+"workload: {quality: "+tt.quality+"}\n"))
			if err != nil {
				t.Fatal(err)
			}
			// WithDefaults must keep what Load produced (json_requests: 0 stays 0).
			q := st.Workload.WithDefaults().Quality
			if q.JSONRequests != tt.json || q.ToolRequests != tt.tool || q.MinPass != tt.minPass {
				t.Errorf("quality = %+v, want json %d tool %d min_pass %v", q, tt.json, tt.tool, tt.minPass)
			}
		})
	}
}

func TestLoadDefaults(t *testing.T) {
	st, err := Parse("dir/t.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	w := st.Workload
	if w.Kind != "chat" || !slices.Equal(w.Chat.Concurrency, []int{1, 16, 64, 128}) || !slices.Equal(w.Chat.Requests, []int{8, 32, 256, 512}) ||
		w.Chat.MaxTokens != 256 || w.Chat.Repeats != 3 || w.Chat.Warmup == nil || !*w.Chat.Warmup {
		t.Errorf("chat defaults: %+v", w.Chat)
	}
	if !w.Quality.Enabled || w.Quality.JSONRequests != 24 || w.Quality.ToolRequests != 8 || w.Quality.MinPass != 1 {
		t.Errorf("quality defaults: %+v", w.Quality)
	}
	if st.Score.Metric != "output_tok_s" || st.Score.Concurrency != 64 {
		t.Errorf("score defaults: %+v", st.Score)
	}
	if st.Budget.Trials != 20 || st.Budget.Sampler != "bayes" || st.Budget.Confirm != 0 || st.Budget.Parallel != 1 {
		t.Errorf("budget defaults: %+v", st.Budget)
	}
	if st.Launch.StartupTimeout != 20*time.Minute || st.Launch.OnStale != "retry" {
		t.Errorf("launch defaults: %+v", st.Launch)
	}
	if st.OnLimitsReduced != "reject" || st.GPUsPerTrial != 1 || len(st.GPUGroups) != 1 {
		t.Errorf("other defaults: %q %d %v", st.OnLimitsReduced, st.GPUsPerTrial, st.GPUGroups)
	}
	if got := st.Engine.Command; !slices.Equal(got, []string{"python3", "-m", "sglang.launch_server"}) {
		t.Errorf("command %q", got)
	}
}

func TestDemoStudy(t *testing.T) {
	st, err := Load("../testdata/studies/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sglang-sim", "--sim-profile", "glm-5.3-flash-h200x4", "--sim-speedup", "25"}; !slices.Equal(st.Engine.Command, want) {
		t.Errorf("command %q", st.Engine.Command)
	}
	c := st.Workload.Chat
	if !slices.Equal(c.Concurrency, []int{1, 16, 64}) || !slices.Equal(c.Requests, []int{4, 32, 128}) || c.MaxTokens != 64 || c.Repeats != 1 {
		t.Errorf("chat %+v", c)
	}
	q := st.Workload.Quality
	if !q.Enabled || q.JSONRequests != 8 || q.ToolRequests != 4 {
		t.Errorf("quality %+v", q)
	}
	if st.Score.Concurrency != 64 || len(st.Score.SLO) != 1 || st.Score.SLO[0].Max != 5 || st.Score.SLO[0].Percentile != "p99" {
		t.Errorf("score %+v", st.Score)
	}
	if st.Budget.Trials != 10 || st.Budget.Seed != 1 || st.Launch.StartupTimeout != 2*time.Minute {
		t.Errorf("budget %+v launch %+v", st.Budget, st.Launch)
	}
	for _, f := range []string{"--tp-size", "--max-running-requests", "--reasoning-parser", "--tool-call-parser", "--trust-remote-code"} {
		if _, ok := st.Fixed[f]; !ok {
			t.Errorf("fixed flag %s missing: %v", f, st.Fixed)
		}
	}
	sv := st.Survey(DefaultSurveyLimits)
	if !sv.Enumerated || sv.Feasible < 8 {
		t.Errorf("demo space: %d configs, %d feasible; the demo needs at least 8", sv.Size, sv.Feasible)
	}
}

func TestFixedForms(t *testing.T) {
	for _, fixed := range []string{
		"fixed: {--tp-size: 4, --trust-remote-code: true, --enable-metrics: false, --cuda-graph-bs: [1, 2]}\n",
		"fixed: '--tp-size 4 --trust-remote-code --cuda-graph-bs 1 2'\n",
		"fixed: ['--tp-size 4', --trust-remote-code, '--cuda-graph-bs 1 2']\n",
	} {
		st, err := Parse("t.yaml", []byte(base+fixed))
		if err != nil {
			t.Fatalf("%s: %v", fixed, err)
		}
		cfg, err := st.Resolve(Params{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"--model-path", "org/model", "--tp-size", "4", "--trust-remote-code", "--cuda-graph-bs", "1", "2"}
		if !slices.Equal(cfg.Flags, want) {
			t.Errorf("%s: flags %q, want %q", fixed, cfg.Flags, want)
		}
	}
}

// Silent tells the values that pass the engine no flag (its defaults) from
// those that set one, whatever form the param's flag text takes.
func TestParamSilent(t *testing.T) {
	st, err := Load("../testdata/studies/glm-5.3-flash-h200x4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]*Param{}
	for i := range st.Params {
		params[st.Params[i].Name] = &st.Params[i]
	}
	tests := []struct {
		param, value string
		silent       bool
	}{
		{"radix_cache", "true", true},   // values: {true: ""}
		{"radix_cache", "false", false}, // --disable-radix-cache
		{"cuda_graphs", "true", true},   // no entry, no flag
		{"cuda_graphs", "false", false},
		{"state_slots", "auto", true},
		{"state_slots", "128", false}, // --max-mamba-cache-size 128
		{"speculative", "none", true},
		{"speculative", "EAGLE", false},
		{"ep", "1", false}, // a flag with every value: no default known
		{"spec_steps", "3", false},
	}
	for _, tc := range tests {
		if got := params[tc.param].Silent(tc.value); got != tc.silent {
			t.Errorf("%s=%s: silent %v, want %v", tc.param, tc.value, got, tc.silent)
		}
	}
}

// Each problem is reported once, in the file's order, whatever order the
// loader checks the sections in.
func TestLoadErrorsOncePerProblemInFileOrder(t *testing.T) {
	doc := base + "score: {slo: [{metric: ttft, percentile: p99, max_s: fast}]}\n" +
		"params:\n  - {name: a, type: bool, values: {false: --disable-radix-cache}, when: foo}\n" +
		"launch: {startup_timeout: soon}\n"
	_, err := Parse("t.yaml", []byte(doc))
	if err == nil {
		t.Fatal("no error")
	}
	var got []string
	for _, l := range strings.Split(err.Error(), "\n") {
		f, _, _ := strings.Cut(l, ": ")
		field, _, _ := strings.Cut(strings.TrimPrefix(l, f+": "), ":")
		got = append(got, f+" "+field)
	}
	want := []string{"t.yaml:6:54 score.slo[0].max_s", "t.yaml:8:73 params[a].when", "t.yaml:9:27 launch.startup_timeout"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s\n(%v)", strings.Join(got, "\n"), strings.Join(want, "\n"), err)
	}
	// A level that is not a number is one error, not also a score level
	// missing from an empty list.
	_, err = Parse("t.yaml", []byte(base+"workload: {chat: {concurrency: [1, x, 64], requests: [1, 2, 3]}}\nscore: {concurrency: 64}\n"))
	if want := `t.yaml:6:36: workload.chat.concurrency[1]: got "x"; valid: an integer`; err == nil || err.Error() != want {
		t.Errorf("got %v, want only %s", err, want)
	}
}

// A study's fingerprint does not depend on the directory sgtune was started
// from (nor, for workers, on the host's checkout): its prompts file counts
// by what it holds.
func TestFingerprintIgnoresWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := []byte(base + "workload: {chat: {prompts_file: p.txt}}\n")
	fp := func(path string) map[string]string {
		t.Helper()
		st, err := Parse(path, doc)
		if err != nil {
			t.Fatal(err)
		}
		f, err := st.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	t.Chdir(filepath.Dir(dir))
	from := fp(filepath.Join(filepath.Base(dir), "t.yaml"))
	t.Chdir(dir)
	if here := fp("t.yaml"); !maps.Equal(from, here) {
		t.Errorf("fingerprint differs by working directory:\n%v\n%v", from, here)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.txt"), []byte("other prompts\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if edited := fp("t.yaml"); edited["workload"] == from["workload"] {
		t.Error("other prompts in the file, the same workload fingerprint")
	}
}

// TestParamErrorOnce: a param's flag is checked for each value it takes;
// a fault of the flag itself is one error, not one per value.
func TestParamErrorOnce(t *testing.T) {
	_, err := Parse("t.yaml", []byte(base+"params:\n  - {name: ep, type: categorical, choices: [1, 2, 4], flag: --ep-sizee}\n"))
	if err == nil {
		t.Fatal("an unknown flag passed")
	}
	if n := strings.Count(err.Error(), "unknown flag --ep-sizee"); n != 1 {
		t.Errorf("the unknown flag is reported %d times:\n%v", n, err)
	}
}

// workload.chat.source: a dataset is read at load, and a bad one is
// refused at the study's dataset line, naming the dataset's own line.
func TestLoadSource(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"prompt\": \"a\"}\n{\"text\": \"b\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(long, []byte("{\"prompt\": \"a b c\", \"output_tokens\": 8}\n{\"prompt\": \"a\", \"output_tokens\": 5000}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wl := func(src string) string {
		return base + "workload:\n  chat:\n    source: " + src + "\n"
	}
	tests := []struct{ name, doc, want string }{
		{"sharegpt", wl("{dataset: ../testdata/datasets/sharegpt-small.json, shared_prefix_tokens: 200}"), ""},
		{"distributions", wl("{input_tokens: {dist: lognormal, mean: 800, stddev: 300, max: 4000}, output_tokens: {dist: uniform, min: 16, max: 256}, turns: 3}"), ""},
		{"bad dataset", wl("{dataset: " + bad + "}"),
			"t.yaml:8:23: workload.chat.source.dataset: " + bad + `:2: no "prompt", "messages" or "input_tokens"; valid:`},
		{"missing dataset", wl("{dataset: nope.json}"), "workload.chat.source.dataset: nope.json: no such file or directory; valid: a readable file"},
		{"over the context", strings.Replace(wl("{dataset: "+long+"}"), "model: {path: org/model}\n", "model: {path: org/model}\nfixed: {--context-length: 4096}\n", 1),
			long + ":2: a request of about 5001 tokens (prompt and output) exceeds --context-length 4096"},
		{"bad dist", wl("{input_tokens: {dist: zipf, mean: 3}}"), `workload.chat.source.input_tokens.dist: dist "zipf"; valid: fixed, uniform, normal, lognormal`},
		{"dist params", wl("{output_tokens: {dist: uniform, min: 9, max: 3}}"), "uniform needs 1 <= min <= max"},
		{"dataset and input lengths", wl("{dataset: ../testdata/datasets/pairs-small.csv, input_tokens: {dist: fixed, mean: 5}}"), "input_tokens: set with dataset"},
		{"groups without prefix", wl("{prefix_groups: 2}"), "prefix_groups: set without shared_prefix_tokens"},
		{"turns", wl("{turns: 0}"), "workload.chat.source.turns: 0; valid: an integer >= 1"},
		{"unknown field", wl("{shared_prefix: 10}"), "workload.chat.source.shared_prefix: unknown field (did you mean shared_prefix_tokens?)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Parse("t.yaml", []byte(tt.doc))
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if st.Workload.Chat.Source == nil || st.Workload.Chat.Source.Seed != uint64(st.Budget.Seed) {
					t.Errorf("source %+v, seed not the budget's", st.Workload.Chat.Source)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error\n%v\nwant substring\n%s", err, tt.want)
			}
		})
	}
}

// workload.chat.rate_search with score.metric max_rate: the probes take
// the score's SLO; the concurrency levels may be left out.
func TestLoadRateSearch(t *testing.T) {
	doc := func(chat, score string) string {
		return base + "workload:\n  chat:\n" + chat + "score:\n" + score
	}
	slo := "  slo: [{metric: ttft, percentile: p99, max_s: 1}]\n"
	st, err := Parse("t.yaml", []byte(doc("    rate_search: {start: 2, requests: 32}\n", "  metric: max_rate\n"+slo)))
	if err != nil {
		t.Fatal(err)
	}
	rs := st.Workload.Chat.RateSearch
	if rs == nil || rs.Start != 2 || len(rs.SLO) != 1 || len(st.Workload.Chat.Concurrency) != 0 {
		t.Fatalf("rate search %+v, levels %v", rs, st.Workload.Chat.Concurrency)
	}
	tests := []struct{ name, doc, want string }{
		{"max_rate without rate_search", doc("    concurrency: [1]\n    requests: [8]\n", "  metric: max_rate\n"+slo), "score.metric: max_rate without workload.chat.rate_search"},
		{"max_rate without slo", doc("    rate_search: {}\n", "  metric: max_rate\n"), "max_rate without score.slo"},
		{"concurrency with max_rate", doc("    rate_search: {}\n", "  metric: max_rate\n  concurrency: 8\n"+slo), "score.concurrency: set with metric max_rate"},
		{"bad arrival", doc("    rate_search: {arrival: uniform}\n", "  metric: max_rate\n"+slo), `workload.chat.rate_search.arrival: "uniform"; valid: poisson (default), gamma (with burstiness) or trace`},
		{"burstiness without gamma", doc("    rate_search: {burstiness: 0.5}\n", "  metric: max_rate\n"+slo), "burstiness: set with arrival \"poisson\""},
		{"start above max", doc("    rate_search: {start: 8, max: 4}\n", "  metric: max_rate\n"+slo), "max 4 below start 8"},
		{"too few requests", doc("    rate_search: {requests: 4}\n", "  metric: max_rate\n"+slo), "requests 4; valid: at least 8 per probe"},
		{"tok/s without levels", doc("    rate_search: {}\n", "  metric: output_tok_s\n"), "score.metric: output_tok_s with only rate_search probes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error\n%v\nwant substring\n%s", err, tt.want)
			}
		})
	}
}

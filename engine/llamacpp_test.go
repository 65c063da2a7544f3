package engine

import (
	"slices"
	"strings"
	"testing"
)

// llamaStartLog is a real startup log of `make llama-server`'s binary and
// model (-c 2048 -np 4 -t 1 -lv 4), cut to the lines with facts and a few
// around them (docs/engines/llamacpp.md §3, §4).
const llamaStartLog = `0.00.002.848 I cmn  common_param: common_params_print_info: verbosity = 4 (adjust with the ` + "`-lv N`" + ` CLI arg)
0.00.002.898 I cmn  common_param: system_info: n_threads = 1 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX512 = 1 | OPENMP = 1 | REPACK = 1 | 
0.00.002.982 I srv          init: using 8 threads for HTTP server
0.00.003.956 I srv    load_model: loading model '/root/.cache/sgtune/llama-3.21.1/tiny-llama-E256-L8-H8-F1024.gguf'
0.00.143.305 I print_info: model params          = 24.78 M
0.00.173.977 I llama_context: n_seq_max             = 4
0.00.173.978 I llama_context: n_ctx                 = 2048
0.00.173.979 I llama_context: n_ctx_seq             = 512
0.00.173.979 I llama_context: n_batch               = 2048
0.00.173.980 I llama_context: n_ubatch              = 512
0.00.173.981 I llama_context: flash_attn            = auto
0.00.173.982 I llama_context: kv_unified            = false
0.00.185.982 I resolve_fused_ops: Flash Attention enabled
0.00.187.227 I cmn          init: llama threadpool init, n_threads = 1
0.00.208.816 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 512, kv_unified = 'false'
0.00.217.395 I srv  llama_server: model loaded
`

func TestLlamaLogFacts(t *testing.T) {
	tests := []struct {
		name  string
		log   string
		want  Facts
		ready bool
	}{
		{"verbosity 4 startup", llamaStartLog,
			Facts{MaxRunningRequests: 4, ContextLen: 512, MaxTotalNumTokens: 2048, BatchSize: 2048, UBatchSize: 512,
				Threads: 1, ThreadsBatch: 2, FlashAttention: "enabled"}, false},
		{"ready line", llamaStartLog + "0.00.217.413 I srv  llama_server: listening on http://127.0.0.1:18555\n",
			Facts{MaxRunningRequests: 4, ContextLen: 512, MaxTotalNumTokens: 2048, BatchSize: 2048, UBatchSize: 512,
				Threads: 1, ThreadsBatch: 2, FlashAttention: "enabled"}, true},
		{"default verbosity: slots, per-slot context, unified cache, threads", "0.00.187.227 I cmn          init: llama threadpool init, n_threads = 2\n" +
			"0.00.208.155 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 2048, kv_unified = 'true'\n" +
			"0.00.210.713 I srv  llama_server: listening on http://127.0.0.1:18431",
			Facts{MaxRunningRequests: 4, ContextLen: 2048, KVUnified: true, Threads: 2}, true},
		{"a draft model's context does not replace the served model's", "I llama_context: n_ctx                 = 3072\nI llama_context: n_ctx                 = 512\n",
			Facts{MaxTotalNumTokens: 3072}, false},
		{"runtime lines are not facts", "0.01.000.000 I slot launch_slot_: id  0 | task 3 | processing task, n_ctx_slot = 512\n" +
			"0.01.000.100 W srv  llama_server: listening is not what this says\n", Facts{}, false},
		// Later tools/server/server.cpp: SRV_INF("server is listening on %s\n").
		{"ready line, later builds", "0.00.210.713 I srv  llama_server: server is listening on http://127.0.0.1:18431\n", Facts{}, true},
		// examples/server/server.cpp builds: LOG_INF("%s: server is listening
		// on http://%s:%d - starting the main loop\n", __func__, ...) in main.
		{"ready line, examples/server builds", "main: server is listening on http://127.0.0.1:8080 - starting the main loop\n", Facts{}, true},
		// The same builds log this before the model loads: not ready.
		{"examples/server builds before the load", "main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 3\n" +
			"main: loading model\n", Facts{}, false},
		// Router mode (no -m) serves no model: not ready.
		{"router mode", "0.00.010.000 I srv  llama_server: router server is listening on http://127.0.0.1:8080\n", Facts{}, false},
		{"huge values do not wrap", "load_model: initializing, n_slots = 99999999999999999999999, n_ctx_slot = 256\n",
			Facts{ContextLen: 256}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := LlamaCpp.ParseLog(strings.NewReader(tc.log)); got != tc.want {
				t.Errorf("facts\n got %+v\nwant %+v", got, tc.want)
			}
			p := LlamaCpp.NewLogParser()
			for l := range strings.SplitSeq(tc.log, "\n") {
				p.Line(l)
			}
			if p.Ready() != tc.ready {
				t.Errorf("Ready = %v", p.Ready())
			}
		})
	}
}

// TestLlamaSignatures classifies the lines llama-server printed for each
// failure of docs/engines/llamacpp.md §6 (captured from the built binary).
func TestLlamaSignatures(t *testing.T) {
	tests := []struct {
		line  string
		class string
		port  bool
		exits []int
	}{
		{"error: invalid argument: --no-such-flag", ClassBadCommand, false, []int{1}},
		{"error: invalid argument: --port=18440", ClassBadCommand, false, []int{1}},
		{`error while handling argument "-t": stoi`, ClassBadCommand, false, []int{1}},
		{`error while handling argument "-np": error: invalid value for n_parallel`, ClassBadCommand, false, []int{1}},
		{`error while handling argument "-fa": error: unknown value for --flash-attn: 'maybe'`, ClassBadCommand, false, []int{1}},
		{`error while handling argument "--port": expected value for argument`, ClassBadCommand, false, []int{1}},
		{"error: invalid argument: true", ClassBadCommand, false, []int{1}},
		{"0.00.004.531 E llama_model_load_from_file_impl: failed to load model", ClassModelLoad, false, nil},
		{"0.00.004.566 E srv    load_model: failed to load model, '/nonexistent/model.gguf'", ClassModelLoad, false, nil},
		{"0.00.005.117 E srv  llama_server: exiting due to model loading error", ClassModelLoad, false, nil},
		{"0.00.139.223 E llama_init_from_model: quantized V cache requires flash_attn to be enabled", ClassModelLoad, false, nil},
		{"0.00.139.235 E cmn  common_init_: failed to create context with model '/m.gguf'", ClassModelLoad, false, nil},
		{"E srv    load_model: failed to create_context with model '/m.gguf'", ClassModelLoad, false, nil},
		{"0.00.004.551 E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 18997", "", true, nil},
		{"0.00.217.413 I srv  llama_server: listening on http://127.0.0.1:18555", "", false, nil},
		{"0.00.003.042 W srv  llama_server: CORS is set to allow all origins ('*') and no API key is set", "", false, nil},
	}
	for _, tc := range tests {
		sig, port := LlamaCpp.Classify(tc.line)
		class := ""
		var exits []int
		if sig != nil {
			class, exits = sig.Class, sig.ExitCodes
		}
		if class != tc.class || port != tc.port || !slices.Equal(exits, tc.exits) {
			t.Errorf("%q: class %q port %v exits %v; want %q %v %v", tc.line, class, port, exits, tc.class, tc.port, tc.exits)
		}
	}
}

// learned is a fixed engine.Learned for the rules tables.
type learned struct {
	obs    map[string]Observation
	prompt int
}

func (l learned) Exact(k string) (Observation, bool) { o, ok := l.obs[k]; return o, ok }
func (l learned) KV([]float64, float64) (float64, float64, bool) {
	return 0, 0, false
}
func (l learned) Ratio(string) (int, bool) { return 0, false }
func (l learned) PromptTokens() int        { return l.prompt }

func llamaView(t *testing.T, flags ...string) View {
	t.Helper()
	s, _, err := LlamaCpp.Schema("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ParseArgv(flags); err != nil {
		t.Fatalf("%v: %v", flags, err)
	}
	return NewView(s, flags)
}

func TestLlamaRules(t *testing.T) {
	chat := func(conc, prompt, maxTokens int) Setup {
		return Setup{GPUsPerTrial: 1, Demand: Demand{Concurrency: conc, PromptTokens: prompt, MaxTokens: maxTokens}}
	}
	tests := []struct {
		name      string
		flags     []string
		setup     Setup
		l         Learned
		running   int // predicted MaxRunningRequests
		slot      int // predicted SlotContext
		kv        int // predicted KVTokens
		rules     []string
		wantInMsg string
	}{
		{"auto slots share the context", []string{"-c", "2048"}, chat(8, 64, 32), nil, 4, 2048, 2048, nil, ""},
		{"per-slot context: -c 3000 -np 3 -> 1024 per slot", []string{"-c", "3000", "-np", "3"}, chat(4, 64, 32), nil, 3, 1024, 3072, nil, ""},
		{"8 slots of 256 hold 99 + 32", []string{"-c", "2048", "-np", "8"}, chat(8, 64, 32), nil, 8, 256, 2048, nil, ""},
		{"prompt + max_tokens overflow the slot", []string{"-c", "2048", "-np", "8"}, chat(8, 256, 128), nil, 8, 256, 2048,
			[]string{"slot_context"}, "ceil256(ceil256(-c 2048) / -np 8) = 256 tokens per request <= 291 prompt tokens (estimated: 256 + 35"},
		{"prompt alone fills the slot: refused", []string{"-c", "512", "-np", "2"}, chat(2, 300, 16), nil, 2, 256, 512,
			[]string{"slot_context"}, "every request is refused"},
		{"the counted prompt replaces the estimate", []string{"-c", "1024", "-np", "4"}, chat(4, 64, 128), learned{prompt: 140}, 4, 256, 1024,
			[]string{"slot_context"}, "140 prompt tokens (as the server counted) + 128 max_tokens = 268"},
		{"observed sizing wins", []string{"-c", "2048", "-np", "8"}, chat(8, 64, 200),
			learned{obs: map[string]Observation{"--ctx-size=2048 --parallel=8": {KVTokens: 2048, MaxRunning: 8, ContextLen: 512}}}, 8, 512, 2048, nil, ""},
		{"no -c: unknown context, nothing checked", []string{"-np", "8"}, chat(8, 4000, 4000), nil, 8, 0, 0, nil, ""},
		{"-np 0", []string{"-np", "0"}, chat(1, 64, 16), nil, 0, 0, 0, []string{"parallel"}, "invalid value for n_parallel"},
		{"-np 300", []string{"-np", "300"}, chat(1, 64, 16), nil, 300, 0, 0, []string{"parallel"}, "LLAMA_MAX_SEQ"},
		{"-ub above -b", []string{"-b", "64", "-ub", "128"}, chat(1, 64, 16), nil, 4, 0, 0, []string{"ubatch_size"}, "-ub 128 > the batch 64"},
		{"-ub above the default -b is fine below 2048", []string{"-ub", "1024"}, chat(1, 64, 16), nil, 4, 0, 0, nil, ""},
		{"-b above the context", []string{"-c", "512", "-b", "1024"}, chat(1, 64, 16), nil, 4, 512, 512, []string{"batch_size"}, "caps the batch to 512"},
		{"-ub above a context-capped batch", []string{"-c", "256", "-ub", "512"}, chat(1, 16, 16), nil, 4, 256, 256, []string{"ubatch_size"}, "-ub 512 > the batch 256"},
		{"quantized V needs flash attention", []string{"-ctv", "q8_0", "-fa", "off"}, chat(1, 64, 16), nil, 4, 0, 0, []string{"flash_attn"}, "quantized V cache"},
		{"quantized V with -fa auto", []string{"-ctv", "q4_0", "-fa", "auto"}, chat(1, 64, 16), nil, 4, 0, 0, nil, ""},
		{"threads above the trial's CPUs", []string{"-t", "4", "-tb", "3"},
			Setup{CPUsPerTrial: 2, Demand: Demand{Concurrency: 1, PromptTokens: 64, MaxTokens: 16}}, nil, 4, 0, 0, []string{"threads", "threads"}, "-t 4 > cpus.per_trial 2"},
		{"threads unchecked without cpus.per_trial", []string{"-t", "64"}, chat(1, 64, 16), nil, 4, 0, 0, nil, ""},
		{"unified cache off by its negation", []string{"-c", "2048", "--no-kv-unified"}, chat(4, 64, 32), nil, 4, 512, 2048, nil, ""},
		{"matrix cell beyond the slot", []string{"-c", "4096", "-np", "4"},
			Setup{Demand: Demand{Matrix: true, Concurrency: 4, MinContext: 1000, MaxOutput: 100}}, nil, 4, 1024, 4096, []string{"slot_context"}, "smallest matrix cell"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := llamaView(t, tc.flags...)
			p := LlamaCpp.Rules.Predict(v, tc.setup, tc.l)
			if p.MaxRunningRequests != tc.running || p.SlotContext != tc.slot || p.KVTokens != tc.kv {
				t.Errorf("predicted running %d slot %d kv %d; want %d %d %d", p.MaxRunningRequests, p.SlotContext, p.KVTokens, tc.running, tc.slot, tc.kv)
			}
			rej := LlamaCpp.Rules.Check(v, tc.setup, p)
			var rules, msgs []string
			for _, r := range rej {
				rules, msgs = append(rules, r.Rule), append(msgs, r.Message)
			}
			if !slices.Equal(rules, tc.rules) {
				t.Errorf("rules %v, want %v: %v", rules, tc.rules, msgs)
			}
			if tc.wantInMsg != "" && !strings.Contains(strings.Join(msgs, "\n"), tc.wantInMsg) {
				t.Errorf("messages %q lack %q", msgs, tc.wantInMsg)
			}
		})
	}
}

func TestLlamaPredictNotesAndObserve(t *testing.T) {
	v := llamaView(t, "-c", "2048", "-np", "2")
	s := Setup{Demand: Demand{Concurrency: 8, PromptTokens: 64, MaxTokens: 32}}
	p := LlamaCpp.Rules.Predict(v, s, nil)
	if !slices.Contains(p.Notes, "2 slots < concurrency 8: 6 requests wait for a slot") {
		t.Errorf("notes %q", p.Notes)
	}
	if p.PromptTokens != 64+LlamaPromptOverhead || p.KVTokensNeeded != 2*(99+32) {
		t.Errorf("prompt %d need %d", p.PromptTokens, p.KVTokensNeeded)
	}
	if _, ok := LlamaCpp.Rules.Observe(v, s, p, Facts{}); ok {
		t.Error("empty facts taught something")
	}
	o, ok := LlamaCpp.Rules.Observe(v, s, p, Facts{MaxRunningRequests: 2, ContextLen: 1024, MaxTotalNumTokens: 2048})
	if !ok || o.MaxRunning != 2 || o.ContextLen != 1024 || o.KVTokens != 2048 {
		t.Fatalf("observation %+v", o)
	}
	// Flags that do not size the cache share the observation.
	other := llamaView(t, "-np", "2", "-t", "2", "-c", "2048", "-fa", "on")
	if got := llamaMemKey(other); got != o.MemKey {
		t.Errorf("mem key %q != %q", got, o.MemKey)
	}
}

// TestLlamaSchema: the bundled schema's llama.cpp forms: short spellings,
// negations, defaults and no --flag=value.
func TestLlamaSchema(t *testing.T) {
	s, ok, err := LlamaCpp.Schema("v0.4.0")
	if err != nil || !ok || s.Inline() {
		t.Fatalf("schema: ok %v err %v inline %v", ok, err, s != nil && s.Inline())
	}
	args, err := s.ParseArgv([]string{"-m", "/m.gguf", "-np", "4", "--no-cont-batching", "-nocb", "-cb", "-n", "-1", "-fa", "on"})
	if err != nil {
		t.Fatal(err)
	}
	if !args[2].Negated || !args[3].Negated || args[4].Negated || args[2].Spec.Name != "--cont-batching" || args[5].Values[0] != "-1" {
		t.Errorf("parsed %+v", args)
	}
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"--port=1"}, "--port=1: llamacpp takes no --flag=value form (it reads the whole word as an unknown argument); valid: --port 1"},
		{[]string{"-np=4"}, "valid: -np 4"},
		{[]string{"--metrics=true"}, "is a switch; valid: --metrics alone"},
		{[]string{"--cont-batching", "true"}, `"true" is not a flag: --cont-batching is a switch and takes no value; valid: --cont-batching alone to turn it on, --no-cont-batching to turn it off`},
		{[]string{"--no-such-flag"}, "unknown flag --no-such-flag"},
		{[]string{"-c", "8k"}, `"8k" is not an integer`},
		{[]string{"-fa", "maybe"}, `--flash-attn "maybe" is not a valid choice`},
		{[]string{"-np", "-2"}, "--parallel -2 is below -1"},
	} {
		if _, err := s.ParseArgv(tc.argv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.argv, err, tc.want)
		}
	}
	if got := s.Closest("--no-cont-batch"); got != "--no-cont-batching" {
		t.Errorf("closest --no-cont-batch = %s", got)
	}
	cb, _ := s.Lookup("-nocb")
	if !cb.DefaultOn() || cb.Negation() != "--no-cont-batching" {
		t.Errorf("--cont-batching: default on %v, negation %q", cb.DefaultOn(), cb.Negation())
	}
	for on, want := range map[bool][]string{true: nil, false: {"--no-cont-batching"}} {
		if got := cb.SwitchWords(on); !slices.Equal(got, want) {
			t.Errorf("--cont-batching %v: %v, want %v", on, got, want)
		}
	}
	shift, _ := s.Lookup("--context-shift")
	for on, want := range map[bool][]string{true: {"--context-shift"}, false: nil} {
		if got := shift.SwitchWords(on); !slices.Equal(got, want) {
			t.Errorf("--context-shift %v: %v, want %v", on, got, want)
		}
	}
	kvu, _ := s.Lookup("--kv-unified")
	if kvu.DefaultOn() {
		t.Error(`"off (on when --parallel is auto)" read as on`)
	}
	v := NewView(s, []string{"-cb", "--no-cont-batching", "-kvu"})
	if v.On("--cont-batching") || v.Switch("--cont-batching", true) || !v.Switch("--kv-unified", false) || !v.Switch("--warmup", true) {
		t.Errorf("view %v", v)
	}
	// Every spelling of an option is known, negations included, once.
	if _, err := ParseFlagSchema([]byte("engine: x\nversion: v1\nflags:\n  - {name: --a, type: int, negations: [--no-a]}\n"), "bad"); err == nil {
		t.Error("negations on an int flag accepted")
	}
}

func TestLlamaEngineFields(t *testing.T) {
	e, err := Lookup("llamacpp")
	if err != nil || e != LlamaCpp {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"LLAMA_ARG_THREADS", true}, {"LLAMA_ARG_N_PARALLEL", true}, {"LLAMA_API_KEY", true},
		// The log options' variables: LLAMA_ARG_LOG_* in the v0.4.0 tree,
		// LLAMA_LOG_* in builds before it (common/arg.cpp set_env).
		{"LLAMA_ARG_LOG_VERBOSITY", true}, {"LLAMA_ARG_LOG_FILE", true},
		{"LLAMA_LOG_VERBOSITY", true}, {"LLAMA_LOG_COLORS", true}, {"LLAMA_LOG_PREFIX", true},
		{"LLAMA_LOG_TIMESTAMPS", true}, {"LLAMA_LOG_FILE", true},
		{"LLAMA_API_KEYS", false}, {"LLAMA_MODEL", false}, {"LLAMA_LOGGER", false}, {"LLAMA_CACHE", false}, {"PATH", false},
	} {
		if got := e.Cleared(tc.name); got != tc.want {
			t.Errorf("Cleared(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
	s, _, _ := e.Schema("")
	// The launch flags are the launcher's (TestNamedFlagsAreInTheSchema
	// checks the flags sgtune names).
	args, err := s.ParseArgv(e.LaunchFlags)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range args {
		if a.Spec.Owner != "launcher" {
			t.Errorf("launch flag %s is not owned by the launcher", a.Name)
		}
	}
	if SGLang.Cleared("LLAMA_ARG_THREADS") || SGLang.Cleared("LLAMA_LOG_VERBOSITY") {
		t.Error("SGLang clears llama.cpp's variables")
	}
}

// FuzzLlamaLog: any log text parses without a panic, and the ready line is
// seen only when it is there.
func FuzzLlamaLog(f *testing.F) {
	for _, l := range strings.Split(llamaStartLog, "\n") {
		f.Add(l)
	}
	f.Add("load_model: initializing, n_slots = , n_ctx_slot = 1")
	f.Add("llama_context: n_ctx = 99999999999999999999")
	f.Add("0.00.210.713 I srv  llama_server: server is listening on http://127.0.0.1:18431")
	f.Add("main: server is listening on http://127.0.0.1:8080 - starting the main loop")
	f.Add("0.00.010.000 I srv  llama_server: router server is listening on http://127.0.0.1:8080")
	f.Fuzz(func(t *testing.T, line string) {
		p := LlamaCpp.NewLogParser()
		p.Line(line)
		_ = p.Facts()
		if p.Ready() && !strings.Contains(line, LlamaCpp.ReadyLine) {
			t.Errorf("ready without the ready line: %q", line)
		}
	})
}

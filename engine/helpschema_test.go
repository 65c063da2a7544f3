package engine

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const argparseSample = `usage: python3 -m sglang.launch_server [-h] --model-path MODEL_PATH
                                       [--tp-size TP_SIZE]
                                       [--kv-cache-dtype {auto,fp8_e5m2}]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        The path of the model weights.
  --tensor-parallel-size TP, --tp-size TP
                        The tensor parallelism size.
  --kv-cache-dtype {auto,fp8_e5m2}
                        Data type for kv cache storage. (default: auto)
  --cuda-graph-bs CUDA_GRAPH_BS [CUDA_GRAPH_BS ...]
                        Batch sizes.
  --numa-node [NUMA_NODE ...]
                        Nodes.
  --ratio [RATIO]       Optional value.
  --enable-metrics      Enable log prometheus metrics.
  --gpu-memory-utilization GPU_MEMORY_UTILIZATION
                        Fraction (default: 0.9)
  --max-num-seqs MAX_NUM_SEQS
                        Seqs (default: None)
  --seed SEED           Seed (default: 0)

ModelConfig:
  Configuration for the model.

  --enable-prefix-caching, --no-enable-prefix-caching
                        Prefix caching. (default: None)
  --trust-remote-code, --no-trust-remote-code
                        Trust. (default: False)
`

func TestParseArgparseHelp(t *testing.T) {
	rows, err := ParseArgparseHelp([]byte(argparseSample))
	if err != nil {
		t.Fatal(err)
	}
	want := []HelpFlag{
		{Spellings: []string{"--model-path", "--model"}, Metavar: "MODEL_PATH", Line: 7},
		{Spellings: []string{"--tensor-parallel-size", "--tp-size"}, Metavar: "TP", Line: 9},
		{Spellings: []string{"--kv-cache-dtype"}, Metavar: "{auto,fp8_e5m2}", Choices: []string{"auto", "fp8_e5m2"}, Default: "auto", Line: 11},
		{Spellings: []string{"--cuda-graph-bs"}, Metavar: "CUDA_GRAPH_BS", Nargs: "+", Line: 13},
		{Spellings: []string{"--numa-node"}, Metavar: "NUMA_NODE", Nargs: "+", Line: 15},
		{Spellings: []string{"--ratio"}, Metavar: "RATIO", Line: 17},
		{Spellings: []string{"--enable-metrics"}, Line: 18},
		{Spellings: []string{"--gpu-memory-utilization"}, Metavar: "GPU_MEMORY_UTILIZATION", Default: "0.9", Line: 19},
		{Spellings: []string{"--max-num-seqs"}, Metavar: "MAX_NUM_SEQS", Default: "None", Line: 21},
		{Spellings: []string{"--seed"}, Metavar: "SEED", Default: "0", Line: 23},
		{Spellings: []string{"--enable-prefix-caching", "--no-enable-prefix-caching"}, Default: "None", Line: 28},
		{Spellings: []string{"--trust-remote-code", "--no-trust-remote-code"}, Default: "False", Line: 30},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows:\n got %+v\nwant %+v", rows, want)
	}
}

// TestParseArgparsePyListMetavar: vLLM (v0.11.1) prints a Literal field
// that also takes any string with the Python list of its values as the
// placeholder; its ", " are not spelling separators and the list is open.
func TestParseArgparsePyListMetavar(t *testing.T) {
	help := "options:\n" +
		"  --model-impl ['auto', 'terratorch', 'transformers', 'vllm']\n" +
		"                        Which implementation of the model to use. (default: auto)\n" +
		"  --backend, -b ['mp', 'ray']\n" +
		"                        Backend. (default: None)\n"
	rows, err := ParseArgparseHelp([]byte(help))
	if err != nil {
		t.Fatal(err)
	}
	want := []HelpFlag{
		{Spellings: []string{"--model-impl"}, Metavar: "['auto', 'terratorch', 'transformers', 'vllm']", Default: "auto", Line: 2},
		{Spellings: []string{"--backend", "-b"}, Metavar: "['mp', 'ray']", Default: "None", Line: 4},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows:\n got %+v\nwant %+v", rows, want)
	}
}

func TestSchemaFromArgparseHelp(t *testing.T) {
	rows, err := ParseArgparseHelp([]byte(argparseSample))
	if err != nil {
		t.Fatal(err)
	}
	base, _, err := SGLang.Schema("")
	if err != nil {
		t.Fatal(err)
	}
	s, err := SchemaFromHelp("sglang", "v9.9.9", rows, base)
	if err != nil {
		t.Fatal(err)
	}
	data := MarshalSchema(s, "test")
	got, err := ParseFlagSchema(data, "generated")
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	for _, c := range []struct {
		name, canonical, typ, owner, def, nargs string
		aliases                                 []string
	}{
		{"--model", "--model-path", "str", "study", "", "", []string{"--model"}},
		{"--tensor-parallel-size", "--tp-size", "int", "", "", "", []string{"--tensor-parallel-size"}},
		{"--kv-cache-dtype", "--kv-cache-dtype", "str", "", "auto", "", nil},
		{"--cuda-graph-bs", "--cuda-graph-bs", "int", "", "", "+", nil},
		{"--enable-metrics", "--enable-metrics", "bool", "", "", "", nil},
		{"--gpu-memory-utilization", "--gpu-memory-utilization", "float", "", "0.9", "", nil},
		{"--max-num-seqs", "--max-num-seqs", "str", "", "", "", nil},
		{"--seed", "--seed", "int", "", "0", "", nil},
		{"--enable-prefix-caching", "--enable-prefix-caching", "bool", "", "", "", nil},
		{"--no-enable-prefix-caching", "--no-enable-prefix-caching", "bool", "", "", "", nil},
		{"--trust-remote-code", "--trust-remote-code", "bool", "", "off", "", nil},
	} {
		f, ok := got.Lookup(c.name)
		if !ok {
			t.Errorf("%s missing:\n%s", c.name, data)
			continue
		}
		if f.Name != c.canonical || f.Type != c.typ || f.Owner != c.owner || f.Default != c.def || f.Nargs != c.nargs || !reflect.DeepEqual(f.Aliases, c.aliases) {
			t.Errorf("%s: got %+v", c.name, *f)
		}
	}
	f, _ := got.Lookup("--trust-remote-code")
	if f.Negation() != "--no-trust-remote-code" {
		t.Errorf("the --no- switch of a pair does not turn --trust-remote-code off: %q", f.Negation())
	}
	f, _ = got.Lookup("--kv-cache-dtype")
	if err := f.ValidateValue("fp9"); err == nil || !strings.Contains(err.Error(), "valid: auto, fp8_e5m2") {
		t.Errorf("fp9: %v", err)
	}
}

const llamaSample = `----- common params -----

-h,    --help, --usage                  print usage and exit
-t,    --threads N                      number of CPU threads to use during generation (default: -1)
                                        (env: LLAMA_ARG_THREADS)
-c,    --ctx-size N                     size of the prompt context (default: 4096, 0 = loaded from model)
                                        (env: LLAMA_ARG_CTX_SIZE)
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
                                        (env: LLAMA_ARG_FLASH_ATTN)
-kvo,  --kv-offload, -nkvo, --no-kv-offload
                                        whether to enable KV cache offloading (default: enabled)
                                        (env: LLAMA_ARG_KV_OFFLOAD)
--no-mmap                               do not memory-map model
--temp N                                temperature (default: 0.8)
-m,    --model FNAME                    model path to load
                                        (env: LLAMA_ARG_MODEL)

----- example-specific params -----

--port PORT                             port to listen (default: 8080)
`

func TestParseLlamaHelp(t *testing.T) {
	rows, err := ParseLlamaHelp([]byte(llamaSample))
	if err != nil {
		t.Fatal(err)
	}
	want := []HelpFlag{
		{Spellings: []string{"-t", "--threads"}, Metavar: "N", Default: "-1", Line: 4},
		{Spellings: []string{"-c", "--ctx-size"}, Metavar: "N", Default: "4096, 0 = loaded from model", Line: 6},
		{Spellings: []string{"-fa", "--flash-attn"}, Metavar: "[on|off|auto]", Choices: []string{"on", "off", "auto"}, Line: 8},
		{Spellings: []string{"-kvo", "--kv-offload"}, Negations: []string{"-nkvo", "--no-kv-offload"}, Default: "enabled", Line: 10},
		{Spellings: []string{"--no-mmap"}, Line: 13},
		{Spellings: []string{"--temp"}, Metavar: "N", Default: "0.8", Line: 14},
		{Spellings: []string{"-m", "--model"}, Metavar: "FNAME", Line: 15},
		{Spellings: []string{"--port"}, Metavar: "PORT", Default: "8080", Line: 20},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows:\n got %+v\nwant %+v", rows, want)
	}
	base, _, err := LlamaCpp.Schema("")
	if err != nil {
		t.Fatal(err)
	}
	s, err := SchemaFromHelp("llamacpp", "b1", rows, base)
	if err != nil {
		t.Fatal(err)
	}
	data := MarshalSchema(s, "")
	got, err := ParseFlagSchema(data, "generated")
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if got.Inline() {
		t.Error("a llama.cpp schema takes inline_values from the bundled one (false)")
	}
	for name, want := range map[string]string{
		"-t": "--threads int  -1", "-c": "--ctx-size int  4096, 0 = loaded from model", "-nkvo": "--kv-offload bool  on",
		"--temp": "--temp float  0.8", "-m": "--model str study ", "--port": "--port int launcher 8080", "-fa": "--flash-attn str  ",
	} {
		f, ok := got.Lookup(name)
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if g := strings.Join([]string{f.Name, f.Type, f.Owner, f.Default}, " "); g != want {
			t.Errorf("%s: got %q, want %q", name, g, want)
		}
	}
	if !got.IsNegation("--no-kv-offload") || got.IsNegation("--no-mmap") {
		t.Error("negations: --no-kv-offload is one, --no-mmap (no --mmap in its row) is a switch of its own")
	}
}

func TestParseHelpErrors(t *testing.T) {
	for _, c := range []struct {
		engine, help string
		line         int
		msg          string
	}{
		{"sglang", "", 1, "no option rows"},
		{"sglang", "usage: x [--a A]\n\nsome prose\n", 1, "no option rows"},
		{"sglang", "options:\n  --ok X   fine\n  --bad{ X  broken\n", 3, `"--bad{" is not an option spelling`},
		{"vllm", "options:\n  --a {x,y  broken\n", 2, "not closed by }"},
		{"llamacpp", "-a N   x\n--b, c   y\n", 2, `cannot read option row`},
		{"llamacpp", "-a, --b, -c, --no-b N   y\n", 1, `--b has negations (-c, --no-b) but takes a value (N)`},
		{"llamacpp", "nothing here\n", 1, "no option rows"},
		{"llamacpp", "-a [x|y z]   bad\n", 1, "cannot read the values"},
	} {
		_, err := ParseHelp(c.engine, []byte(c.help))
		var he *HelpError
		if !errors.As(err, &he) || he.Line != c.line || !strings.Contains(he.Msg, c.msg) {
			t.Errorf("%s %q: got %v, want line %d: ...%s...", c.engine, c.help, err, c.line, c.msg)
		}
	}
	// One spelling on two rows: the second row's line.
	rows, err := ParseArgparseHelp([]byte("options:\n  --a A  x\n  --b, --a  y\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = SchemaFromHelp("sglang", "", rows, nil)
	var he *HelpError
	if !errors.As(err, &he) || he.Line != 3 || !strings.Contains(he.Msg, "--a is listed twice (first on line 2)") {
		t.Errorf("duplicate: %v", err)
	}
}

func TestYAMLScalarRoundTrip(t *testing.T) {
	for _, v := range []string{"on", "off", "8080", "-1", "0.9", "auto", "--model", "a: b", "x #y", `q"uote`, "tab\there", "", "null", "-.inf", "{a}", "0, 0 = loaded from model"} {
		s := &FlagSchema{Engine: "sglang", Version: v, Flags: []FlagSpec{{Name: "--x", Type: "str", Default: v, Choices: []string{v}}}}
		got, err := ParseFlagSchema(MarshalSchema(s, "h"), "rt")
		if err != nil {
			t.Errorf("%q: %v", v, err)
			continue
		}
		if got.Version != v || got.Flags[0].Default != v || got.Flags[0].Choices[0] != v {
			t.Errorf("%q came back as %q %q %q", v, got.Version, got.Flags[0].Default, got.Flags[0].Choices)
		}
	}
}

// FuzzParseHelp: any text either parses into rows that make a schema
// which loads back as written, or fails with a *HelpError naming a line of
// the text; never a panic.
func FuzzParseHelp(f *testing.F) {
	f.Add("sglang", argparseSample)
	f.Add("llamacpp", llamaSample)
	f.Add("vllm", "options:\n  --x {a,b} [{a,b} ...]\n   y (default: (1, 2))\n")
	f.Add("llamacpp", "-a, --b, -c, --no-b N  z (default: )\n")
	f.Fuzz(func(t *testing.T, eng, help string) {
		e, err := Lookup(eng)
		if err != nil {
			return
		}
		rows, err := ParseHelp(e.Name, []byte(help))
		lines := strings.Count(help, "\n") + 1
		var he *HelpError
		if err != nil {
			if !errors.As(err, &he) || he.Line < 1 || he.Line > lines {
				t.Fatalf("error %v is not a HelpError within %d lines", err, lines)
			}
			return
		}
		base, _, err := e.Schema("")
		if err != nil {
			t.Fatal(err)
		}
		s, err := SchemaFromHelp(e.Name, "v1", rows, base)
		if err != nil {
			if !errors.As(err, &he) || he.Line < 1 || he.Line > lines {
				t.Fatalf("error %v is not a HelpError within %d lines", err, lines)
			}
			return
		}
		data := MarshalSchema(s, help)
		got, err := ParseFlagSchema(data, "fuzz")
		if err != nil {
			t.Fatalf("written schema does not load: %v\n%s", err, data)
		}
		if len(got.Flags) != len(s.Flags) {
			t.Fatalf("%d flags written, %d read", len(s.Flags), len(got.Flags))
		}
		for i := range s.Flags {
			w, g := s.Flags[i], got.Flags[i]
			if w.Name != g.Name || w.Type != g.Type || w.Default != g.Default || !slicesEqual(w.Choices, g.Choices) || !slicesEqual(w.Aliases, g.Aliases) {
				t.Fatalf("flag %d written %+v, read %+v", i, w, g)
			}
		}
	})
}

func slicesEqual(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

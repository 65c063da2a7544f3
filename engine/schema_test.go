package engine

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "copy testdata/flags/*.yaml onto the embedded engine/flags/ copies")

// TestFlagSchemaCopiesIdentical keeps engine/flags/ (embedded) and
// testdata/flags/ (where people look) byte-identical.
func TestFlagSchemaCopiesIdentical(t *testing.T) {
	if *update {
		files, _ := filepath.Glob(filepath.Join("..", "testdata", "flags", "*.yaml"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("flags", filepath.Base(f)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Log("schemas copied; run the tests again to embed them")
		return
	}
	files, err := BundledFiles()
	if err != nil || len(files) == 0 {
		t.Fatalf("no bundled schemas: %v", err)
	}
	td, _ := filepath.Glob(filepath.Join("..", "testdata", "flags", "*.yaml"))
	if len(td) != len(files) {
		t.Errorf("testdata/flags has %d schemas, engine/flags %d; run go test ./engine -run Schema -update", len(td), len(files))
	}
	for name, emb := range files {
		td, err := os.ReadFile(filepath.Join("..", "testdata", "flags", name))
		if err != nil || !bytes.Equal(emb, td) {
			t.Errorf("engine/flags/%s and testdata/flags/%s differ (%v); edit testdata/flags and run go test ./engine -run Schema -update", name, name, err)
		}
		s, err := ParseFlagSchema(emb, name)
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := Lookup(s.Engine); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSchemaCoversReference(t *testing.T) {
	s, ok, err := SGLang.Schema("v0.5.21")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	// The reference's flag table and the seeds' launch commands.
	for _, f := range []string{"--model-path", "--model", "--tp-size", "--tensor-parallel-size", "--ep-size", "--expert-parallel-size", "--ep",
		"--dp-size", "--data-parallel-size", "--enable-dp-attention", "--mem-fraction-static", "--chunked-prefill-size", "--max-prefill-tokens",
		"--max-running-requests", "--max-total-tokens", "--disable-radix-cache", "--max-mamba-cache-size", "--mamba-ssm-dtype",
		"--mamba-full-memory-ratio", "--mamba-radix-cache-strategy", "--mamba-scheduler-strategy", "--mamba-track-interval", "--mamba-backend",
		"--linear-attn-backend", "--disable-cuda-graph", "--cuda-graph-max-bs", "--cuda-graph-bs", "--disable-overlap-schedule",
		"--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
		"--speculative-draft-model-path", "--speculative-draft-model", "--kv-cache-dtype", "--attention-backend", "--prefill-attention-backend",
		"--decode-attention-backend", "--moe-runner-backend", "--moe-a2a-backend", "--reasoning-parser", "--tool-call-parser", "--host", "--port",
		"--api-key", "--enable-metrics", "--trust-remote-code", "--context-length", "--served-model-name", "--random-seed", "--log-level",
		"--dsa-prefill-backend", "--dsa-decode-backend", "--fp8-gemm-backend", "--speculative-draft-attention-backend"} {
		if _, ok := s.Lookup(f); !ok {
			t.Errorf("schema lacks %s", f)
		}
	}
	if _, ok, _ := SGLang.Schema("v0.4.0"); ok {
		t.Error("v0.4.0 has no bundled schema but Schema says it has")
	}
	if s2, ok, err := SGLang.Schema("lmsysorg/sglang:v0.5.21-cu129"); err != nil || !ok || s2.Version != "v0.5.21" {
		t.Errorf("version from an image tag: %v %v %v", s2, ok, err)
	}
	spec, _ := s.Lookup("--max-prefill-tokens")
	for v, ok := range map[string]bool{"16k": true, "1Ki": true, "16384": true, "x": false, "0": false} {
		if err := spec.ValidateValue(v); (err == nil) != ok {
			t.Errorf("--max-prefill-tokens %q: %v", v, err)
		}
	}
	spec, _ = s.Lookup("--speculative-algorithm")
	if err := spec.ValidateValue("eagle"); err != nil {
		t.Errorf("speculative algorithm is case-insensitive: %v", err)
	}
	if got := s.Closest("--tp"); got != "--tp-size" {
		t.Errorf("closest --tp = %s", got)
	}
}

// TestShortFlags: engines with single-dash flags (llama.cpp's -m, -np)
// parse, and a negative number stays a value.
func TestShortFlags(t *testing.T) {
	s, err := ParseFlagSchema([]byte(`engine: x
version: v1.0.0
flags:
  - {name: --model, aliases: [-m], type: str}
  - {name: --parallel, aliases: [-np], type: int, min: 1}
  - {name: --n-predict, aliases: [-n], type: int}
  - {name: --flash-attn, aliases: [-fa], type: str, choices: ["on", "off", auto]}
`), "x")
	if err != nil {
		t.Fatal(err)
	}
	args, err := s.ParseArgv([]string{"-m", "/m.gguf", "-np", "4", "-n", "-1", "-fa", "on"})
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 4 || args[2].Values[0] != "-1" || args[0].Spec.Name != "--model" {
		t.Errorf("parsed %+v", args)
	}
	if _, err := s.ParseArgv([]string{"-np", "0"}); err == nil {
		t.Error("-np 0 accepted below min 1")
	}
	if _, err := s.ParseArgv([]string{"-x"}); err == nil {
		t.Error("unknown -x accepted")
	}
	v := NewView(s, []string{"-m", "/m.gguf", "--parallel=8"})
	if n, _ := v.Int("--parallel", 1); n != 8 || v["--model"][0] != "/m.gguf" {
		t.Errorf("view %v", v)
	}
	if _, err := ParseFlagSchema([]byte("engine: x\nversion: v1\nflags:\n  - {name: model, type: str}\n"), "bad"); err == nil {
		t.Error("a flag name without a dash was accepted")
	}
}

// TestSGLangClosedLists: the flags SGLang's argparse holds to a fixed list
// (server_args.py @001067ff) are closed in the bundled schema: a typo is
// refused with the valid values, and the values newer builds added
// (deepep_v2, pplx, breakable, tc_piecewise) are accepted.
func TestSGLangClosedLists(t *testing.T) {
	s, _, err := SGLang.Schema("v0.5.21")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		flag, value string
		ok          bool
		want        string // in the error when refused
	}{
		{"--moe-a2a-backend", "deepepp", false, `--moe-a2a-backend "deepepp" is not a valid choice (did you mean deepep?); valid: none, deepep, mooncake, nixl, mori, ascend_fuseep, flashinfer, megamoe, deepep_v2, pplx, ascend_tp`},
		{"--moe-a2a-backend", "deepep_v2", true, ""},
		{"--moe-a2a-backend", "pplx", true, ""},
		{"--speculative-moe-a2a-backend", "pplx", true, ""},
		{"--cuda-graph-backend-decode", "breakable", true, ""},
		{"--cuda-graph-backend-decode", "tc_piecewise", true, ""},
		{"--cuda-graph-backend-prefill", "breakable", true, ""},
		{"--cuda-graph-backend-prefill", "tc_piecewise", true, ""},
		{"--cuda-graph-backend-prefill", "piecewise", false, "valid: full, breakable, tc_piecewise, disabled"},
		{"--attention-backend", "fa3", true, ""},
		{"--attention-backend", "fa5", false, "did you mean fa3?"},
		{"--decode-attention-backend", "trtllm_mla", true, ""},
		{"--moe-runner-backend", "deep_gemm", true, ""},
		{"--moe-runner-backend", "deepgemm", false, "did you mean deep_gemm?"},
		{"--quantization", "fp8", true, ""},
		{"--quantization", "fp9", false, "not a valid choice"},
		{"--fp8-gemm-backend", "cutlass", true, ""},
		{"--fp4-gemm-backend", "flashinfer_cudnn", true, ""},
		{"--dsa-prefill-backend", "flashinfer_sparse_mla", true, ""},
		{"--nsa-decode-backend", "flashinfer_sparse_mla", true, ""},
		{"--linear-attn-backend", "triton", true, ""},
		{"--reasoning-parser", "glm45", true, ""},
		{"--tool-call-parser", "glm47", true, ""},
		{"--tool-call-parser", "glm46", false, "not a valid choice"},
		{"--radix-eviction-policy", "slru", true, ""},
		{"--load-balance-method", "round-robin", false, "did you mean round_robin?"},
		{"--hicache-write-policy", "write_back", true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			spec, ok := s.Lookup(tc.flag)
			if !ok {
				t.Fatalf("schema lacks %s", tc.flag)
			}
			err := spec.ValidateValue(tc.value)
			if tc.ok {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one holding %q", err, tc.want)
			}
		})
	}
	// The whole argv path refuses the typo the same way.
	if _, err := s.ParseArgv([]string{"--moe-a2a-backend", "deepepp"}); err == nil || !strings.Contains(err.Error(), "deepep_v2, pplx") {
		t.Errorf("ParseArgv --moe-a2a-backend deepepp: %v", err)
	}
}

// TestSGLangAddedTuningFlags: the tuning flags added from server_args.py
// @001067ff are in the schema with SGLang's types.
func TestSGLangAddedTuningFlags(t *testing.T) {
	s, _, err := SGLang.Schema("v0.5.21")
	if err != nil {
		t.Fatal(err)
	}
	for flag, typ := range map[string]string{
		"--cuda-graph-config": "str", "--torch-compile-max-bs": "int", "--num-continuous-decode-steps": "int",
		"--radix-eviction-policy": "str", "--prefill-max-requests": "int", "--enable-priority-scheduling": "bool",
		"--load-balance-method": "str", "--hicache-ratio": "float", "--hicache-size": "int", "--hicache-write-policy": "str",
		"--hicache-io-backend": "str", "--hicache-mem-layout": "str", "--hicache-storage-backend": "str",
		"--hicache-storage-prefetch-policy": "str", "--hicache-host-memory-mode": "str", "--cuda-graph-bs-prefill": "int",
		"--piecewise-cuda-graph-tokens": "int", "--dcp-size": "int", "--max-loras-per-batch": "int",
	} {
		f, ok := s.Lookup(flag)
		if !ok {
			t.Errorf("schema lacks %s", flag)
			continue
		}
		if f.Type != typ {
			t.Errorf("%s is a %s, want %s", flag, f.Type, typ)
		}
	}
}

// The flags an engine names for sgtune's own use (the model, the API, the
// memory fraction the search treats as monotone, the workspace flags) are
// flags its bundled schema knows.
func TestNamedFlagsAreInTheSchema(t *testing.T) {
	for _, e := range All() {
		s, ok, err := e.Schema("")
		if err != nil || !ok {
			t.Fatalf("%s: schema: %v %v", e.Name, ok, err)
		}
		named := []string{e.ModelFlag, e.ServedNameFlag, e.APIKeyFlag, e.HostFlag, e.PortFlag, e.MetricsFlag, e.ToolParserFlag, e.MemoryFractionFlag}
		for _, f := range append(named, e.WorkspaceFlags...) {
			if f == "" {
				continue
			}
			if _, ok := s.Lookup(f); !ok {
				t.Errorf("%s: the schema lacks %s", e.Name, f)
			}
		}
	}
}

package engine

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
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

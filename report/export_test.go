package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/shell"
)

var update = flag.Bool("update", false, "rewrite golden files")

func sample() Launch {
	return Launch{
		Study:   "glm-5.3-flash-h200x4",
		Trial:   7,
		Score:   fptr(1865.93),
		Command: []string{"python3", "-m", "sglang.launch_server"},
		Flags: []string{"--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4", "--ep-size", "4",
			"--disable-radix-cache", "--mem-fraction-static", "0.85", "--served-model-name", "it's a name"},
		Env:           map[string]string{"SGLANG_ENABLE_SPEC_V2": "1"},
		GPUs:          "0,1,2,3",
		Version:       "lmsysorg/sglang@sha256:b1259f3e",
		Params:        map[string]interface{}{"ep": "4", "radix_cache": "false", "mem_fraction": 0.85},
		ScoreReason:   "1865.9 output tok/s at c=64 (median of 3)",
		Measured:      &Figures{Concurrency: 64, OutputTokS: 1865.93, TTFTP99: 2.61},
		ModelRevision: "4f3a9c1e",
		Created:       time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
}

func TestWriteGolden(t *testing.T) {
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			checkGolden(t, format, sample(), "launch."+format+".golden")
		})
	}
}

// checkGolden writes l in format and compares it with testdata/name
// (rewritten with -update).
func checkGolden(t *testing.T, format string, l Launch, name string) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, format, l); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("%s export differs from %s:\n%s", format, golden, buf.String())
	}
}

// sampleContainer is sample() run in a container: the docker export runs
// the trial's image, pinned by its registry digest, with its options.
func sampleContainer(runtime string) Launch {
	l := sample()
	l.Container = &container.Record{Runtime: runtime, Image: "lmsysorg/sglang:v0.5.21", ImageID: "sha256:9e1f",
		RepoDigest: "lmsysorg/sglang@sha256:b1259f3e", Options: []string{"--ipc=host", "--shm-size", "32g"},
		Volumes: []string{"/data/hf:/root/.cache/huggingface"}}
	return l
}

func TestWriteContainerGolden(t *testing.T) {
	for _, runtime := range []string{"docker", "podman"} {
		t.Run(runtime, func(t *testing.T) {
			checkGolden(t, "docker", sampleContainer(runtime), "launch.container-"+runtime+".golden")
		})
	}
}

// TestBashScriptRuns checks the script parses and passes the winning flags,
// quoted correctly, to the engine command.
func TestBashScriptRuns(t *testing.T) {
	dir := t.TempDir()
	// A stand-in engine that prints its argv and environment.
	fake := filepath.Join(dir, "engine")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"CVD=$CUDA_VISIBLE_DEVICES\"\nfor a in \"$@\"; do echo \"[$a]\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := sample()
	l.Command = []string{fake}
	var buf bytes.Buffer
	if err := Write(&buf, "bash", l); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "launch.sh")
	if err := os.WriteFile(script, buf.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	run := exec.Command("bash", script, "--port", "30001")
	run.Env = withoutEnv(DefaultAPIKeyEnv)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	want := "CVD=0,1,2,3\n[--model-path]\n[zai-org/GLM-5.3-Flash]\n[--tp-size]\n[4]\n[--ep-size]\n[4]\n[--disable-radix-cache]\n" +
		"[--mem-fraction-static]\n[0.85]\n[--served-model-name]\n[it's a name]\n[--port]\n[30001]\n"
	if string(out) != want {
		t.Errorf("script passed\n%s\nwant\n%s", out, want)
	}
}

func TestUnknownFormat(t *testing.T) {
	if err := Write(&bytes.Buffer{}, "yaml", sample()); err == nil {
		t.Fatal("want an error for an unknown format")
	}
}

// withoutEnv is the test's environment less one variable.
func withoutEnv(name string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, name+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// TestAPIKeyReadAtRunTime: the key comes from the environment when the
// script runs; a key in the trial's flags is never written into the script.
func TestAPIKeyReadAtRunTime(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "engine")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := sample()
	l.Command = []string{fake}
	l.Flags = []string{"--model-path", "m", "--api-key", "stored-secret", "--tp-size", "4"}
	l.APIKeyEnv = "MY_KEY"
	var buf bytes.Buffer
	if err := Write(&buf, "bash", l); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "stored-secret") {
		t.Fatalf("the script holds the stored key:\n%s", buf.String())
	}
	script := filepath.Join(dir, "launch.sh")
	if err := os.WriteFile(script, buf.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key  string
		want string
	}{
		{"", "[--model-path]\n[m]\n[--tp-size]\n[4]\n[--port]\n[1]\n"},
		{"run-time key", "[--model-path]\n[m]\n[--tp-size]\n[4]\n[--api-key]\n[run-time key]\n[--port]\n[1]\n"},
	} {
		cmd := exec.Command("bash", script, "--port", "1")
		cmd.Env = withoutEnv("MY_KEY")
		if tt.key != "" {
			cmd.Env = append(cmd.Env, "MY_KEY="+tt.key)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
		if string(out) != tt.want {
			t.Errorf("MY_KEY=%q: engine got\n%s\nwant\n%s", tt.key, out, tt.want)
		}
	}
	l.APIKeyEnv = "not a name"
	if err := Write(&bytes.Buffer{}, "bash", l); err == nil {
		t.Error("an API key variable that is no shell name was accepted")
	}
}

// TestExportShellcheck runs shellcheck (all severities) on the bash and
// docker exports of the golden sample and of awkward values. CI installs
// shellcheck; without it the test is skipped.
func TestExportShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Skip("shellcheck not on PATH (Debian: apt-get install -y shellcheck)")
	}
	odd := sample()
	odd.GPUs = ""
	odd.Version = ""
	odd.Measured = nil
	odd.Env = map[string]string{"A_B": "x y $HOME", "NCCL_DEBUG": "INFO"}
	odd.Params = map[string]interface{}{"note": "a\nb; rm -rf /"}
	odd.Study = "study with $(odd) name\nand a newline"
	dir := t.TempDir()
	oddContainer := odd
	oddContainer.Container = &container.Record{Runtime: "podman", Image: "my image:$(x)", Options: []string{"--env", "A=$B"}, Volumes: []string{"/a b:/c"}}
	oddContainer.GPUs = "0,1"
	for name, l := range map[string]Launch{"sample": sample(), "odd": odd, "container": sampleContainer("docker"), "odd-container": oddContainer} {
		for _, format := range []string{"bash", "docker"} {
			var buf bytes.Buffer
			if err := Write(&buf, format, l); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, name+"."+format+".sh")
			if err := os.WriteFile(path, buf.Bytes(), 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(sc, "--severity=style", "--shell=bash", path).CombinedOutput(); err != nil {
				t.Errorf("%s %s: shellcheck: %v\n%s\n%s", name, format, err, out, buf.String())
			}
			if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
				t.Errorf("%s %s: bash -n: %v\n%s", name, format, err, out)
			}
		}
	}
	// The check can fail: a script with an unquoted expansion is flagged.
	bad := filepath.Join(dir, "bad.sh")
	if err := os.WriteFile(bad, []byte("#!/usr/bin/env bash\necho $1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(sc, "--severity=style", bad).Run(); err == nil {
		t.Error("shellcheck passed an unquoted $1")
	}
}

func TestCheckFlags(t *testing.T) {
	schema, _, err := engine.SGLang.Schema("v0.5.21")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		flags   []string
		wantErr string // "" for valid
		closest string
	}{
		{[]string{"--model-path", "m", "--tp-size", "4", "--disable-radix-cache", "--mem-fraction-static=0.85"}, "", ""},
		{[]string{"--tensor-parallel-size", "4"}, "", ""}, // alias
		{[]string{"--ep-sise", "4"}, "--ep-sise", "--ep-size"},
		{[]string{"--mem-fraction-static", "1.5"}, "above", ""},
		{[]string{"--tp-size", "four"}, "not an integer", ""},
		{[]string{"--disable-radix-cache=true"}, "takes no value", ""},
		{[]string{"--tp-size"}, "needs a value", ""},
		{[]string{"tp-size", "4"}, "not a flag", ""},
		{[]string{"--mamba-ssm-dtype", "int8"}, "not a valid choice", ""},
	} {
		err := CheckFlags(schema, tt.flags)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.flags, err)
			}
			continue
		}
		var fe *FlagError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%q: error %v, want a FlagError with %q", tt.flags, err, tt.wantErr)
			continue
		}
		if fe.Closest != tt.closest {
			t.Errorf("%q: closest %q, want %q", tt.flags, fe.Closest, tt.closest)
		}
	}
}

// TestShellQuoteRoundTrip: bash reads every quoted value back unchanged.
func TestShellQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "a b", "it's", `x y $HOME`, "`id`", `back\slash "q" $x`, "$'\\n'", "tab\there", "!bang"} {
		out, err := exec.Command("bash", "-c", "printf %s "+shell.Quote(s)).Output()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if string(out) != s {
			t.Errorf("shell.Quote(%q) = %s reads back as %q", s, shell.Quote(s), out)
		}
	}
}

// TestWriteLlama: a llama.cpp trial exports as llama-server with its own
// flag forms (short flags with their values, negations), the CPU server
// image without GPUs, and the model's folder mounted.
func TestWriteLlama(t *testing.T) {
	l := Launch{Engine: engine.LlamaCpp, Study: "llama-cpu", Trial: 3, Score: fptr(152.5), Command: []string{"llama-server"},
		Flags: []string{"-m", "/models/tiny.gguf", "--alias", "tiny", "-c", "2048", "-np", "4", "-n", "-1", "-fa", "on",
			"--no-cont-batching", "-cb", "--api-key", "sk-secret"},
		Env: map[string]string{"OMP_WAIT_POLICY": "PASSIVE"}, GPUs: "0", Params: map[string]interface{}{"slots": "4"}}
	s, _, err := engine.LlamaCpp.Schema("")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFlags(s, l.Flags); err != nil {
		t.Fatalf("llama flags rejected: %v", err)
	}
	out := map[string]string{}
	for _, format := range Formats {
		var buf bytes.Buffer
		if err := Write(&buf, format, l); err != nil {
			t.Fatal(err)
		}
		out[format] = buf.String()
		if strings.Contains(buf.String(), "sk-secret") || strings.Contains(buf.String(), "CUDA_VISIBLE_DEVICES") {
			t.Errorf("%s: the key or a GPU pin is in the export:\n%s", format, buf.String())
		}
	}
	for _, want := range []string{"exec llama-server \\\n  -m /models/tiny.gguf \\\n  --alias tiny \\\n  -c 2048 \\\n  -np 4 \\\n  -n -1 \\\n  -fa on \\\n  --no-cont-batching \\\n  -cb \\\n  \"$@\"",
		"export OMP_WAIT_POLICY=PASSIVE", `set -- --api-key "$SGTUNE_API_KEY" "$@"`} {
		if !strings.Contains(out["bash"], want) {
			t.Errorf("bash lacks %q:\n%s", want, out["bash"])
		}
	}
	for _, want := range []string{"IMAGE=${IMAGE:-ghcr.io/ggml-org/llama.cpp:server}", "exec docker run --rm --network host \\\n  -v /models:/models:ro \\\n  -e OMP_WAIT_POLICY=PASSIVE \\\n  \"$IMAGE\" \\\n  -m /models/tiny.gguf"} {
		if !strings.Contains(out["docker"], want) {
			t.Errorf("docker lacks %q:\n%s", want, out["docker"])
		}
	}
	for _, bad := range []string{"--gpus", "python3", "huggingface"} {
		if strings.Contains(out["docker"], bad) {
			t.Errorf("docker has %q:\n%s", bad, out["docker"])
		}
	}
	if !strings.Contains(out["json"], `"engine": "llamacpp"`) {
		t.Errorf("json:\n%s", out["json"])
	}
	if err := CheckFlags(s, []string{"-m", "/m.gguf", "--parallel=4"}); err == nil || !strings.Contains(err.Error(), "valid: --parallel 4") {
		t.Errorf("--parallel=4: %v", err)
	}
}

// A trial that read no score (failed, or pruned before the scored level)
// exports "none" with the reason, and JSON null: never a score of 0.
func TestExportWithoutScore(t *testing.T) {
	l := sample()
	l.Score, l.ScoreReason, l.Measured = nil, "no point at concurrency 64", nil
	l.Warning = "trial 7 is pruned, not measured to the end"
	var sh, js bytes.Buffer
	if err := Write(&sh, "bash", l); err != nil {
		t.Fatal(err)
	}
	if err := Write(&js, "json", l); err != nil {
		t.Fatal(err)
	}
	if want := "#   score:          none (no point at concurrency 64)\n"; !strings.Contains(sh.String(), want) {
		t.Errorf("bash header lacks %q:\n%s", want, sh.String())
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if s, ok := doc["score"]; !ok || s != nil {
		t.Errorf("json score %v (present %v), want null", s, ok)
	}
}

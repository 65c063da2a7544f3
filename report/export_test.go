package report

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func sample() Launch {
	return Launch{
		Study:   "glm-5.3-flash-h200x4",
		Trial:   7,
		Score:   1865.93,
		Command: []string{"python3", "-m", "sglang.launch_server"},
		Flags: []string{"--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4", "--ep-size", "4",
			"--disable-radix-cache", "--mem-fraction-static", "0.85", "--served-model-name", "it's a name"},
		Env:     map[string]string{"SGLANG_ENABLE_SPEC_V2": "1"},
		GPUs:    "0,1,2,3",
		Version: "lmsysorg/sglang@sha256:b1259f3e",
		Params:  map[string]interface{}{"ep": "4", "radix_cache": "false", "mem_fraction": 0.85},
	}
}

func TestWriteGolden(t *testing.T) {
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, format, sample()); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "launch."+format+".golden")
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
	out, err := exec.Command("bash", script, "--port", "30001").CombinedOutput()
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

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/report"
	"github.com/sgtune/sgtune/search"
)

// TestVLLMStudyEndToEnd runs testdata/studies/vllm-sim.yaml, sped up and
// cut to three trials: `sgtune check` explains rejections with vLLM's rules,
// the trials run on the simulator speaking vLLM through the real launcher
// and load generator, and every export writes `vllm serve MODEL ...` whose
// flags parse against the bundled vLLM schema.
func TestVLLMStudyEndToEnd(t *testing.T) {
	buildBins(t, "sglang-sim")
	src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "studies", "vllm-sim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	for old, repl := range map[string]string{"--sim-speedup 25": "--sim-speedup 100", "trials: 6": "trials: 4"} {
		if !strings.Contains(doc, old) {
			t.Fatalf("vllm-sim.yaml no longer has %q", old)
		}
		doc = strings.Replace(doc, old, repl, 1)
	}
	dir := t.TempDir()
	study := writeFile(t, dir, "vllm-sim.yaml", doc)
	db := filepath.Join(dir, "v.db")

	code, out := cli(t, nil, nil, "check", study)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, out)
	}
	for _, want := range []string{"engine: vllm", "parallel_gpus:", "--tensor-parallel-size 4 x --data-parallel-size 2 = 8 GPUs > gpus.per_trial 4",
		"async_scheduling:", "example feasible config: sglang-sim --sim-engine vllm --sim-profile glm-5.3-flash-h200x4 --sim-speedup 100 zai-org/GLM-5.3-Flash "} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	code, out = cli(t, nil, nil, "run", study, "--storage", db)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	// The engine default (budget.baseline) takes the first of the 4
	// launches, whatever it measures; the search's 3 complete.
	complete, defaults := 0, 0
	for _, r := range records(t, db) {
		if r.Baseline {
			defaults++
			if len(r.Argv) == 0 || r.Argv[len(r.Argv)-1] == "" {
				t.Errorf("the engine default's argv %q", r.Argv)
			}
			continue
		}
		if r.State == search.StateComplete {
			complete++
			if r.EngineName != "vllm" || r.Score == nil || *r.Score <= 0 {
				t.Errorf("trial %d: engine %q score %v", r.Number, r.EngineName, r.Score)
			}
		}
	}
	if complete != 3 || defaults != 1 {
		t.Errorf("%d complete trials of the search and %d of the engine default, want 3 and 1:\n%s", complete, defaults, out)
	}
	// The startup facts came from vLLM's log lines, the token counts from
	// vllm:generation_tokens_total.
	if !strings.Contains(out, "max_total_num_tokens=") || !strings.Contains(out, "tokens = server counter") {
		t.Errorf("run output lacks vLLM facts or the counter check:\n%s", out)
	}

	schema, _, err := engine.VLLM.Schema("v0.11.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"bash", "docker", "json"} {
		path := filepath.Join(dir, "best."+format)
		if code, out := cli(t, nil, nil, "export", "--storage", db, "--format", format, "-o", path); code != 0 {
			t.Fatalf("export %s: exit %d\n%s", format, code, out)
		}
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch format {
		case "bash":
			if !strings.Contains(string(body), "exec vllm serve zai-org/GLM-5.3-Flash \\\n") {
				t.Errorf("bash script:\n%s", body)
			}
		case "docker":
			if !strings.Contains(string(body), "IMAGE=${IMAGE:-vllm/vllm-openai:v0.11.1}") ||
				!strings.Contains(string(body), "--entrypoint vllm \\\n  \"$IMAGE\" serve zai-org/GLM-5.3-Flash \\\n") {
				t.Errorf("docker script:\n%s", body)
			}
		case "json":
			var d struct {
				Command []string `json:"command"`
				Model   string   `json:"model"`
				Flags   []string `json:"flags"`
			}
			if err := json.Unmarshal(body, &d); err != nil || strings.Join(d.Command, " ") != "vllm serve" || d.Model != "zai-org/GLM-5.3-Flash" {
				t.Fatalf("json export: %v\n%s", err, body)
			}
			if err := report.CheckFlags(schema, d.Flags); err != nil {
				t.Errorf("exported flags do not parse against the vLLM schema: %v", err)
			}
			if !strings.Contains(strings.Join(d.Flags, " "), "--tensor-parallel-size 4") {
				t.Errorf("flags %v", d.Flags)
			}
		}
		if format != "json" {
			if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
				t.Errorf("%s: bash -n: %v\n%s", format, err, out)
			}
		}
	}
}

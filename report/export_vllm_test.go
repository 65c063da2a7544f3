package report

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/engine"
)

// TestExportVLLM: vLLM takes its model as `vllm serve MODEL`; the docker
// script runs the vllm/vllm-openai image the study pinned (by digest when
// engine.version names one) with the vllm program as entrypoint.
func TestExportVLLM(t *testing.T) {
	digest := "vllm/vllm-openai:v0.11.1@sha256:" + strings.Repeat("ab", 32)
	l := Launch{Study: "v", Trial: 2, Score: fptr(10), Engine: engine.VLLM, Command: []string{"vllm", "serve"}, Version: digest,
		Flags: []string{"--model", "org/m", "-tp", "4", "--no-enable-prefix-caching", "--api-key", "secret",
			"--speculative-config", `{"method": "mtp", "num_speculative_tokens": 2}`}}
	var b bytes.Buffer
	if err := Write(&b, "bash", l); err != nil {
		t.Fatal(err)
	}
	bash := b.String()
	for _, want := range []string{"exec vllm serve org/m \\\n  -tp 4 \\\n  --no-enable-prefix-caching \\\n",
		`  --speculative-config '{"method": "mtp", "num_speculative_tokens": 2}' \`} {
		if !strings.Contains(bash, want) {
			t.Errorf("bash lacks %q:\n%s", want, bash)
		}
	}
	if strings.Contains(bash, "secret") || strings.Contains(bash, "--model") {
		t.Errorf("bash writes the key or --model:\n%s", bash)
	}
	b.Reset()
	if err := Write(&b, "docker", l); err != nil {
		t.Fatal(err)
	}
	docker := b.String()
	for _, want := range []string{"IMAGE=${IMAGE:-" + digest + "}", "  --entrypoint vllm \\\n  \"$IMAGE\" serve org/m \\\n  -tp 4"} {
		if !strings.Contains(docker, want) {
			t.Errorf("docker lacks %q:\n%s", want, docker)
		}
	}
	for name, script := range map[string]string{"bash": bash, "docker": docker} {
		if out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput(); err != nil {
			t.Errorf("%s: bash -n: %v\n%s", name, err, out)
		}
	}
	// A study tuned through the simulator deploys the image's own command.
	l.Command, l.Version = []string{"sglang-sim", "--sim-engine", "vllm"}, "v0.11.1"
	b.Reset()
	if err := Write(&b, "docker", l); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "IMAGE=${IMAGE:-vllm/vllm-openai:v0.11.1}") || !strings.Contains(b.String(), `"$IMAGE" serve org/m`) {
		t.Errorf("docker from a simulated study:\n%s", b.String())
	}
	b.Reset()
	if err := Write(&b, "json", l); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Model string   `json:"model"`
		Flags []string `json:"flags"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil || doc.Model != "org/m" || doc.Flags[0] != "-tp" {
		t.Errorf("json: %v %+v", err, doc)
	}
	s, _, err := engine.VLLM.Schema(l.Version)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFlags(s, doc.Flags); err != nil {
		t.Errorf("exported flags do not parse: %v", err)
	}
}

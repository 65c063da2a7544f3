package search

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/sgtune/sgtune/space"
)

// TestFlagCountVLLMSwitchDefaults: the tie rule counts the flags a config
// changes from the engine's defaults. A vLLM switch at its default
// (enforce_eager is False) writes nothing and counts nothing, so a tie can
// go to the default config; before, false wrote --no-enforce-eager and
// counted as a change. A switch whose default vLLM decides by model
// (prefix caching) is written, and counted, either way.
func TestFlagCountVLLMSwitchDefaults(t *testing.T) {
	st, err := space.Parse(filepath.Join(t.TempDir(), "v.yaml"), []byte(`name: v
engine: {name: vllm, command: vllm serve, version: v0.11.1}
model: {path: org/model}
gpus: {per_trial: 1}
fixed: {--max-num-seqs: 64}
params:
  - {name: eager, type: bool, flag: --enforce-eager}
  - {name: pc, type: bool, flag: --enable-prefix-caching}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		eager, pc bool
		want      int
	}{
		{false, false, 1}, // --no-enable-prefix-caching
		{true, false, 2},
		{false, true, 1},
		{true, true, 2},
	} {
		cfg, err := st.Resolve(space.Params{"eager": tc.eager, "pc": tc.pc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := flagCount(st, Record{Config: b}); got != tc.want {
			t.Errorf("eager=%v pc=%v: %d flags changed (%v); want %d", tc.eager, tc.pc, got, cfg.Flags, tc.want)
		}
	}
}

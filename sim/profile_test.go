package sim

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmbeddedProfilesMatchTestdata: go:embed cannot reach testdata/ from
// this package, so sim/profiles holds a copy; the two must stay identical
// (refresh with: cp testdata/profiles/*.yaml sim/profiles/).
func TestEmbeddedProfilesMatchTestdata(t *testing.T) {
	files, err := filepath.Glob("../testdata/profiles/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no profiles in testdata/profiles: %v", err)
	}
	names := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		names[name] = true
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := profilesFS.ReadFile("profiles/" + name + ".yaml")
		if err != nil {
			t.Errorf("%s is not embedded: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("sim/profiles/%s.yaml differs from testdata/profiles; run: cp testdata/profiles/*.yaml sim/profiles/", name)
		}
	}
	for _, n := range ProfileNames() {
		if !names[n] {
			t.Errorf("embedded profile %s has no testdata/profiles copy", n)
		}
	}
}

func TestProfilesLoad(t *testing.T) {
	for _, n := range ProfileNames() {
		if _, err := LoadProfile(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := LoadProfile("../testdata/profiles/glm-5.3-flash-h200x4.yaml"); err != nil {
		t.Errorf("by file: %v", err)
	}
	if _, err := ParseProfile([]byte("name: x\nbogus: 1\n")); err == nil {
		t.Error("unknown field accepted")
	}
}

func TestTableAt(t *testing.T) {
	tb := Table{{1, 10}, {3, 30}}
	for _, c := range []struct{ x, y float64 }{{0, 10}, {1, 10}, {2, 20}, {3, 30}, {9, 30}} {
		if got := tb.At(c.x); got != c.y {
			t.Errorf("At(%v) = %v, want %v", c.x, got, c.y)
		}
	}
}

// TestFaultRules: the seed's configurations select the rules that make
// them fail as they did in the seed.
func TestFaultRules(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	cases := []struct {
		argv  string
		kinds []string
	}{
		{seedConfigs[0].argv, []string{"crash_after_requests"}},            // reproduce
		{seedConfigs[1].argv, nil},                                         // no-cuda-graphs passes
		{seedConfigs[2].argv, []string{"corrupt", "crash_after_requests"}}, // no-overlap
		{seedConfigs[3].argv, []string{"crash_when_running_over"}},         // state-pool-128
		{seedConfigs[5].argv, nil},                                         // quad-ep4
		{seedConfigs[9].argv, nil},                                         // mtp5-state384
		{"--tp 4 --chunked-prefill-size 16384 --mem-fraction-static 0.88", []string{"startup_oom"}},
		{"--tp 8", []string{"startup_crash"}},
		{"--tp 4 --dp 2 --enable-dp-attention", []string{"hang_when_running_over"}},
	}
	for _, c := range cases {
		a, pl := resolveArgv(t, p, c.argv)
		rules, err := MatchFaults(p.Faults, pl.Facts(a))
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, r := range rules {
			kinds = append(kinds, r.Effect.Kind)
		}
		if strings.Join(kinds, ",") != strings.Join(c.kinds, ",") {
			t.Errorf("%q: rules %v, want %v", c.argv, kinds, c.kinds)
		}
	}
	if _, err := MatchFaults([]FaultRule{{Name: "x", When: map[string]any{"nope": 1}}}, map[string]any{}); err == nil {
		t.Error("unknown fact accepted")
	}
}

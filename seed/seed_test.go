package seed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const record = "../testdata/profiles/calibration/seed000.json"

func TestLoad(t *testing.T) {
	f, err := Load(record)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Runs) != 10 {
		t.Fatalf("%d runs, want the seed's 10", len(f.Runs))
	}
	r := f.Run("quad-ep4-mtp5")
	if r == nil {
		t.Fatal("no run quad-ep4-mtp5")
	}
	c := r.Config
	if r.State != "configuration_rejected" || c.TP != 4 || c.EP != 4 || c.MemoryFraction != 0.78 || c.StatePoolSlots != 256 ||
		c.RequestedMaxRunning != 64 || c.EffectiveMaxRunning != 51 || c.SpecMethod == nil || *c.SpecMethod != "EAGLE" ||
		*c.SpecSteps != 5 || *c.SpecTokens != 6 || !c.PrefixCaching {
		t.Errorf("quad-ep4-mtp5 read as %+v (state %s)", c, r.State)
	}
	if f.Run("no-such-run") != nil {
		t.Error("Run of an unknown name is not nil")
	}
}

func TestRepeat(t *testing.T) {
	f, err := Load(record)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Run("quad-ep4")
	tests := []struct {
		rep, conc int
		found     bool
	}{{1, 1, true}, {2, 16, true}, {3, 128, true}, {1, 12, false}, {4, 1, false}}
	for _, tt := range tests {
		p := r.Repeat(tt.rep, tt.conc)
		if (p != nil) != tt.found {
			t.Errorf("Repeat(%d, %d) = %+v, want found %v", tt.rep, tt.conc, p, tt.found)
			continue
		}
		if p != nil && (p.Concurrency != tt.conc || p.OutputTokS <= 0 || p.TTFT.P50 <= 0 || p.TTFT.P99 < p.TTFT.P50) {
			t.Errorf("Repeat(%d, %d) = %+v", tt.rep, tt.conc, p)
		}
	}
	// C1 must not match C16 or C128 by prefix.
	if p := r.Repeat(1, 1); p == nil || !strings.HasPrefix(p.File, "r1-c1_") {
		t.Errorf("Repeat(1, 1) = %+v", p)
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"runs": [{"name": 3}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{bad, filepath.Join(t.TempDir(), "missing.json")} {
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("Load(%s) error %v, want one naming the file", path, err)
		}
	}
}

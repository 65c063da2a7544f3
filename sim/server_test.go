package sim

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestStatePoolEndpointsOnlyForHybrid: only a hybrid model reports a state
// pool on /server_info and /metrics. A dense model's
// internal_states[0].max_mamba_cache_size stays as launched (null: its
// scheduler never sizes a pool, ref §4 /server_info), and its
// sglang:mamba_usage gauge is exported (ref §4 /metrics lists it with no
// hybrid condition) and reads 0 (SGLang sets it only for a hybrid model),
// where the simulator reported 0 slots and a usage of running x ratio.
// The hybrid profile keeps its pool size and usage.
func TestStatePoolEndpointsOnlyForHybrid(t *testing.T) {
	dense, err := ParseProfile([]byte(docExampleProfile(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		p      *Profile
		argv   []string
		hybrid bool
	}{
		{"dense", dense, []string{"--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "2"}, false},
		{"hybrid", mustProfile(t, "glm-5.3-flash-h200x4"), []string{"--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseArgs(append(tc.argv, "--enable-metrics"))
			if err != nil {
				t.Fatal(err)
			}
			pl := Resolve(a, tc.p)
			if pl.Err != nil {
				t.Fatal(pl.Err)
			}
			eng := NewEngine(tc.p, pl, nil, 1, io.Discard, nil)
			// Two requests running, so that a usage computed from the
			// running batch is not 0 by accident.
			eng.running = []*Seq{{Prompt: 10, Limit: 10}, {Prompt: 10, Limit: 10}}
			s := newServer(tc.p, pl, a, eng, 1, io.Discard, nil)

			rec := httptest.NewRecorder()
			s.serverInfo(rec, httptest.NewRequest("GET", "/server_info", nil))
			var info struct {
				Slots    *int `json:"max_mamba_cache_size"`
				Internal []struct {
					Slots *int `json:"max_mamba_cache_size"`
				} `json:"internal_states"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &info); err != nil || len(info.Internal) != 1 {
				t.Fatalf("/server_info: %v %s", err, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), `"max_mamba_cache_size":`) {
				t.Errorf("/server_info lacks max_mamba_cache_size (asdict has every field): %s", rec.Body)
			}
			if info.Slots != nil {
				t.Errorf("max_mamba_cache_size = %d, want null (the flag is unset)", *info.Slots)
			}
			want := "null"
			if tc.hybrid {
				want = strconv.Itoa(pl.StateSlots)
			}
			if got := intOrNull(info.Internal[0].Slots); got != want || got == "0" {
				t.Errorf("internal_states[0].max_mamba_cache_size = %s, want %s", got, want)
			}

			rec = httptest.NewRecorder()
			s.metrics(rec, httptest.NewRequest("GET", "/metrics", nil))
			usage, ok := gaugeValue(rec.Body.String(), "sglang:mamba_usage")
			if !ok {
				t.Fatalf("/metrics lacks sglang:mamba_usage:\n%s", rec.Body)
			}
			wantUsage := 0.0
			if tc.hybrid {
				wantUsage = float64(2*pl.Ratio) / float64(pl.StateSlots)
			}
			if usage != wantUsage || (tc.hybrid && usage == 0) {
				t.Errorf("sglang:mamba_usage = %g, want %g", usage, wantUsage)
			}
		})
	}
}

// intOrNull prints a JSON integer field: its value, or null.
func intOrNull(v *int) string {
	if v == nil {
		return "null"
	}
	return strconv.Itoa(*v)
}

// gaugeValue is the value of the first sample of metric in a Prometheus
// text exposition.
func gaugeValue(body, metric string) (float64, bool) {
	for _, l := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(l, metric+"{"); ok {
			_, v, _ := strings.Cut(rest, "} ")
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

package search

import (
	"math/rand/v2"
	"testing"

	"github.com/sgtune/sgtune/space"
)

func TestNeighbourOf(t *testing.T) {
	st, _, _ := openFake(t, "- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}\n  - {name: radix, type: bool, values: {false: --disable-radix-cache}}")
	score := func(v float64) *float64 { return &v }
	rec := func(n int, ep string, radix bool, slots int, s float64) Record {
		return Record{Number: n, State: StateComplete, ScoreOK: true, Score: score(s), Params: map[string]any{"ep": ep, "radix": radix, "slots": slots}}
	}
	lead := map[string]any{"ep": "4", "radix": true, "slots": 128}
	// Only slot changes of 128 are shut, so that ep and radix are the
	// choices.
	onlySlots128 := func(p space.Params) bool { return p["slots"] == 128 }
	tests := []struct {
		name string
		recs []Record
		open func(space.Params) bool
		want map[string]any // nil: no neighbour
	}{
		{"a value no config near the top has", []Record{
			rec(1, "4", true, 128, 1000), rec(2, "1", true, 128, 950), rec(3, "1", false, 64, 100),
		}, onlySlots128, map[string]any{"ep": "4", "radix": false, "slots": 128}},
		{"else the param changed least", []Record{
			rec(1, "4", true, 128, 1000), rec(2, "1", true, 128, 950), rec(3, "4", false, 64, 960),
			rec(4, "4", true, 64, 940),
		}, func(p space.Params) bool { return p["slots"] == 128 }, map[string]any{"ep": "4", "radix": false, "slots": 128}},
		{"nothing open", []Record{rec(1, "4", true, 128, 1000)},
			func(space.Params) bool { return false }, nil},
	}
	for _, tc := range tests {
		for seed := range uint64(5) {
			got, err := neighbourOf(st, lead, tc.recs, rand.New(rand.NewPCG(seed, 1)), tc.open)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if got != nil {
					t.Errorf("%s: %v, want none", tc.name, got)
				}
				continue
			}
			p, err := st.Suggest(&pinned{internal: got})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if p[k] != v {
					t.Errorf("%s (seed %d): %v, want %v", tc.name, seed, p, tc.want)
					break
				}
			}
		}
	}
}

// The moves of a param: every other value of a categorical or a few-valued
// number; one step, a quarter and half the range for a wide one.
func TestDomainMoves(t *testing.T) {
	tests := []struct {
		name string
		d    domain
		want []float64
	}{
		{"categorical", domain{categorical: 3, current: 1}, []float64{0, 2}},
		{"few values", domain{low: 1, high: 7, q: 1, integer: true, current: 3}, []float64{1, 2, 4, 5, 6, 7}},
		{"wide, stepped", domain{low: 0.70, high: 0.90, q: 0.01, current: 0.80}, []float64{0.79, 0.81, 0.75, 0.85, 0.70, 0.90}},
		{"at the edge", domain{low: 0, high: 100, current: 0}, []float64{25, 50}},
	}
	for _, tc := range tests {
		got := tc.d.moves()
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if d := got[i] - tc.want[i]; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

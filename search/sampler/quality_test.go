// goptuna-tpe draws from the global math/rand; seeding it (rand.Seed) is a
// no-op since Go 1.24 unless this setting restores it for the test binary.

//go:debug randseednop=0

package sampler

import (
	"fmt"
	"io"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/c-bata/goptuna"
)

// method is one sampler under comparison.
type method struct {
	name string
	// global marks samplers drawing from the process-global math/rand
	// (goptuna's TPE): the harness seeds it per study and runs them alone.
	global bool
	build  func(seed int64) (goptuna.Sampler, error)
}

func byName(name string, opts ...Option) func(int64) (goptuna.Sampler, error) {
	return func(seed int64) (goptuna.Sampler, error) { return New(name, seed, opts...) }
}

// qualityMethods are compared by the quality check; the first is ours.
var qualityMethods = []method{
	{name: "tpe", build: byName("tpe")},
	{name: "tpe-univariate", build: byName("tpe-univariate")},
	{name: "tpe startup=10", build: byName("tpe", WithStartup(10))},
	{name: "tpe-uv startup=10", build: byName("tpe-univariate", WithStartup(10))},
	{name: "tpe no-dedup", build: byName("tpe", WithAvoidDuplicates(false))},
	{name: "random", build: byName("random")},
	{name: "goptuna-tpe", global: true, build: byName("goptuna-tpe")},
}

// quality runs every method on every problem, seeds 1..seeds, n trials
// each, and returns the median best per problem and method.
func quality(t testing.TB, methods []method, first, seeds, n int) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, pr := range problems() {
		out[pr.name] = map[string]float64{}
		for _, m := range methods {
			bests := make([]float64, seeds)
			for i := 0; i < seeds; i++ {
				seed := first + i
				s, err := m.build(int64(seed))
				if err != nil {
					t.Fatal(err)
				}
				if m.global {
					rand.Seed(int64(seed)) //nolint:staticcheck // goptuna's TPE draws from the global source
				}
				bests[i] = runProblem(t, pr, s, n)
			}
			out[pr.name][m.name] = median(bests)
		}
	}
	return out
}

// printQuality writes the table in Markdown.
func printQuality(w io.Writer, methods []method, res map[string]map[string]float64, seeds, n int) {
	fmt.Fprintf(w, "median best over %d seeds x %d trials (sphere2d, mixed, step-ints: minimise; config-like: maximise, optimum %.1f)\n\n", seeds, n, configLike().best)
	fmt.Fprintf(w, "|problem|")
	for _, m := range methods {
		fmt.Fprintf(w, "%s|", m.name)
	}
	fmt.Fprintf(w, "\n|%s\n", strings.Repeat("---|", len(methods)+1))
	for _, pr := range problems() {
		fmt.Fprintf(w, "|%s|", pr.name)
		for _, m := range methods {
			fmt.Fprintf(w, "%.3f|", res[pr.name][m.name])
		}
		fmt.Fprintln(w)
	}
}

// TestQualityTable prints the comparison table when SGTUNE_QUALITY_TABLE is
// set: SGTUNE_QUALITY_TABLE=1 go test -run QualityTable -v ./search/sampler/
// (SGTUNE_QUALITY_FIRST_SEED, default 1, and SGTUNE_QUALITY_TRIALS, default
// 40, choose the seeds 30 studies use and their length).
func TestQualityTable(t *testing.T) {
	if os.Getenv("SGTUNE_QUALITY_TABLE") == "" {
		t.Skip("set SGTUNE_QUALITY_TABLE=1 to print the table")
	}
	first := 1
	if v := os.Getenv("SGTUNE_QUALITY_FIRST_SEED"); v != "" {
		if _, err := fmt.Sscan(v, &first); err != nil {
			t.Fatalf("SGTUNE_QUALITY_FIRST_SEED=%q: want an integer", v)
		}
	}
	trials := 40
	if v := os.Getenv("SGTUNE_QUALITY_TRIALS"); v != "" {
		if _, err := fmt.Sscan(v, &trials); err != nil {
			t.Fatalf("SGTUNE_QUALITY_TRIALS=%q: want an integer", v)
		}
	}
	res := quality(t, qualityMethods, first, 30, trials)
	var b strings.Builder
	printQuality(&b, qualityMethods, res, 30, trials)
	t.Log("\n" + b.String())
}

// TestQualityBeatsBaselines: over 30 seeds x 40 trials of each toy problem,
// both TPE modes' median best is better than random's and than goptuna
// v0.9.0's TPE behind the same start-up draws. Every sampler is seeded
// (goptuna's through the global source), so the outcome is deterministic;
// the same ordering held on seeds 31-60, 61-90 and 91-120 (see the table's
// test). It does not hold at every budget: at 25 trials the univariate TPE
// was behind goptuna's on mixed and config-like for seeds 1-30. Skipped
// with -short: it runs 19,200 trials.
func TestQualityBeatsBaselines(t *testing.T) {
	if testing.Short() {
		t.Skip("quality check runs 19,200 trials")
	}
	methods := []method{qualityMethods[0], qualityMethods[1], qualityMethods[5], qualityMethods[6]}
	res := quality(t, methods, 1, 30, 40)
	var b strings.Builder
	printQuality(&b, methods, res, 30, 40)
	t.Log("\n" + b.String())
	for _, pr := range problems() {
		better := func(a, b float64) bool { return a < b }
		if pr.max {
			better = func(a, b float64) bool { return a > b }
		}
		for _, ours := range []string{"tpe", "tpe-univariate"} {
			for _, base := range []string{"random", "goptuna-tpe"} {
				if o, x := res[pr.name][ours], res[pr.name][base]; !better(o, x) {
					t.Errorf("%s: %s median best %.4g is not better than %s's %.4g", pr.name, ours, o, base, x)
				}
			}
		}
	}
}

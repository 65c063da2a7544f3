package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/storage"
)

// fakeTrial is one complete trial measured at c=64: n requests whose TTFTs
// rise linearly from ttftLo to ttftHi, each producing tokens in durS.
type fakeTrial struct {
	name           string
	tokS           float64
	ttftLo, ttftHi float64
	// rerunOf, when set, makes the trial a confirmation run of that trial
	// (same config).
	rerunOf *int
}

// seedStudy stores a study as a run would: trials with their config,
// score attributes, points and per-request records. Scores are computed
// by objective.Score from the same points, under ttft p99 < 2 s.
func seedStudy(t *testing.T, dir string, trials []fakeTrial, studyAttrs map[string]string) string {
	t.Helper()
	db := filepath.Join(dir, "s.db")
	st, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sid, err := st.CreateNewStudy("rescore")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.SetStudyDirection(sid, goptuna.StudyDirectionMaximize))
	for k, v := range studyAttrs {
		if k == storage.AttrWinner { // the run stores the winner as a system attribute
			must(st.SetStudySystemAttr(sid, k, v))
			continue
		}
		must(st.SetStudyUserAttr(sid, k, v))
	}
	spec := objective.ScoreSpec{Metric: objective.MetricOutputTokS, Concurrency: 64,
		SLO: []objective.SLO{{Metric: "ttft", Percentile: "p99", Max: 2}}}
	choices := make([]string, len(trials))
	for i, tr := range trials {
		choices[i] = tr.name
	}
	for i, tr := range trials {
		id, err := st.CreateNewTrial(sid)
		must(err)
		// Each trial was launched: it counts against the budget, as a run's do.
		ok, err := st.ClaimLaunch(context.Background(), id, 1000)
		must(err)
		if !ok {
			t.Fatal("launch not counted")
		}
		cfg := i
		if tr.rerunOf != nil {
			cfg = *tr.rerunOf
			must(st.SetTrialSystemAttr(id, storage.AttrConfirmOf, strconv.Itoa(cfg)))
		}
		must(st.SetTrialParam(id, "config", float64(cfg), goptuna.CategoricalDistribution{Choices: choices}))
		const n, dur = 64, 10.0
		var ttfts []float64
		var recs []storage.RequestRecord
		for k := 0; k < n; k++ {
			ttft := tr.ttftLo + (tr.ttftHi-tr.ttftLo)*float64(k)/float64(n-1)
			ttfts = append(ttfts, ttft)
			recs = append(recs, storage.RequestRecord{Concurrency: 64, Repeat: 1, Index: k, TTFT: ttft, Latency: ttft + 5,
				OutputTokens: int(tr.tokS * dur / n), OK: true})
		}
		p := objective.Point{Concurrency: 64, Repeat: 1, State: "passed", Requested: n, Issued: n, Completed: n,
			OutputTokens: int(tr.tokS * dur), DurationS: dur, OutputTokS: tr.tokS, TTFT: objective.Summarize(ttfts),
			Audit: objective.Audit{RawCount: true, Completed: true, Failed: true, Tokens: true, AllRequested: true}}
		must(st.SavePoints(id, []objective.Point{p}))
		must(st.SaveRequests(id, recs))
		res := &objective.Result{Points: []objective.Point{p}}
		v, ok, why := objective.Score(spec, res)
		attrs := map[string]string{
			"sgtune.state": "complete", "sgtune.score": strconv.FormatFloat(v, 'g', -1, 64),
			"sgtune.score_ok": strconv.FormatBool(ok), "sgtune.score_reason": why,
			"sgtune.config":         fmt.Sprintf(`{"flags":["--model-path","m","--mem-fraction-static","0.%d"]}`, 80+cfg),
			"sgtune.engine_version": "v0.5.21",
			"sgtune.result":         `{"medians":{"64":{"repeats":1,"output_tok_s":` + strconv.FormatFloat(tr.tokS, 'f', 1, 64) + `,"ttft_p99_s":` + strconv.FormatFloat(p.TTFT.P99, 'f', 3, 64) + `}}}`,
		}
		for k, v := range attrs {
			must(st.SetTrialUserAttr(id, k, v))
		}
		must(st.SetTrialValue(id, v))
		must(st.SetTrialState(id, goptuna.TrialStateComplete))
	}
	return db
}

// storedWinner is a declared winner as a run stores it (storage.AttrWinner):
// the first candidate wins, for reason.
func storedWinner(t *testing.T, reason string, cands ...search.Candidate) string {
	t.Helper()
	w := cands[0]
	js, err := json.Marshal(search.Winner{Trial: w.Trial, Pooled: w.Pooled, Spread: w.Spread, Runs: w.Runs, Flags: w.Flags,
		Candidates: cands, Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

// confirmed is a confirmed config with flags changed from the defaults and
// its runs' scores by trial (the config's first trial first), pooled as a
// run pools them.
func confirmed(flags int, scores ...[2]float64) search.Candidate {
	c := search.Candidate{Trial: int(scores[0][0]), Flags: flags}
	for _, s := range scores {
		c.Runs = append(c.Runs, search.Measurement{Trial: int(s[0]), Score: s[1], OK: true})
	}
	c.Pooled, c.Spread = search.Pool(c.Runs)
	return c
}

// Fast has the highest throughput but a long TTFT tail; steady is slower
// with TTFTs all under a second.
var rankingTrials = []fakeTrial{
	{name: "fast", tokS: 2000, ttftLo: 0.2, ttftHi: 1.6},
	{name: "steady", tokS: 1800, ttftLo: 0.2, ttftHi: 0.6},
	{name: "slow", tokS: 1200, ttftLo: 0.1, ttftHi: 0.3},
}

type rescoreDoc struct {
	Study  string              `json:"study"`
	Score  objective.ScoreSpec `json:"score"`
	Winner *int                `json:"winner"`
	Trials []rescored          `json:"trials"`
}

func rescoreJSON(t *testing.T, args ...string) rescoreDoc {
	t.Helper()
	code, out := cli(t, nil, nil, append([]string{"rescore", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("rescore %q: exit %d\n%s", args, code, out)
	}
	var doc rescoreDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("rescore --json: %v\n%s", err, out)
	}
	return doc
}

// ranking returns the trial numbers that count, best first, and the winner.
func ranking(doc rescoreDoc) []int {
	var out []int
	for _, r := range doc.Trials {
		if r.NewRank > 0 {
			out = append(out, r.Trial)
		}
	}
	return out
}

func TestRescoreStricterSLOChangesRanking(t *testing.T) {
	db := seedStudy(t, t.TempDir(), rankingTrials, nil)

	// Under the run's SLO (TTFT p99 < 2 s) fast wins; rescoring with the
	// same SLO reproduces the stored ranking.
	same := rescoreJSON(t, "--storage", db, "--slo", "ttft p99 < 2s")
	if got := ranking(same); fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("same SLO: ranking %v, want [0 1 2]", got)
	}
	for _, r := range same.Trials {
		if r.OldRank != r.NewRank || r.OldScore == nil || *r.OldScore != r.NewScore {
			t.Errorf("same SLO changed trial %d: %+v", r.Trial, r)
		}
	}
	if same.Score.Concurrency != 64 {
		t.Errorf("rescore read concurrency %d, want the run's 64 (from its score reasons)", same.Score.Concurrency)
	}

	// TTFT p99 < 1 s: fast's tail (p99 ~1.59 s) now misses; steady wins.
	strict := rescoreJSON(t, "--storage", db, "--slo", "ttft p99 < 1s")
	if got := ranking(strict); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("strict SLO: ranking %v, want [1 2]", got)
	}
	for _, r := range strict.Trials {
		if r.Trial == 0 && (r.NewOK || r.OldRank != 1 || !strings.Contains(r.Reason, "ttft p99")) {
			t.Errorf("fast under ttft p99 < 1s: %+v", r)
		}
	}

	// Goodput from the per-request records: under TTFT < 1 s (each request
	// its own), fast keeps only the requests below 1 s, about 57% of its
	// tokens (1,143 tok/s); steady keeps all of its 1,800.
	good := rescoreJSON(t, "--storage", db, "--metric", "goodput", "--slo", "ttft p99 < 1s")
	if got := ranking(good); fmt.Sprint(got) != "[1 2 0]" {
		t.Fatalf("goodput: ranking %v, want [1 2 0]", got)
	}
	for _, r := range good.Trials {
		if r.Trial == 0 && (r.NewScore < 1000 || r.NewScore > 1300) {
			t.Errorf("fast's goodput %.1f, want about 1,143 (37 of 64 requests within 1 s)", r.NewScore)
		}
		if r.Requests != 64 {
			t.Errorf("trial %d: %d request records read, want 64", r.Trial, r.Requests)
		}
	}

	// The table names the new winner beside the old one.
	code, out := cli(t, nil, nil, "rescore", "--storage", db, "--slo", "ttft p99 < 1s")
	if code != 0 || !strings.Contains(out, "winner: trial 1 (the study declared trial 0)") || !strings.Contains(out, "NEW  OLD  TRIAL") {
		t.Errorf("rescore table: exit %d\n%s", code, out)
	}
}

// A config the study confirmed ranks on its runs pooled, as its winner was
// declared: fast's single 2,000 does not beat steady's confirmed 1,850,
// and solo's single 1,870, measured once, is not declared over it.
func TestRescorePoolsConfirmationRuns(t *testing.T) {
	zero, one := 0, 1
	trials := []fakeTrial{
		{name: "fast", tokS: 2000, ttftLo: 0.2, ttftHi: 1.6},
		{name: "steady", tokS: 1800, ttftLo: 0.2, ttftHi: 0.6},
		{name: "solo", tokS: 1870, ttftLo: 0.2, ttftHi: 0.6},
		{name: "fast again", tokS: 1500, ttftLo: 0.2, ttftHi: 0.6, rerunOf: &zero},
		{name: "steady again", tokS: 1900, ttftLo: 0.2, ttftHi: 0.6, rerunOf: &one},
	}
	winner := storedWinner(t, "best pooled", confirmed(0, [2]float64{1, 1800}, [2]float64{4, 1900}),
		confirmed(0, [2]float64{0, 2000}, [2]float64{3, 1500}))
	db := seedStudy(t, t.TempDir(), trials, map[string]string{storage.AttrWinner: winner})

	same := rescoreJSON(t, "--storage", db, "--slo", "ttft p99 < 2s")
	if got := ranking(same); fmt.Sprint(got) != "[1 2 0]" {
		t.Fatalf("same SLO: ranking %v, want [1 2 0] (the declared winner, then configs by score, pooled)", got)
	}
	for _, r := range same.Trials {
		want := map[int]string{0: "[0 3] 1750 500", 1: "[1 4] 1850 100", 2: "[] 1870 0"}[r.Trial]
		if got := fmt.Sprintf("%v %.0f %.0f", r.Runs, r.NewScore, r.Spread); got != want || r.OldScore == nil || *r.OldScore != r.NewScore || r.OldRank != r.NewRank {
			t.Errorf("trial %d: runs, pooled score and spread %q, want %q; %+v", r.Trial, got, want, r)
		}
		if wantReqs := 64 * max(1, len(r.Runs)); r.Requests != wantReqs {
			t.Errorf("trial %d: %d request records read, want %d", r.Trial, r.Requests, wantReqs)
		}
	}

	// Under TTFT p99 < 1 s fast's first run misses: it counts 0 in the
	// pool, and one run met measures no spread.
	strict := rescoreJSON(t, "--storage", db, "--slo", "ttft p99 < 1s")
	for _, r := range strict.Trials {
		if r.Trial == 0 && (!r.NewOK || r.NewScore != 750 || r.Spread != 0 || r.Met != 1 || !strings.Contains(r.Reason, "1 of 2 runs miss")) {
			t.Errorf("fast under ttft p99 < 1s: want pooled 750, spread 0, with one run missing; %+v", r)
		}
	}

	code, out := cli(t, nil, nil, "rescore", "--storage", db, "--slo", "ttft p99 < 2s")
	for _, want := range []string{"3 configs (5 trials) rescored",
		"winner unchanged: trial 1: tie within the measured spread",
		"not declared: trial 2 (1870.0), above the winner in one run, measured once"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("rescore table: exit %d, lacks %q\n%s", code, want, out)
		}
	}
}

// TestRescoreDeclaresAsTheStudy: rescore declares its winner by the rule
// the study declared its own (search.Declare), so the study's own score
// names the study's winner. Busy and plain were confirmed and tie within
// plain's spread, 0.8% apart; plain changes fewer flags and won. Lucky's single run
// is above both but was never measured again.
func TestRescoreDeclaresAsTheStudy(t *testing.T) {
	busy, plain := 0, 1
	trials := []fakeTrial{
		{name: "busy", tokS: 1900, ttftLo: 0.2, ttftHi: 0.6},
		{name: "plain", tokS: 1800, ttftLo: 0.2, ttftHi: 0.6},
		{name: "lucky", tokS: 2000, ttftLo: 0.1, ttftHi: 0.3},
		{name: "busy again", tokS: 1830, ttftLo: 0.2, ttftHi: 0.6, rerunOf: &busy},
		{name: "plain again", tokS: 1900, ttftLo: 0.2, ttftHi: 0.9, rerunOf: &plain},
	}
	const plainFlags, busyFlags = 2, 8
	cands := []search.Candidate{confirmed(plainFlags, [2]float64{1, 1800}, [2]float64{4, 1900}),
		confirmed(busyFlags, [2]float64{0, 1900}, [2]float64{3, 1830})}
	declared, ok := search.Declare(cands)
	if !ok || declared.Trial != plain {
		t.Fatalf("fixture: the study declares %+v, want plain (trial %d)", declared, plain)
	}
	db := seedStudy(t, t.TempDir(), trials, map[string]string{storage.AttrWinner: storedWinner(t, declared.Reason, cands...)})

	code, out := cli(t, nil, nil, "best", "--storage", db, "--json")
	var best struct {
		Number int `json:"number"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &best) != nil || best.Number != plain {
		t.Fatalf("best: exit %d, want trial %d\n%s", code, plain, out)
	}
	for _, tt := range []struct {
		name, slo string
		winner    int
		ranking   string
		say       []string
	}{
		{"the study's own score names its winner", "ttft p99 < 2s", plain, "[1 2 0]",
			[]string{"winner unchanged: trial 1: " + declared.Reason, "not declared: trial 2 (2000.0)"}},
		// Plain's rerun (TTFT p99 0.89 s) misses: it counts 0 in plain's
		// mean but measures no spread, so plain, at half of busy, does not
		// tie with it on a spread of its whole score.
		{"a run that misses is no 0 in the spread", "ttft p99 < 0.8s", busy, "[0 2 1]",
			[]string{"winner: trial 0 (the study declared trial 1): best pooled score 1865.0 over 2 runs; the next, trial 1's 900.0",
				"1 of 2 runs meet"}},
		{"no confirmed config meets: the best single run", "ttft p99 < 0.5s", 2, "[2]",
			[]string{"winner: trial 2 (the study declared trial 1): no config the study confirmed meets the new score"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc := rescoreJSON(t, "--storage", db, "--slo", tt.slo)
			if got := ranking(doc); fmt.Sprint(got) != tt.ranking || doc.Winner == nil || *doc.Winner != tt.winner {
				t.Errorf("ranking %v winner %v, want %s with trial %d first", got, doc.Winner, tt.ranking, tt.winner)
			}
			for _, r := range doc.Trials {
				// The old ranking starts with the trial the study declared.
				if (r.OldRank == 1) != (r.Trial == plain) {
					t.Errorf("trial %d: old rank %d; the study declared trial %d", r.Trial, r.OldRank, plain)
				}
			}
			code, out := cli(t, nil, nil, "rescore", "--storage", db, "--slo", tt.slo)
			for _, want := range tt.say {
				if code != 0 || !strings.Contains(out, want) {
					t.Errorf("exit %d, lacks %q\n%s", code, want, out)
				}
			}
		})
	}
}

func TestRescoreUsesStoredSpec(t *testing.T) {
	spec := `{"metric":"output_tok_s","concurrency":64,"slo":[{"metric":"ttft","percentile":"p99","max_s":0.5}]}`
	db := seedStudy(t, t.TempDir(), rankingTrials, map[string]string{attrScoreSpec: spec})
	// Only --concurrency given: the stored SLO (p99 < 0.5 s) holds, so
	// only slow (p99 0.3 s) counts.
	doc := rescoreJSON(t, "--storage", db, "--concurrency", "64")
	if got := ranking(doc); fmt.Sprint(got) != "[2]" {
		t.Errorf("stored SLO: ranking %v, want [2]", got)
	}
	// --slo none drops it: throughput alone.
	doc = rescoreJSON(t, "--storage", db, "--slo", "none")
	if got := ranking(doc); fmt.Sprint(got) != "[0 1 2]" {
		t.Errorf("no SLO: ranking %v, want [0 1 2]", got)
	}
}

func TestRescoreBadInput(t *testing.T) {
	db := seedStudy(t, t.TempDir(), rankingTrials[:1], nil)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--slo", "ttft p99 under 1s"}, "want METRIC STAT < VALUE"},
		{[]string{"--slo", "tpot p99 < 1s"}, "valid: ttft, latency, itl"},
		{[]string{"--slo", "ttft p95 < 1s"}, "valid: mean, p50, p90, p99"},
		{[]string{"--slo", "ttft p99 < 0s"}, "positive"},
		{[]string{"--metric", "speed"}, "want output_tok_s, goodput, capacity or max_rate"},
		{[]string{"--metric", "goodput", "--slo", "itl p99 < 0.05s"}, "inter-token latency"},
		{nil, "say what to change"},
		{[]string{"--concurrency", "32"}, "--concurrency 32: not a measured level; valid: one of [64], or 0 for the highest"},
		{[]string{"--slo", "ttft p99 < 1s", "--study", "nope"}, `no study "nope"`},
	} {
		code, out := cli(t, nil, nil, append([]string{"rescore", "--storage", db}, tt.args...)...)
		if code != exitUsage || !strings.Contains(out, tt.want) {
			t.Errorf("rescore %q: exit %d, want 2 with %q:\n%s", tt.args, code, tt.want, out)
		}
	}
	code, out := cli(t, nil, nil, "rescore", "--storage", filepath.Join(t.TempDir(), "none.db"), "--slo", "ttft p99 < 1s")
	if code != exitUsage || !strings.Contains(out, "no storage") {
		t.Errorf("missing storage: exit %d\n%s", code, out)
	}
}

func TestParseSLO(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want objective.SLO
	}{
		{"ttft p99 < 1s", objective.SLO{Metric: "ttft", Percentile: "p99", Max: 1}},
		{"TTFT P90<=250ms", objective.SLO{Metric: "ttft", Percentile: "p90", Max: 0.25}},
		{"latency median < 20", objective.SLO{Metric: "latency", Percentile: "p50", Max: 20}},
		{" itl mean ≤ 0.05s ", objective.SLO{Metric: "itl", Percentile: "mean", Max: 0.05}},
		{"ttft p99 < 1e-1s", objective.SLO{Metric: "ttft", Percentile: "p99", Max: 0.1}},
	} {
		got, err := parseSLO(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseSLO(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "ttft", "ttft p99", "ttft p99 > 1s", "ttft p99 < -1s", "ttft p99 < 1h", "ttft p99 < 1s extra", "ttft p99 < 0ms"} {
		if _, err := parseSLO(bad); err == nil {
			t.Errorf("parseSLO(%q) accepted", bad)
		}
	}
}

// FuzzParseSLO: any text either fails cleanly or gives a valid SLO that
// prints back (as rescore shows it) to the same SLO.
func FuzzParseSLO(f *testing.F) {
	for _, s := range []string{"ttft p99 < 1s", "latency p50 <= 250ms", "itl mean < 0.05", "ttft p99 < 1e309", "x y < .5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := parseSLO(s)
		if err != nil {
			return
		}
		if err := (objective.ScoreSpec{SLO: []objective.SLO{o}}).Validate(); err != nil {
			t.Fatalf("parseSLO(%q) = %+v, which the score rejects: %v", s, o, err)
		}
		back, err := parseSLO(sloList([]objective.SLO{o}))
		if err != nil || back != o {
			t.Fatalf("parseSLO(%q) = %+v prints as %q, which reads back as %+v, %v", s, o, sloList([]objective.SLO{o}), back, err)
		}
	})
}

package report

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/sgtune/sgtune/objective"
)

func fptr(x float64) *float64 { return &x }

// fixture is a small study with every kind of trial the report shows.
func fixture() Study {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	exit := -6
	trials := []Trial{
		{Number: 0, State: "complete", Score: fptr(1419.3), ScoreOK: true, Params: map[string]interface{}{"ep": "1", "mem_fraction": 0.85},
			Levels: []Level{{1, 3, 107, 0.15, 0.16, 2.4}, {64, 3, 1419.3, 1.0, 1.9, 19.2}}, Seconds: 300, Launched: true,
			Start: t0, End: t0.Add(300 * time.Second), Baseline: true},
		{Number: 1, State: "infeasible", Class: "limits_reduced", Reason: "256 // 5 = 51 < 64", Params: map[string]interface{}{"ep": "4", "mem_fraction": 0.78},
			Start: t0.Add(301 * time.Second), End: t0.Add(301 * time.Second)},
		{Number: 2, State: "failed", Class: "illegal_memory_access", Reason: "RuntimeError: CUDA error | an illegal memory access",
			Params: map[string]interface{}{"ep": "4", "mem_fraction": 0.85}, ExitCode: &exit, Launched: true, Seconds: 80,
			LogExcerpt: "Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access was encountered <script>",
			LogPath:    "sgtune-logs/glm/trial-2.log", LogError: "launcher: write log: write sgtune-logs/glm/trial-2.log: no space left on device",
			Start: t0.Add(302 * time.Second), End: t0.Add(382 * time.Second)},
		{Number: 3, State: "complete", Score: fptr(1865.9), ScoreOK: true, Params: map[string]interface{}{"ep": "4", "mem_fraction": 0.85},
			Flags:  []string{"--model-path", "m", "--ep-size", "4", "--mem-fraction-static", "0.85"},
			Levels: []Level{{1, 3, 107.4, 0.15, 0.16, 2.4}, {64, 3, 1865.9, 1.1, 1.6, 9.9}}, Seconds: 310, Launched: true,
			Start: t0.Add(400 * time.Second), End: t0.Add(710 * time.Second)},
		{Number: 4, State: "complete", Score: fptr(1900), ScoreOK: false, Reason: "concurrency 64: ttft p99 9.100 s > 2.000 s",
			Params: map[string]interface{}{"ep": "4", "mem_fraction": 0.78}, Levels: []Level{{64, 3, 1900, 3, 9.1, 30}}, Seconds: 290, Launched: true,
			Start: t0.Add(720 * time.Second), End: t0.Add(1010 * time.Second)},
		{Number: 5, State: "complete", Score: fptr(1820.4), ScoreOK: true, Params: map[string]interface{}{"ep": "4", "mem_fraction": 0.78},
			Levels: []Level{{1, 3, 104, 0.14, 0.15, 2.5}, {64, 3, 1820.4, 0.9, 1.2, 10.4}}, Seconds: 305, Launched: true,
			LogPath: "sgtune-logs/glm/trial-5.log", LogError: "launcher: close log: close sgtune-logs/glm/trial-5.log: input/output error",
			Start: t0.Add(1020 * time.Second), End: t0.Add(1325 * time.Second)},
	}
	best := trials[3]
	return Study{Name: "glm", Storage: "glm.db", Trials: trials, Best: &best, Budget: 8,
		Score: "output tok/s at c=64 with ttft p99 < 2s", ScoreConcurrency: 64,
		Confirmations: []Confirmation{
			{Trial: 5, Scores: []float64{1820.4, 1801, 1790}, Pooled: 1803.8, Spread: 30.4},
			{Trial: 3, Scores: []float64{1865.9, 1840, 1851}, Pooled: 1852.3, Spread: 25.9},
			{Trial: 0, Scores: []float64{1419.3, 1402, 1411}, Pooled: 1410.8, Spread: 17.3},
		},
		VersusDefault: "1.31× the engine default, pooled over 3 runs each (trial 0: pooled 1410.8)",
		DefaultGain:   1852.3 / 1410.8,
		Generated:     time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
}

// golden compares got with testdata/report/NAME (rewritten with -update).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "report", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (go test ./report -update rewrites it after a deliberate change):\n%s", name, path, got)
	}
}

func TestWriteReportGolden(t *testing.T) {
	dir := t.TempDir()
	if err := WriteReport(dir, fixture()); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "index.html.golden", page)
	golden(t, "report.md.golden", md)

	// Same input, same bytes: nothing in the output depends on the clock
	// or on map order.
	dir2 := t.TempDir()
	if err := WriteReport(dir2, fixture()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"index.html", "report.md", "pareto.svg", "effect-ep.svg"} {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, _ := os.ReadFile(filepath.Join(dir2, f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs on the same study", f)
		}
	}
}

var srcRE = regexp.MustCompile(`(?:src|href)="([^"]*)"`)

// TestWriteReportStructure checks what the page must hold, independent of
// layout: the plots it references exist beside it, nothing is fetched
// from the network, the table, the verdicts, the failures and the tie.
func TestWriteReportStructure(t *testing.T) {
	dir := t.TempDir()
	if err := WriteReport(dir, fixture()); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	svgs := 0
	for _, m := range srcRE.FindAllStringSubmatch(string(page), -1) {
		ref := m[1]
		if strings.HasPrefix(ref, "data:") {
			continue
		}
		if strings.Contains(ref, "//") {
			t.Errorf("the page references the network: %s", ref)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ref))
		if err != nil {
			t.Errorf("the page references %s: %v", ref, err)
			continue
		}
		if strings.HasSuffix(ref, ".svg") && bytes.Contains(b, []byte("<svg")) {
			svgs++
		}
	}
	if svgs < 4 {
		t.Errorf("the page shows %d SVG plots, want at least 4", svgs)
	}
	for _, want := range []string{
		`<table class="sortable" id="trials">`,
		`<span class="st st-infeasible">infeasible</span>`,
		`misses: concurrency 64: ttft p99 9.100 s &gt; 2.000 s`,
		`illegal_<wbr>memory_<wbr>access`,
		`RuntimeError: CUDA error: an illegal memory access was encountered &lt;script&gt;`, // log lines escaped
		`src="effect-ep.svg"`, `src="effect-mem_fraction.svg"`, `src="pareto.svg"`,
		`5 of 8 launches`,
		`<h2>Confirmation reruns</h2>`,
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	// The top two pooled scores differ by 50, more than either spread.
	if strings.Contains(string(page), "Tie within") {
		t.Error("the page calls a 50-point gap with a 30.4 spread a tie")
	}
	if strings.Contains(string(page), "<script src") || strings.Contains(string(page), "<link rel=\"stylesheet\"") {
		t.Error("the page loads a script or stylesheet from a file")
	}
}

func TestTieWithinSpread(t *testing.T) {
	for _, tt := range []struct {
		a, b   Confirmation
		tie    bool
		reason string
	}{
		{Confirmation{Trial: 3, Pooled: 1851, Spread: 60}, Confirmation{Trial: 5, Pooled: 1801, Spread: 20}, true, "gap 50 < spread 60"},
		{Confirmation{Trial: 3, Pooled: 1851, Spread: 20}, Confirmation{Trial: 5, Pooled: 1801, Spread: 30}, false, "gap 50 > spread 30"},
		{Confirmation{Trial: 3, Pooled: 1801, Spread: 10}, Confirmation{Trial: 5, Pooled: 1851, Spread: 55}, true, "order of the input does not matter"},
	} {
		v := buildView(Study{Confirmations: []Confirmation{tt.a, tt.b}})
		if (v.Tie != "") != tt.tie {
			t.Errorf("%s: tie %q", tt.reason, v.Tie)
		}
		if v.Confirm[0].Pooled != formatScore(1851) {
			t.Errorf("%s: confirmations not best first: %+v", tt.reason, v.Confirm)
		}
	}
}

// The confirmation card shows the declared winner's spread, the one best,
// status and export print, not that of the config with the best pooled
// score: a tie can go to another (demo: trial 3 pooled best, trial 4 won
// on fewer flags).
func TestConfirmationCardShowsWinner(t *testing.T) {
	st := fixture()
	st.Confirmations = []Confirmation{
		{Trial: 3, Scores: []float64{1865.9, 1800}, Pooled: 1833, Spread: 65.9},
		{Trial: 5, Scores: []float64{1820.4, 1801, 1790}, Pooled: 1803.8, Spread: 30.4},
	}
	for _, tt := range []struct {
		name   string
		winner int
		card   string
	}{
		{"the winner pooled best", 3, `<div class="v">spread 65.9 (3.6%)</div><div class="s">the winner's 2 runs; 2 configs rerun; a tie at the top</div>`},
		{"a tie went to the simpler config", 5, `<div class="v">spread 30.4 (1.7%)</div><div class="s">the winner's 3 runs; 2 configs rerun; a tie at the top</div>`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := st
			i := slices.IndexFunc(st.Trials, func(x Trial) bool { return x.Number == tt.winner })
			st.Best = &st.Trials[i]
			var page bytes.Buffer
			if err := writeHTML(&page, buildView(st)); err != nil {
				t.Fatal(err)
			}
			card := regexp.MustCompile(`<div class="k">Confirmation</div>.*`).FindString(page.String())
			if card != `<div class="k">Confirmation</div>`+tt.card+`</div>` {
				t.Errorf("confirmation card:\n got %s\nwant %s", card, tt.card)
			}
		})
	}
}

// A run that missed the SLO shows as missed in the confirmation table, not
// as a measured 0.
func TestConfirmRowMissedRun(t *testing.T) {
	v := buildView(Study{Confirmations: []Confirmation{
		{Trial: 2, Scores: []float64{1800, 0, 1820}, Met: []bool{true, false, true}, Pooled: 1206.7, Spread: 20},
		{Trial: 3, Scores: []float64{1700, 1710}, Pooled: 1705, Spread: 10}, // stored before Met: every run met
	}})
	want := map[int]string{2: "1,800 / missed / 1,820", 3: "1,700 / 1,710"}
	for _, r := range v.Confirm {
		if r.Scores != want[r.Trial] {
			t.Errorf("trial %d: scores %q, want %q", r.Trial, r.Scores, want[r.Trial])
		}
	}
}

// Every config tied with the best is named, as the study declares: a
// review's report named the top two and left out the declared winner,
// trial 4, tied with the best through its own wider spread.
func TestTieNamesEveryTiedConfig(t *testing.T) {
	v := buildView(Study{Confirmations: []Confirmation{
		{Trial: 4, Pooled: 34557.2, Spread: 2129.8},
		{Trial: 3, Pooled: 36046.3, Spread: 860.4},
		{Trial: 2, Pooled: 35277.1, Spread: 500},
		{Trial: 7, Pooled: 30000, Spread: 900},
	}})
	want := "Tie within the measured spread: trial 2 (35,277) and trial 4 (34,557) lie below the best pooled score, trial 3's 36,046, by less than the spread (up to 2,130); no measured difference between them."
	if v.Tie != want {
		t.Errorf("tie:\n got %q\nwant %q", v.Tie, want)
	}
}

// Confirmation reruns are not ranked beside their config's first run, and a
// confirmed config ranks by its pooled score.
func TestRankingLeavesOutReruns(t *testing.T) {
	score := func(v float64) *float64 { return &v }
	first := 0
	trials := []Trial{
		{Number: 0, State: "complete", ScoreOK: true, Score: score(100)},
		{Number: 1, State: "complete", ScoreOK: true, Score: score(120)},
		{Number: 2, State: "complete", ScoreOK: true, Score: score(130), ConfirmOf: &first},
	}
	if got := rankComplete(trials, nil, -1); len(got) != 2 || got[0].Number != 1 || got[1].Number != 0 {
		t.Errorf("ranked %+v, want trials 1 then 0", got)
	}
	// Confirmed, trial 0 pools 100 and 130 to 115 and trial 1 (measured
	// once, 120) stays ahead; pooled 125 would put trial 0 first.
	for _, tc := range []struct {
		pooled float64
		first  int
	}{{115, 1}, {125, 0}} {
		got := rankComplete(trials, []Confirmation{{Trial: 0, Scores: []float64{100, 130}, Pooled: tc.pooled}}, -1)
		if len(got) != 2 || got[0].Number != tc.first {
			t.Errorf("pooled %v: ranked %+v, want trial %d first", tc.pooled, got, tc.first)
		}
	}
	// The declared winner ranks first even below a config it tied with
	// (the tie went to it, the simpler config).
	if got := rankComplete(trials, nil, 0); len(got) != 2 || got[0].Number != 0 || got[1].Number != 1 {
		t.Errorf("winner 0: ranked %+v, want trials 0 then 1", got)
	}
}

func TestParetoFront(t *testing.T) {
	pts := []paretoPoint{
		{Trial: 0, OutputTokS: 100, TTFTP99: 1.0},
		{Trial: 1, OutputTokS: 120, TTFTP99: 2.0},
		{Trial: 2, OutputTokS: 90, TTFTP99: 1.5},  // beaten by 0 on both
		{Trial: 3, OutputTokS: 120, TTFTP99: 2.5}, // beaten by 1 on latency
		{Trial: 4, OutputTokS: 80, TTFTP99: 0.5},
	}
	paretoFront(pts)
	want := map[int]bool{0: true, 1: true, 2: false, 3: false, 4: true}
	for _, p := range pts {
		if p.Front != want[p.Trial] {
			t.Errorf("trial %d: front %v, want %v", p.Trial, p.Front, want[p.Trial])
		}
	}
}

// matrixPoints is a seed-004-like matrix: two contexts, three levels, the
// largest cell over capacity and one queued.
func matrixPoints() []objective.Point {
	dec := func(ctx, c int, status string, tokS, ttft float64) objective.Point {
		return objective.Point{Phase: objective.PhaseDecode, Context: ctx, Concurrency: c, Status: status, State: "passed",
			OutputTokS: tokS, TTFT: objective.Stats{P50: ttft}}
	}
	return []objective.Point{
		{Phase: objective.PhasePrefill, Context: 8192, Concurrency: 1, Status: objective.StatusValid, PromptTokS: 9232, TTFT: objective.Stats{P50: 0.888}},
		{Phase: objective.PhasePrefill, Context: 1043456, Concurrency: 1, Status: objective.StatusValid, PromptTokS: 8387, TTFT: objective.Stats{P50: 122.2}},
		dec(8192, 1, objective.StatusValid, 190.7, 0.122), dec(8192, 2, objective.StatusValid, 267.4, 0.178),
		dec(8192, 4, objective.StatusNotRun, 0, 0),
		dec(1043456, 1, objective.StatusValid, 154.5, 2.345), dec(1043456, 2, objective.StatusQueued, 224.9, 4.745),
		dec(1043456, 4, objective.StatusOverCapacity, 0, 0),
	}
}

func TestMatrixTable(t *testing.T) {
	st := Study{Name: "m", Trials: []Trial{{Number: 0, State: "complete", Score: fptr(190.7), ScoreOK: true, Points: matrixPoints()}}}
	st.Best = &st.Trials[0]
	dir := t.TempDir()
	if err := WriteReport(dir, st); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{
		"| context | prefill | 1 | 2 | 4 |",
		"| 8K | 9,232 prompt tok/s (888 ms TTFT) | 190.7 tok/s (122 ms TTFT) | 267.4 tok/s (178 ms TTFT) | Not run |",
		"| 1019K | 8,387 prompt tok/s (122.20 s TTFT) | 154.5 tok/s (2.35 s TTFT) | 224.9 tok/s (Requests queued · 4.75 s TTFT) | Over capacity |",
		// The scored row (smallest context) gives the throughput plot.
		"![Output tok/s by concurrency for the top trials](throughput.svg)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	page, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if !strings.Contains(string(page), `<td class="num c-over">Over capacity</td>`) {
		t.Errorf("index.html has no Over capacity cell")
	}
	// A chat study has no matrix section.
	if err := WriteReport(dir, fixture()); err != nil {
		t.Fatal(err)
	}
	page, _ = os.ReadFile(filepath.Join(dir, "index.html"))
	if strings.Contains(string(page), "Context ×") {
		t.Error("a chat study shows a matrix table")
	}
}

func TestWriteReportEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := WriteReport(dir, Study{Name: "empty"}); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "No trial was measured yet.") {
		t.Errorf("empty study report:\n%s", md)
	}
	// With a failure, it is the SLO and gates that nothing met.
	var failed bytes.Buffer
	writeMarkdown(&failed, buildView(Study{Name: "f", Trials: []Trial{{Number: 0, State: "failed", Class: "oom"}}}))
	if !strings.Contains(failed.String(), "No trial met the score's SLO and quality gates.") {
		t.Errorf("report of a failed study:\n%s", failed.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "throughput.svg")); !os.IsNotExist(err) {
		t.Error("a plot was drawn without data")
	}
	if _, err := os.Stat(filepath.Join(dir, "index.html")); err != nil {
		t.Errorf("no page for an empty study: %v", err)
	}
}

// TestWriteReportDropsStalePlots: plots a report written into the same
// directory before drew, and this one does not, are removed; other files
// stay.
func TestWriteReportDropsStalePlots(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"effect-ep.svg", "throughput.svg", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("<svg/>"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteReport(dir, Study{Name: "empty"}); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{"effect-ep.svg": false, "throughput.svg": false, "notes.txt": true} {
		if _, err := os.Stat(filepath.Join(dir, f)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", f, err == nil, want)
		}
	}
}

// TestReportInChromium renders the page in headless Chromium through
// scripts/report-check.sh and checks that the check fails on a broken page.
// CI installs chromium; without it the test is skipped.
func TestReportInChromium(t *testing.T) {
	if chromium() == "" {
		t.Skip("chromium not on PATH (Debian: apt-get install -y chromium)")
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "report-check.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteReport(dir, fixture()); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(dir, "page.png")
	out, err := exec.Command("bash", script, dir, png).CombinedOutput()
	if err != nil {
		t.Fatalf("report-check on a good page: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("no PNG written: %v", err)
	}

	// A page with a script error and a missing plot must fail the check.
	bad := t.TempDir()
	page := `<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>` +
		`<img src="missing.svg"><script>undefinedFunction();</script></body></html>`
	if err := os.WriteFile(filepath.Join(bad, "index.html"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command("bash", script, bad, filepath.Join(bad, "p.png")).CombinedOutput()
	if err == nil {
		t.Fatalf("report-check passed a broken page:\n%s", out)
	}
	for _, want := range []string{"console errors", "undefinedFunction", "missing file: missing.svg"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("report-check output lacks %q:\n%s", want, out)
		}
	}
}

// chromium returns the browser's path, "" when none is installed.
func chromium() string {
	for _, c := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	return ""
}

var rowRE = regexp.MustCompile(`<tr(?: class="best")?><td class="num" data-v="(\d+)">`)

// TestTableSortsInChromium clicks the score header in a real browser and
// reads the row order back from the DOM.
func TestTableSortsInChromium(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("chromium not on PATH (Debian: apt-get install -y chromium)")
	}
	dir := t.TempDir()
	if err := WriteReport(dir, fixture()); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		clicks int
		want   string
	}{
		{0, "0 1 2 3 4 5"},
		{1, "0 5 3 4 1 2"}, // ascending; trials without a score last
		{2, "4 3 5 0 1 2"}, // descending; still last
	} {
		click := strings.Repeat(`document.querySelectorAll("#trials th")[2].click();`, tt.clicks)
		probe := strings.Replace(string(page), "</body>", "<script>"+click+"</script></body>", 1)
		path := filepath.Join(dir, "probe.html")
		if err := os.WriteFile(path, []byte(probe), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir="+t.TempDir(), "--dump-dom", "file://"+path)
		dom, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom: %v", err)
		}
		var order []string
		for _, m := range rowRE.FindAllStringSubmatch(string(dom), -1) {
			order = append(order, m[1])
		}
		if got := strings.Join(order, " "); got != tt.want {
			t.Errorf("after %d clicks on score: rows %q, want %q", tt.clicks, got, tt.want)
		}
	}
}

// A confirmation run is marked in the trials table with the trial it
// measured again.
func TestReportMarksReruns(t *testing.T) {
	st := fixture()
	three := 3
	rerun := st.Trials[3]
	rerun.Number, rerun.ConfirmOf, rerun.Launched = 6, &three, false // as the CLI reads a rerun: outside the budget
	st.Trials = append(st.Trials, rerun)
	var b strings.Builder
	if err := writeHTML(&b, buildView(st)); err != nil {
		t.Fatal(err)
	}
	if want := `6 <span class="rerun" title="confirmation run: trial 3's config measured again">↻3</span>`; !strings.Contains(b.String(), want) {
		t.Errorf("page lacks %q", want)
	}
	if n := strings.Count(b.String(), `class="rerun"`); n != 1 {
		t.Errorf("%d rows marked as reruns, want 1", n)
	}
	// The budget card and report.md count the rerun apart from the
	// search's launches.
	if want := "search launches (interrupted ones are re-run); and 1 confirmation reruns"; !strings.Contains(b.String(), want) {
		t.Errorf("page lacks %q", want)
	}
	var md bytes.Buffer
	writeMarkdown(&md, buildView(st))
	if want := "5 of 8 search launches and 1 confirmation reruns;"; !strings.Contains(md.String(), want) {
		t.Errorf("report.md lacks %q:\n%.300s", want, md.String())
	}
}

// report.md's trial table names the trial a confirmation rerun measured
// again, as the page's ↻ marker does.
func TestMarkdownNamesReruns(t *testing.T) {
	score := func(v float64) *float64 { return &v }
	first := 0
	var md bytes.Buffer
	writeMarkdown(&md, buildView(Study{Name: "s", Trials: []Trial{
		{Number: 0, State: "complete", ScoreOK: true, Score: score(100)},
		{Number: 1, State: "complete", ScoreOK: true, Score: score(130), ConfirmOf: &first},
	}}))
	if want := "| 1 | complete | 130.00 | confirms trial 0 |"; !strings.Contains(md.String(), want) {
		t.Errorf("report.md lacks %q:\n%s", want, md.String())
	}
}

// A queued re-run (no config yet) adds no "(unset)" value to the effect
// plots, and report.md says which trial it re-runs.
func TestQueuedRetryInReport(t *testing.T) {
	score, one := 100.0, 1
	trials := []Trial{
		{Number: 0, State: "complete", ScoreOK: true, Score: &score, Params: map[string]interface{}{"ep": "4"}},
		{Number: 1, State: "interrupted", Params: map[string]interface{}{"ep": "4"}},
		{Number: 2, State: "waiting", Params: map[string]interface{}{}, RetryOf: &one},
	}
	if got := paramValues("ep", trials); len(got) != 1 || got[0] != "4" {
		t.Errorf("ep values %q, want [4]", got)
	}
	var md bytes.Buffer
	writeMarkdown(&md, buildView(Study{Name: "s", Trials: trials}))
	if !strings.Contains(md.String(), "| 2 | waiting | - | retry of trial 1 |") {
		t.Errorf("report.md does not name the retry:\n%s", md.String())
	}
}

// With one measured trial the plots keep their axes sensible: no trial
// axis labelled 0.5, no TTFT axis running below zero, the point off the
// frame.
func TestPlotsOfOneTrial(t *testing.T) {
	score := 34021.0
	trials := []Trial{{Number: 1, State: "complete", ScoreOK: true, Score: &score}}
	p, err := progressPlot(trials, scoreLabel("output tok/s"))
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	if p.Y.Label.Text != "score (output tok/s)" {
		t.Errorf("score axis labelled %q", p.Y.Label.Text)
	}
	if p.X.Min >= 1 || p.X.Max <= 1 {
		t.Errorf("trial axis %v..%v puts trial 1 on the frame", p.X.Min, p.X.Max)
	}
	for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		if tk.Label != "" && tk.Value != math.Trunc(tk.Value) {
			t.Errorf("trial axis labels %q at %v", tk.Label, tk.Value)
		}
	}
	q, err := paretoPlot([]paretoPoint{{Trial: 1, OutputTokS: 35300, TTFTP99: 0.115, OK: true, Front: true}}, "")
	if err != nil || q == nil {
		t.Fatal(q, err)
	}
	if q.Y.Min < 0 || q.X.Min < 0 {
		t.Errorf("axes start below zero: x %v, y %v", q.X.Min, q.Y.Min)
	}
}

// A pruned trial shows in the effect plots, in the band below the lowest
// score (they left its values out, and a value only pruned trials had was
// an empty tick).
func TestEffectPlotShowsPruned(t *testing.T) {
	score := 100.0
	trials := []Trial{
		{Number: 0, State: "complete", ScoreOK: true, Score: &score, Params: map[string]interface{}{"speculative": "EAGLE"}},
		{Number: 1, State: "pruned", Params: map[string]interface{}{"speculative": "none"}},
	}
	p, err := effectPlot("speculative", trials, "score")
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	svg := filepath.Join(t.TempDir(), "effect.svg")
	if err := saveSVG(p, 4*vg.Inch, 3*vg.Inch, svg); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), ">pruned<") {
		t.Errorf("the effect plot has no pruned trial (%v)", err)
	}
}

// The HTML trial table says why a trial was pruned (only report.md said
// it) and which trial a queued one retries.
func TestRowSaysPrunedAndRetry(t *testing.T) {
	score, one := 100.0, 1
	trials := []Trial{
		{Number: 0, State: "complete", ScoreOK: true, Score: &score, Params: map[string]interface{}{"ep": "4"}},
		{Number: 1, State: "pruned", Reason: "C16: 2815.8 tok/s < 0.50 x 18112.2", Params: map[string]interface{}{"ep": "1"}},
		{Number: 2, State: "waiting", Params: map[string]interface{}{}, RetryOf: &one},
	}
	v := buildView(Study{Name: "s", Trials: trials})
	for _, tc := range []struct {
		n    int
		want string
	}{
		{1, "pruned: C16: 2815.8 tok/s < 0.50 x 18112.2"},
		{2, "retry of trial 1"},
	} {
		if got := v.row(trials[tc.n]).Verdict; got != tc.want {
			t.Errorf("trial %d: verdict %q, want %q", tc.n, got, tc.want)
		}
	}
}

// A trial whose server log is incomplete (Trial.LogError) says so next to
// its log path: a failure on its own line, any other trial in a list of
// incomplete logs; the error is data, escaped on the page and kept on one
// line in report.md. A whole log adds nothing.
func TestReportShowsLogError(t *testing.T) {
	score := 100.0
	trials := []Trial{
		{Number: 0, State: "complete", ScoreOK: true, Score: &score, Params: map[string]interface{}{"ep": "4"},
			LogPath: "logs/trial-0.log", LogError: "launcher: write log: <b>disk</b> full & gone"},
		{Number: 1, State: "failed", Class: "crash", Reason: "exit 1", Params: map[string]interface{}{"ep": "8"},
			LogPath: "logs/trial-1.log", LogError: "launcher: close log: input/output error\nsecond line"},
		{Number: 2, State: "complete", ScoreOK: true, Score: &score, Params: map[string]interface{}{"ep": "2"},
			LogPath: "logs/trial-2.log"},
		{Number: 3, State: "failed", Class: "crash", Reason: "exit 1", Params: map[string]interface{}{"ep": "1"},
			LogPath: "logs/trial-3.log"},
	}
	v := buildView(Study{Name: "s", Trials: trials})
	var page, md bytes.Buffer
	if err := writeHTML(&page, v); err != nil {
		t.Fatal(err)
	}
	writeMarkdown(&md, v)
	for _, want := range []string{
		`<div>trial 0 · <span class="st st-complete">complete</span> · log logs/trial-0.log (incomplete: launcher: write log: &lt;b&gt;disk&lt;/b&gt; full &amp; gone)</div>`,
		`ep=8 · log logs/trial-1.log (incomplete: launcher: close log: input/output error` + "\n" + `second line)</div>`,
		`ep=1 · log logs/trial-3.log</div>`,
	} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("index.html lacks %q:\n%s", want, page.String())
		}
	}
	if strings.Contains(page.String(), "<b>disk") {
		t.Error("index.html shows the log error unescaped")
	}
	if strings.Contains(page.String(), "trial-2.log") || strings.Count(page.String(), "(incomplete: ") != 2 {
		t.Errorf("index.html names a whole log, or an incomplete one twice:\n%s", page.String())
	}
	for _, want := range []string{
		"- trial 0, complete: log: `logs/trial-0.log` (incomplete: launcher: write log: <b>disk</b> full & gone)\n",
		"\n  log: `logs/trial-1.log` (incomplete: launcher: close log: input/output error second line)\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "trial-2.log") || strings.Contains(md.String(), "trial-3.log") || strings.Count(md.String(), "(incomplete: ") != 2 {
		t.Errorf("report.md names a whole log, or an incomplete one twice:\n%s", md.String())
	}
}

var (
	svgSizeRE = regexp.MustCompile(`<svg width="([0-9.]+)pt" height="([0-9.]+)pt"`)
	svgTextRE = regexp.MustCompile(`<text x="([-0-9.e]+)" y="([-0-9.e]+)" transform="scale\(1, -1\)"\s*style="[^"]*font-size:([0-9.]+)px">([^<]*)</text>`)
	svgLineRE = regexp.MustCompile(`<path d="M([-0-9.e]+),([-0-9.e]+)L([-0-9.e]+),([-0-9.e]+)" style="fill:none;stroke:#000000;stroke-width:0.5" />`)
	legendRE  = regexp.MustCompile(`^(best so far|meets SLO|misses SLO|failed / infeasible|pruned|Pareto front|trial \d+)$`)
)

// TestLegendsBelowAxes: every plot's legend lies below its x axis, inside
// the image, where it covers no data point (gonum draws a legend inside
// the axes, over the points there). The effect plots' four entries do not
// fit one row and wrap.
func TestLegendsBelowAxes(t *testing.T) {
	st := fixture()
	st.Trials = append(st.Trials, Trial{Number: 6, State: "pruned", Reason: "C1: below the best",
		Params: map[string]interface{}{"ep": "1", "mem_fraction": 0.78}})
	dir := t.TempDir()
	if err := WriteReport(dir, st); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		want int // legend entries
	}{{"progress.svg", 3}, {"throughput.svg", 3}, {"ttft-p99.svg", 3}, {"pareto.svg", 3}, {"effect-ep.svg", 4}, {"effect-mem_fraction.svg", 4}} {
		file, want := tc.file, tc.want
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		svg := string(b)
		size := svgSizeRE.FindStringSubmatch(svg)
		if size == nil {
			t.Fatalf("%s: no svg size", file)
		}
		w, h := atof(t, size[1]), atof(t, size[2])
		// The x axis is the longest horizontal black line; y grows upwards
		// in gonum's coordinates (the SVG flips it back).
		axisY, axisLen := 0.0, 0.0
		for _, m := range svgLineRE.FindAllStringSubmatch(svg, -1) {
			x1, y1, x2, y2 := atof(t, m[1]), atof(t, m[2]), atof(t, m[3]), atof(t, m[4])
			if y1 == y2 && x2-x1 > axisLen {
				axisY, axisLen = y1, x2-x1
			}
		}
		if axisLen < w/2 {
			t.Fatalf("%s: no x axis found", file)
		}
		var rows []float64
		n := 0
		for _, m := range svgTextRE.FindAllStringSubmatch(svg, -1) {
			if !legendRE.MatchString(m[4]) {
				continue
			}
			n++
			x, y, size := atof(t, m[1]), -atof(t, m[2]), atof(t, m[3])
			if y+size > axisY {
				t.Errorf("%s: legend %q at y %.1f..%.1f reaches above the x axis at %.1f, into the data", file, m[4], y, y+size, axisY)
			}
			if x < 0 || x > w || y < 0 || y > h {
				t.Errorf("%s: legend %q at (%.1f, %.1f) outside the %.0fx%.0f image", file, m[4], x, y, w, h)
			}
			if !slices.Contains(rows, y) {
				rows = append(rows, y)
			}
		}
		if n != want {
			t.Errorf("%s: %d legend entries, want %d", file, n, want)
		}
		if strings.HasPrefix(file, "effect-") && len(rows) != 2 {
			t.Errorf("%s: legend in %d rows, want 2 (four entries wrap)", file, len(rows))
		}
	}
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestReportStatesDefault: the page and report.md state the winner
// against the engine default: a card with the gain (or what became of the
// default), the sentence under the winner, the default's row marked.
func TestReportStatesDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Study)
		card  string
		lines []string
	}{
		{"gain", func(*Study) {}, `<div class="v">1.31×</div><div class="s">1.31× the engine default, pooled over 3 runs each (trial 0: pooled 1410.8).</div>`,
			[]string{"1.31× the engine default, pooled over 3 runs each (trial 0: pooled 1410.8).", "| 3 | 0 (engine default) | 1410.80 pooled |"}},
		{"failed", func(st *Study) {
			st.Trials[0].State, st.Trials[0].Score, st.Trials[0].ScoreOK, st.Trials[0].Class = "failed", nil, false, "illegal_memory_access"
			st.Confirmations = st.Confirmations[:2]
			st.VersusDefault, st.DefaultGain = "the engine default failed: illegal_memory_access at C64", 0
		}, `<div class="v">failed</div><div class="s">The engine default failed: illegal_memory_access at C64.</div>`,
			[]string{"The engine default failed: illegal_memory_access at C64."}},
		{"the default wins", func(st *Study) {
			b := st.Trials[0]
			st.Best = &b
			st.VersusDefault, st.DefaultGain = "the engine default is as good as anything found (pooled 1410.8 vs trial 3's 1420.1, within the spread 25.9)", 0
		}, `<div class="v">the default wins</div>`,
			[]string{"## Best: trial 0", "The engine default is as good as anything found (pooled 1410.8 vs trial 3's 1420.1, within the spread 25.9)."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := fixture()
			tc.edit(&st)
			var page strings.Builder
			if err := writeHTML(&page, buildView(st)); err != nil {
				t.Fatal(err)
			}
			if want := `<div class="k">Against the engine default</div>` + tc.card; !strings.Contains(page.String(), want) {
				t.Errorf("page lacks %q", want)
			}
			if n := strings.Count(page.String(), `<span class="deftag" title="the engine default: the fixed`); n != 1 {
				t.Errorf("%d rows marked as the engine default, want 1", n)
			}
			var md bytes.Buffer
			writeMarkdown(&md, buildView(st))
			for _, want := range tc.lines {
				if !strings.Contains(md.String(), want) {
					t.Errorf("report.md lacks %q:\n%s", want, md.String())
				}
			}
		})
	}
	st := fixture()
	st.VersusDefault = ""
	var page strings.Builder
	if err := writeHTML(&page, buildView(st)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "Against the engine default") {
		t.Error("a card for a study without an engine default")
	}
}

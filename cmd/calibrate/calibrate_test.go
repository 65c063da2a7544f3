package main

import (
	"io"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/seed"
)

func seedRecord(t *testing.T) *seed.File {
	t.Helper()
	s, err := seed.Load("../../testdata/profiles/calibration/seed000.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestShortCalibration is the short version of `make calibrate` run by
// `make test`: one seed configuration at C1 and C16 with few requests at a
// speed-up of 10, measured by objective.Run, against the seed's warm
// repeats. One retry absorbs a burst of CPU contention on a shared host.
// At a speed-up of 25 C16's TTFT p50 is 13 ms of real time, and a few ms of
// contention from the packages tested beside it moved it 40-60% (2 of 5
// `make test` runs on 2 cores); under three busy loops, 25 passed 1 of 3
// runs and 10 passed 4 of 4.
func TestShortCalibration(t *testing.T) {
	s := seedRecord(t)
	r := s.Run("quad-ep4")
	var rows []Row
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		cal := &Calibrator{Speed: 10, Out: io.Discard, Levels: []int{1, 16}, Requests: map[int]int{1: 4, 16: 16}}
		rows, err = cal.Chat(t.Context(), r, true)
		if err == nil && len(rows) == 2 && rows[0].OK() && rows[1].OK() {
			break
		}
	}
	if err != nil || len(rows) != 2 {
		t.Fatalf("rows %v, err %v", rows, err)
	}
	for _, row := range rows {
		t.Logf("C%d: tok/s %.1f vs %.1f (%+.1f%%), TTFT p50 %.3f vs %.3f (%+.1f%%)", row.Conc, row.SimTokS, row.SeedTokS, row.TokDev()*100, row.SimTTFT50, row.SeedTTFT50, row.TTFTDev()*100)
		if !row.OK() {
			t.Errorf("C%d outside tolerance (tok/s ±10%%, TTFT ±25%%)", row.Conc)
		}
	}
}

// TestColdStart: without a warm-up the first requests are cold, as the
// seed's r1 repeats (TTFT 11-14 s).
func TestColdStart(t *testing.T) {
	s := seedRecord(t)
	cal := &Calibrator{Speed: 50, Out: io.Discard, Levels: []int{1}, Requests: map[int]int{1: 3}}
	rows, err := cal.Chat(t.Context(), s.Run("quad-ep4"), false)
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows %v, err %v", rows, err)
	}
	if rows[0].SimTTFT99 < 8 || rows[0].SimTTFT50 > 2 {
		t.Errorf("cold r1 TTFT p50 %.2f s p99 %.2f s; want one cold request (>8 s) and warm others", rows[0].SimTTFT50, rows[0].SimTTFT99)
	}
}

func TestSeedArgv(t *testing.T) {
	s := seedRecord(t)
	got := strings.Join(seedArgv(s.Run("quad-ep4-mtp5")), " ")
	for _, want := range []string{"--tp-size 4", "--ep-size 4", "--mem-fraction-static 0.78", "--max-mamba-cache-size 256", "--speculative-algorithm EAGLE", "--speculative-num-steps 5", "--speculative-num-draft-tokens 6"} {
		if !strings.Contains(got, want) {
			t.Errorf("argv %q lacks %q", got, want)
		}
	}
	if strings.Contains(strings.Join(seedArgv(s.Run("reproduce")), " "), "--max-mamba-cache-size") {
		t.Error("reproduce must use the default pool (running cap with radix off)")
	}
}

func TestLoadSeed004(t *testing.T) {
	cells, err := loadSeed004("../../testdata/profiles/calibration/seed004.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 64 {
		t.Fatalf("%d cells, want 64", len(cells))
	}
	if c := cells[0]; c.Context != 8192 || c.Conc != 1 || c.Status != "Valid" || math.Abs(c.TotalTokS-190.7) > 1e-9 {
		t.Errorf("first cell %+v", c)
	}
}

// TestLongCalibration runs the full seed-000 comparison (SGTUNE_LONG=1).
func TestLongCalibration(t *testing.T) {
	if os.Getenv("SGTUNE_LONG") == "" {
		t.Skip("set SGTUNE_LONG=1")
	}
	var out strings.Builder
	code := run(t.Context(), []string{"--seed000", "../../testdata/profiles/calibration/seed000.json", "--seed004", "../../testdata/profiles/calibration/seed004.txt", "--faults", "--matrix", "--strict"}, &out, &out)
	t.Log(out.String())
	if code != 0 {
		t.Errorf("exit %d", code)
	}
}

// TestVirtualMatchesSeed: the virtual clock (sim/virtual, no process)
// measures the five passing seed-000 runs as `sgtune bench` would (warm-up,
// three repeats, medians) within ±10% tok/s and ±15% TTFT p50 of the
// seed's nearer warm repeat at every level, except the points listed in
// virtualGaps, which hold within the live simulator's calibration tolerance.
func TestVirtualMatchesSeed(t *testing.T) {
	s := seedRecord(t)
	cal := &Calibrator{Out: io.Discard, Levels: []int{1, 16, 64, 128}, Repeats: 3}
	for _, name := range passingRuns {
		r := s.Run(name)
		rows, err := cal.VirtualChat(t.Context(), r, true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		med := medianRow(rows, r)
		for _, conc := range cal.Levels {
			row, ok := med[conc]
			if !ok {
				t.Fatalf("%s: no point at C%d", name, conc)
			}
			t.Logf("%-24s C%-3d tok/s %7.1f vs %7.1f (%+5.1f%%)  TTFT p50 %6.3f vs %6.3f (%+5.1f%%)", name, row.Conc, row.SimTokS, row.SeedTokS, row.TokDev()*100, row.SimTTFT50, row.SeedTTFT50, row.TTFTDev()*100)
			if !row.VirtualOK(name) {
				t.Errorf("%s C%d outside ±%.0f%% tok/s, ±%.0f%% TTFT p50 (±%.0f%% at a known gap)", name, row.Conc, TolVirtualTokS*100, TolVirtualTTFT*100, TolTTFT*100)
			}
		}
	}
}

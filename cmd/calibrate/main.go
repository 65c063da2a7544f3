// Command calibrate compares the simulator with the seed studies: it starts
// sglang-sim (in process) for each seed configuration, measures it with
// sgtune's own load generator (objective.Run) and prints simulated against
// published figures with the deviation.
//
//	go run ./cmd/calibrate [--speedup 25] [--runs a,b] [--matrix] [--faults] [--strict]
//	    [--matrix-speedup 10] [--matrix-long-speedup 4 --matrix-long-context 131072]
//	    [--virtual [--virtual-speedup 10]]
//
// --virtual checks that the virtual clock is honest: for each run, the
// virtual-time sweep (sim/virtual) against the live simulator measured by
// the load generator (tok/s within 5%) and against the seed (±10% tok/s,
// ±15% TTFT p50).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sgtune/sgtune/seed"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	speed := fs.Float64("speedup", 25, "simulator speed-up (figures are rescaled: tok/s / S, times x S)")
	runs := fs.String("runs", "", "comma-separated seed-000 run names (default: the five passing runs; - for none)")
	seed000 := fs.String("seed000", "testdata/profiles/calibration/seed000.json", "seed 000 data")
	seed004 := fs.String("seed004", "testdata/profiles/calibration/seed004.txt", "seed 004 data")
	matrix := fs.Bool("matrix", false, "also run the seed-004 matrix on the rtxpro6000x8 profile")
	matrixSpeed := fs.Float64("matrix-speedup", 10, "speed-up for the matrix (its 1M-token prompts cost real CPU time per request)")
	longSpeed := fs.Float64("matrix-long-speedup", 4, "speed-up for matrix contexts above --matrix-long-context (0: same as --matrix-speedup)")
	longCtx := fs.Int("matrix-long-context", 131072, "tokens above which a matrix context runs at --matrix-long-speedup")
	faults := fs.Bool("faults", false, "also run the seed's failing configurations and check how they fail")
	cold := fs.Bool("cold", false, "also run one configuration without warm-up (r1 must be cold)")
	strict := fs.Bool("strict", false, "exit 1 when a figure is outside its tolerance")
	simlog := fs.String("simlog", "", "write the simulator's log to this file")
	contexts := fs.String("contexts", "", "limit the matrix to these contexts (tokens, comma-separated)")
	verbose := fs.Bool("v", false, "per-cell details")
	levels := fs.String("levels", "1,16,64,128", "concurrency levels")
	honesty := fs.Bool("virtual", false, "also compare the virtual clock (sim/virtual) with the live simulator and the seed: warm-up and 3 repeats, medians")
	honestySpeed := fs.Float64("virtual-speedup", 10, "live simulator speed-up for --virtual")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	s, err := seed.Load(*seed000)
	if err != nil {
		fmt.Fprintln(stderr, "calibrate:", err)
		return 2
	}
	var conc []int
	for _, f := range strings.Split(*levels, ",") {
		var c int
		if _, err := fmt.Sscan(f, &c); err != nil {
			fmt.Fprintln(stderr, "calibrate: bad --levels:", err)
			return 2
		}
		conc = append(conc, c)
	}
	names := passingRuns
	switch *runs {
	case "":
	case "-":
		names = nil
	default:
		names = strings.Split(*runs, ",")
	}
	cal := &Calibrator{Speed: *speed, Out: stdout, Levels: conc, Verbose: *verbose}
	if *contexts != "" {
		cal.Contexts = map[int]bool{}
		for _, f := range strings.Split(*contexts, ",") {
			var n int
			fmt.Sscan(f, &n)
			cal.Contexts[n] = true
		}
	}
	if *simlog != "" {
		f, err := os.Create(*simlog)
		if err != nil {
			fmt.Fprintln(stderr, "calibrate:", err)
			return 2
		}
		defer f.Close()
		cal.SimLog = f
	}
	bad := 0
	for _, name := range names {
		r := s.Run(name)
		if r == nil {
			fmt.Fprintf(stderr, "calibrate: no seed run %q\n", name)
			return 2
		}
		rows, err := cal.Chat(ctx, r, true)
		if err != nil {
			fmt.Fprintf(stdout, "%s: %v\n", name, err)
			bad++
			continue
		}
		bad += printRows(stdout, name, rows)
	}
	if *cold {
		r := s.Run("quad-ep4")
		cal.Levels = []int{1, 16}
		rows, err := cal.Chat(ctx, r, false)
		if err != nil {
			fmt.Fprintf(stdout, "cold: %v\n", err)
		}
		fmt.Fprintf(stdout, "\ncold start (quad-ep4, no warm-up, r1): simulated TTFT p50/p99 vs seed r1\n")
		for _, row := range rows {
			fmt.Fprintf(stdout, "  C%-4d sim p50 %6.2f s p99 %6.2f s | seed r1 p50 %6.2f s p99 %6.2f s\n", row.Conc, row.SimTTFT50, row.SimTTFT99, row.R1TTFT50, row.R1TTFT99)
		}
		cal.Levels = conc
	}
	if *faults {
		bad += cal.Faults(ctx, s)
	}
	if *honesty {
		hc := *cal
		hc.Speed, hc.Repeats = *honestySpeed, 3
		n, err := hc.Honesty(ctx, s, names)
		if err != nil {
			fmt.Fprintln(stdout, "virtual:", err)
			bad++
		}
		bad += n
	}
	if *matrix {
		cells, err := loadSeed004(*seed004)
		if err != nil {
			fmt.Fprintln(stderr, "calibrate:", err)
			return 2
		}
		mc := *cal
		mc.Speed = *matrixSpeed
		mc.LongSpeed, mc.LongContext = *longSpeed, *longCtx
		n, err := mc.Matrix(ctx, cells)
		if err != nil {
			fmt.Fprintln(stdout, "matrix:", err)
			bad++
		}
		bad += n
	}
	fmt.Fprintf(stdout, "\n%d figure(s) outside tolerance (tok/s ±%.0f%%, TTFT p50 ±%.0f%%, matrix ±%.0f%%)\n", bad, TolTokS*100, TolTTFT*100, TolMatrix*100)
	if *strict && bad > 0 {
		return 1
	}
	return 0
}

func printRows(w io.Writer, name string, rows []Row) int {
	bad := 0
	fmt.Fprintf(w, "\n%s\n  %-5s %10s %10s %8s   %9s %9s %8s\n", name, "conc", "sim tok/s", "seed", "dev", "sim TTFT", "seed", "dev")
	for _, r := range rows {
		mark := ""
		if !r.OK() {
			mark = "  <-- out of tolerance"
			bad++
		}
		fmt.Fprintf(w, "  C%-4d %10.1f %10.1f %+7.1f%%   %8.3fs %8.3fs %+7.1f%%%s\n", r.Conc, r.SimTokS, r.SeedTokS, r.TokDev()*100, r.SimTTFT50, r.SeedTTFT50, r.TTFTDev()*100, mark)
	}
	return bad
}

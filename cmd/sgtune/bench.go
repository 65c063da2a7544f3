package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/objective"
)

// benchFlags are the options of `sgtune bench`.
type benchFlags struct {
	url, model, apiKeyEnv string
	workload              string
	concurrency, requests []int
	repeats, maxTokens    int
	promptTokens          int
	promptsFile           string
	dataset               string
	sharedPrefix, turns   int
	seed                  uint64
	maxRate, burstiness   float64
	arrival               string
	rateRequests          int
	slo                   []string
	warmup, quality       bool
	reusePrompts          bool
	ignoreEOS             bool
	minPass               float64
	hangTimeout           time.Duration
	contexts              []int
	duration              time.Duration
	maxOutput             int
	asJSON                bool
	engine                string
}

// tokenCounter is the engine's Prometheus counter of generated tokens, which
// each measured point's client count is checked against ("" for none).
func tokenCounter(name string) string {
	if e, err := engine.Lookup(name); err == nil {
		return e.Metrics.GenerationTokens
	}
	return ""
}

// engineFromNamespaces picks the engine whose generated-token counter lives
// in one of the /metrics namespaces ("sglang" of sglang:..., say).
func engineFromNamespaces(ns []string) string {
	for _, e := range engine.All() {
		prefix, _, _ := strings.Cut(e.Metrics.GenerationTokens, ":")
		if prefix != "" && slices.Contains(ns, prefix) {
			return e.Name
		}
	}
	return ""
}

// counterEngines lists the engines with a generated-token counter, by name.
func counterEngines() []string {
	var out []string
	for _, e := range engine.All() {
		if e.Metrics.GenerationTokens != "" {
			out = append(out, e.Name)
		}
	}
	slices.Sort(out)
	return out
}

// counterHelp lists, one line each, the engines' generated-token counters
// for bench --help, from the engine registry (the help named SGLang's and
// llama.cpp's only, while vLLM's was used too).
func counterHelp() string {
	var lines []string
	for _, e := range engine.All() {
		if e.Metrics.GenerationTokens == "" {
			continue
		}
		line := fmt.Sprintf("  --engine %s: %s", e.Name, e.Metrics.GenerationTokens)
		if e.MetricsFlag != "" {
			line += fmt.Sprintf(" (the server needs %s)", e.MetricsFlag)
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// benchDoc is `sgtune bench --json`: DESIGN.md's document with the seed's
// field names.
type benchDoc struct {
	URL          string                   `json:"url"`
	Model        string                   `json:"model"`
	Workload     objective.Workload       `json:"workload"`
	ReusePrompts bool                     `json:"reuse_prompts"`
	Points       []objective.Point        `json:"points"`
	Medians      map[int]objective.Median `json:"medians"`
	Quality      *objective.Quality       `json:"quality,omitempty"`
	Audit        objective.OverallAudit   `json:"audit"`
	Server       *objective.ServerInfo    `json:"server,omitempty"`
	Warmup       []objective.Point        `json:"warmup,omitempty"`
	// Engine is the engine whose token counter the points were checked
	// against ("" when none: the checks are skipped).
	Engine       string `json:"engine,omitempty"`
	TokenCounter string `json:"token_counter,omitempty"`
	Error        string `json:"error,omitempty"`
}

// benchCmd is `sgtune bench --url URL ...`: benchmark a running server.
func (a *app) benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench --url URL",
		Short: "Benchmark a running OpenAI-compatible server",
		Long: `bench measures a running OpenAI-compatible server (SGLang or any other)
the way a study measures each trial: per concurrency level an uncounted
warm-up, then --repeats measured points of --requests streaming chat
requests, with TTFT, latency and inter-token latency percentiles
(numpy-style), output tok/s and an audit of every point. --quality runs the
structured-output (24) and tool-call (8) gates before and after the sweep.
--workload matrix runs the context x concurrency matrix instead (prefill plus
fixed-duration decode per cell; cells that cannot fit the server's KV cache
are skipped as "Over capacity").

Each measured chat point's output tokens are checked against the server's
own generated-token counter on /metrics (its rise over the point):
` + counterHelp() + `
--engine auto picks the engine from the metric names /metrics lists; without
metrics, or with --engine none, the check is reported as skipped. A mismatch
fails the point's audit.

Progress goes to stderr; the table, or with --json the document, to stdout.
Exit code 1 when the run failed (the server cannot be reached or does not
answer, requests failed, no token progress, a quality gate failed, an audit
failed), 2 for bad flags, 130 when interrupted (Ctrl-C): the points measured
before are printed, and the one it cut short is marked interrupted.`,
		Example: `  sgtune bench --url http://127.0.0.1:30000 --concurrency 1,16 --requests 8,32 --repeats 1
  sgtune bench --url http://127.0.0.1:30000 --quality --json > bench.json
  sgtune bench --url http://127.0.0.1:30000 --workload matrix --contexts 8192,32768 --concurrency 1,4,16 --duration 30s`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return badInput(fmt.Errorf("bench takes no arguments, got %q (see 'sgtune bench --help')", args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			w, t, err := f.resolve(cmd, a.getenv)
			if err != nil {
				return badInput(err)
			}
			progress := func(line string) { fmt.Fprintf(a.stderr, "[%s] %s\n", time.Now().Format("15:04:05"), line) }
			// main cancels the command's context on Ctrl-C; the run's context
			// is cancelled then with objective.ErrInterrupted as the cause,
			// so that the point it cuts short reads interrupted, not failed.
			ctx, cancel := context.WithCancelCause(context.WithoutCancel(cmd.Context()))
			defer cancel(nil)
			defer context.AfterFunc(cmd.Context(), func() { cancel(objective.ErrInterrupted) })()
			engine := f.engine
			if engine == "none" {
				engine = ""
			}
			if engine == "auto" {
				ns, err := objective.MetricsNamespaces(ctx, t)
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				engine = engineFromNamespaces(ns)
				var op *net.OpError
				var na *objective.NoAnswerError
				switch {
				case errors.As(err, &na):
					// A server that does not answer would not answer the run either.
					return errext.WithExitCode(na, errext.Failure)
				case errors.As(err, &op) && op.Op == "dial":
					// Unreachable: the run below says so, alone.
				case err != nil:
					t.NoCounter = err.Error()
				case engine == "":
					t.NoCounter = fmt.Sprintf("/metrics has no metrics of %s", strings.Join(counterEngines(), " or "))
				}
				if t.NoCounter != "" {
					progress(fmt.Sprintf("token counts: not checked against the server (%s)", t.NoCounter))
				}
			}
			t.TokenCounter = tokenCounter(engine)
			if t.TokenCounter != "" {
				progress(fmt.Sprintf("token counts: to be checked against %s (engine %s)", t.TokenCounter, engine))
			}
			res, runErr := objective.Run(ctx, t, w, objective.Options{Progress: progress})
			var unreachable *objective.UnreachableError
			var noAnswer *objective.NoAnswerError
			switch {
			case errors.As(runErr, &unreachable):
				// Nothing was measured: the connection error alone.
				return errext.WithExitCode(unreachable, errext.Failure)
			case errors.As(runErr, &noAnswer):
				return errext.WithExitCode(noAnswer, errext.Failure)
			case errors.Is(runErr, objective.ErrInterrupted) && len(res.Points) == 0 && len(res.Warmup) == 0 && res.Quality == nil:
				// Interrupted before it sent a request: nothing to print.
				return runErr
			}
			if f.asJSON {
				doc := benchDoc{URL: t.URL, Model: res.Model, Workload: w, ReusePrompts: res.ReusePrompts, Points: res.Points,
					Medians: res.Medians, Quality: res.Quality, Audit: res.Audit, Server: res.Server, Warmup: res.Warmup,
					Engine: engine, TokenCounter: t.TokenCounter}
				if doc.Points == nil {
					doc.Points = []objective.Point{}
				}
				if runErr != nil {
					doc.Error = runErr.Error()
				}
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(doc); err != nil {
					return err
				}
			} else {
				printBench(a.stdout, w, res)
			}
			if runErr != nil {
				return fmt.Errorf("bench: %w", runErr)
			}
			if !res.Audit.OK {
				return fmt.Errorf("bench: audit failed: %s", strings.Join(res.Audit.Errors, "; "))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "", "the server's root URL, e.g. http://127.0.0.1:30000; an OpenAI base URL ending in /v1 (http://127.0.0.1:30000/v1) is read as that root (required)")
	fl.StringVar(&f.model, "model", "", "model name to send (default: the first model /v1/models lists)")
	fl.StringVar(&f.apiKeyEnv, "api-key-env", "", "environment variable holding the API key (sent as a Bearer token)")
	fl.StringVar(&f.workload, "workload", "chat", "chat (concurrency sweep) or matrix (context x concurrency)")
	fl.IntSliceVar(&f.concurrency, "concurrency", nil, "concurrency levels (chat default 1,16,64,128; matrix default 1,2,4,...,128)")
	fl.IntSliceVar(&f.requests, "requests", nil, "requests per level, one per concurrency level (default 8,32,256,512, else 4 x concurrency, at least 8)")
	fl.IntVar(&f.repeats, "repeats", 3, "measured repeats per level")
	fl.IntVar(&f.maxTokens, "max-tokens", 256, "max output tokens per request")
	fl.IntVar(&f.promptTokens, "prompt-tokens", 256, "length of the synthetic prompts, in about-tokens")
	fl.StringVar(&f.promptsFile, "prompts-file", "", "prompts, one per line or JSONL with a prompt/text field (instead of synthetic ones)")
	fl.StringVar(&f.dataset, "dataset", "", "requests from a dataset file: ShareGPT JSON, JSONL (prompt or messages, optional output_tokens) or JSONL/CSV of input_tokens,output_tokens; output lengths are held with ignore_eos")
	fl.IntVar(&f.sharedPrefix, "shared-prefix-tokens", 0, "a system prompt of this many tokens shared by every request (measures the prefix cache on a shared prompt)")
	fl.IntVar(&f.turns, "turns", 1, "conversations of this many turns, each resending its history")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the dataset sample and the synthetic texts")
	fl.Float64Var(&f.maxRate, "max-rate", 0, "find the highest request rate within --slo, starting at this many requests/s: open-loop Poisson probes, doubled then bisected (without --concurrency, no concurrency levels run)")
	fl.IntVar(&f.rateRequests, "rate-requests", 64, "requests per --max-rate probe")
	fl.StringVar(&f.arrival, "arrival", "poisson", "arrivals of the --max-rate probes: poisson, gamma (with --burstiness) or trace (the --dataset trace's own timestamps, replayed in order at each probe's rate)")
	fl.Float64Var(&f.burstiness, "burstiness", 1, "--arrival gamma's shape: 1 is Poisson, below 1 burstier")
	fl.StringArrayVar(&f.slo, "slo", nil, "an SLO each --max-rate probe must hold, e.g. 'ttft p99 < 1s' (repeatable)")
	fl.BoolVar(&f.warmup, "warmup", true, "run an uncounted warm-up at each level (without it the first repeat is cold)")
	fl.BoolVar(&f.reusePrompts, "reuse-prompts", false, "send the same prompts in every repeat (measures the prefix cache)")
	fl.BoolVar(&f.ignoreEOS, "ignore-eos", false, "ask the server to generate max-tokens tokens regardless of EOS (SGLang ignore_eos)")
	fl.BoolVar(&f.quality, "quality", false, "run the structured-output and tool-call gates before and after the sweep")
	fl.Float64Var(&f.minPass, "min-pass", 1, "fraction of each gate's checks that must pass, in (0, 1]")
	fl.DurationVar(&f.hangTimeout, "hang-timeout", objective.DefaultHangTimeout, fmt.Sprintf("fail when no token arrives for this long while requests are in flight; the server's lookups before the run (/metrics, /v1/models, /server_info) wait this long, at most %s", objective.DefaultLookupTimeout))
	fl.IntSliceVar(&f.contexts, "contexts", nil, "matrix: context lengths in tokens (default 8192,16384,32768,65536,131072)")
	fl.DurationVar(&f.duration, "duration", 30*time.Second, "matrix: sustained decode time per cell")
	fl.IntVar(&f.maxOutput, "max-output", 4096, "matrix: max output tokens per decode request")
	fl.BoolVar(&f.asJSON, "json", false, "print the result document as JSON")
	fl.StringVar(&f.engine, "engine", "auto", fmt.Sprintf("engine whose generated-token counter checks the token counts: auto (from /metrics), none (no check) or one of %s", strings.Join(counterEngines(), ", ")))
	return cmd
}

// resolve checks the flags and builds the workload and target.
func (f *benchFlags) resolve(cmd *cobra.Command, getenv func(string) string) (objective.Workload, objective.Target, error) {
	var w objective.Workload
	var t objective.Target
	if f.url == "" {
		return w, t, errors.New("--url is required")
	}
	u, err := url.Parse(f.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return w, t, fmt.Errorf("--url %q: want http://HOST:PORT (or the OpenAI base URL http://HOST:PORT/v1)", f.url)
	}
	// The OpenAI base URL that users copy ends in /v1, which the requests'
	// paths (/v1/models, /v1/chat/completions) add again: take it as the
	// server's root.
	u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/v1")
	u.RawPath = ""
	t = objective.Target{URL: strings.TrimRight(u.String(), "/"), Model: f.model, LookupTimeout: min(f.hangTimeout, objective.DefaultLookupTimeout)}
	if f.apiKeyEnv != "" {
		t.APIKey = getenv(f.apiKeyEnv)
		if t.APIKey == "" {
			return w, t, fmt.Errorf("--api-key-env %s: the variable is unset or empty", f.apiKeyEnv)
		}
	}
	for _, v := range append(append(append([]int(nil), f.concurrency...), f.requests...), f.contexts...) {
		if v < 1 {
			return w, t, fmt.Errorf("concurrency, requests and contexts must be >= 1 (got %d)", v)
		}
	}
	if f.repeats < 1 || f.maxTokens < 1 || f.promptTokens < 1 || f.maxOutput < 1 {
		return w, t, errors.New("--repeats, --max-tokens, --prompt-tokens and --max-output must be >= 1")
	}
	if !(f.minPass > 0 && f.minPass <= 1) {
		return w, t, fmt.Errorf("--min-pass %v: want a fraction in (0, 1]; leave out --quality to skip the gates", f.minPass)
	}
	if f.hangTimeout <= 0 || f.duration <= 0 {
		return w, t, errors.New("--hang-timeout and --duration must be > 0")
	}
	if tokenCounter(f.engine) == "" && f.engine != "auto" && f.engine != "none" {
		return w, t, fmt.Errorf("--engine %q: want auto, none or one of %s", f.engine, strings.Join(counterEngines(), ", "))
	}
	// A flag of the other workload would be ignored without a word.
	only := map[string][]string{
		"chat":   {"requests", "repeats", "max-tokens", "prompt-tokens", "prompts-file", "reuse-prompts", "dataset", "shared-prefix-tokens", "turns", "seed", "max-rate", "rate-requests", "slo", "arrival", "burstiness"},
		"matrix": {"contexts", "duration", "max-output"},
	}
	for kind, names := range only {
		for _, n := range names {
			if kind != f.workload && cmd.Flags().Changed(n) {
				return w, t, fmt.Errorf("--%s applies to --workload %s only; this run is --workload %s", n, kind, f.workload)
			}
		}
	}
	warm := f.warmup
	w = objective.Workload{
		Kind:        f.workload,
		HangTimeout: f.hangTimeout.Seconds(),
		Quality:     objective.QualitySpec{Enabled: f.quality, MinPass: f.minPass},
	}
	switch f.workload {
	case "chat":
		if len(f.requests) > 0 && len(f.concurrency) == 0 && len(f.requests) != 4 {
			return w, t, fmt.Errorf("--requests has %d values for the 4 default concurrency levels", len(f.requests))
		}
		if len(f.requests) > 0 && len(f.concurrency) > 0 && len(f.requests) != len(f.concurrency) {
			return w, t, fmt.Errorf("--requests has %d values for %d concurrency levels", len(f.requests), len(f.concurrency))
		}
		w.Chat = objective.ChatSpec{Concurrency: f.concurrency, Requests: f.requests, MaxTokens: f.maxTokens, Repeats: f.repeats,
			Warmup: &warm, PromptTokens: f.promptTokens, PromptsFile: f.promptsFile, ReusePrompts: f.reusePrompts, IgnoreEOS: f.ignoreEOS}
		if len(f.concurrency) == 0 && len(f.requests) == 4 {
			w.Chat.Concurrency = []int{1, 16, 64, 128}
		}
		if f.maxRate < 0 || (f.maxRate == 0 && (cmd.Flags().Changed("slo") || cmd.Flags().Changed("rate-requests") || cmd.Flags().Changed("arrival"))) {
			return w, t, errors.New("--slo, --rate-requests and --arrival go with --max-rate START (requests/s > 0)")
		}
		if f.arrival == objective.ArrivalTrace && f.dataset == "" {
			return w, t, errors.New("--arrival trace replays the --dataset trace's timestamps: give --dataset")
		}
		if f.maxRate > 0 {
			slos, err := parseSLOs(f.slo)
			if err != nil {
				return w, t, err
			}
			w.Chat.RateSearch = &objective.RateSearch{Start: f.maxRate, Requests: f.rateRequests, SLO: slos, Arrival: f.arrival, Burstiness: f.burstiness}
			if !cmd.Flags().Changed("concurrency") && !cmd.Flags().Changed("requests") {
				w.Chat.Concurrency, w.Chat.Requests = nil, nil
			}
		}
		if f.dataset != "" || f.sharedPrefix != 0 || f.turns != 1 {
			switch {
			case f.sharedPrefix < 0 || f.turns < 1:
				return w, t, errors.New("--shared-prefix-tokens must be >= 0 and --turns >= 1")
			case f.dataset != "" && f.promptsFile != "":
				return w, t, errors.New("--dataset and --prompts-file: give one of them")
			}
			w.Chat.Source = &objective.SourceSpec{Dataset: f.dataset, SharedPrefix: f.sharedPrefix, Turns: f.turns, Seed: f.seed}
		}
	case "matrix":
		w.Matrix = objective.MatrixSpec{Contexts: f.contexts, Concurrency: f.concurrency, DurationS: f.duration.Seconds(), MaxOutput: f.maxOutput}
	default:
		return w, t, fmt.Errorf("--workload %q: want chat or matrix", f.workload)
	}
	w = w.WithDefaults()
	if err := w.Validate(); err != nil {
		return w, t, err
	}
	if f.promptsFile != "" {
		if _, err := objective.ReadPrompts(f.promptsFile); err != nil {
			return w, t, fmt.Errorf("--prompts-file: %w", err)
		}
	}
	if f.dataset != "" {
		ds, err := objective.LoadDataset(f.dataset)
		if err != nil {
			return w, t, fmt.Errorf("--dataset: %w", err)
		}
		if f.arrival == objective.ArrivalTrace && !ds.Timed {
			return w, t, fmt.Errorf("--arrival trace: %s has no timestamps (a trace: Mooncake JSONL, the Azure trace CSV)", f.dataset)
		}
	}
	return w, t, nil
}

// printBench writes the human-readable result.
func printBench(out io.Writer, w objective.Workload, res *objective.Result) {
	if res.Model != "" {
		fmt.Fprintf(out, "model: %s", res.Model)
		if s := res.Server; s != nil && s.MaxTotalNumTokens > 0 {
			fmt.Fprintf(out, "; server KV tokens %d", s.MaxTotalNumTokens)
			if n := max(s.EffectiveMaxRunning, s.MaxRunningRequests); n > 0 {
				fmt.Fprintf(out, ", max running requests %d", n)
			}
		}
		fmt.Fprintln(out)
	}
	if w.Kind == "matrix" {
		printMatrix(out, w, res)
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "conc\trepeat\trequested\tcompleted\tfailed\tretried\ttokens\tserver tokens\ttok/s\treq/s\tTTFT p50\tTTFT p99\tlatency p50\tlatency p99\tITL p50\tITL p99\taudit\t")
		for _, p := range res.Points {
			if p.Phase == objective.PhaseRate {
				continue // printRates lists them
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Concurrency, p.Repeat, p.Requested, p.Completed, p.Failed,
				p.Retried, p.OutputTokens, serverTokens(p.Audit.ServerTokens), p.OutputTokS, p.RequestsPerS, secs(p.TTFT.P50), secs(p.TTFT.P99), secs(p.Latency.P50), secs(p.Latency.P99),
				secs(p.ITL.P50), secs(p.ITL.P99), auditWord(p))
		}
		tw.Flush()
		if len(res.Medians) > 0 {
			fmt.Fprintln(out, "\nmedians over repeats:")
			tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "conc\trepeats\ttok/s\tTTFT p50\tTTFT p99\tlatency p99\tITL p99\t")
			for _, c := range slices.Sorted(maps.Keys(res.Medians)) {
				m := res.Medians[c]
				fmt.Fprintf(tw, "%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t\n", c, m.Repeats, m.OutputTokS, secs(m.TTFTP50), secs(m.TTFTP99), secs(m.LatencyP99), secs(m.ITLP99))
			}
			tw.Flush()
		}
		if res.ReusePrompts {
			fmt.Fprintln(out, "prompts were reused across repeats (prefix cache warm after repeat 1)")
		}
		printRates(out, w, res)
	}
	if q := res.Quality; q != nil {
		for _, g := range []struct {
			when string
			c    *objective.QualityCheck
		}{{"before", q.Before}, {"after", q.After}} {
			if g.c == nil {
				continue
			}
			fmt.Fprintf(out, "quality %s: json %s, tool %s (%s)\n", g.when, g.c.Summary.JSON, g.c.Summary.Tool, map[bool]string{true: "pass", false: "FAIL"}[g.c.Pass])
			for _, f := range g.c.Failures {
				fmt.Fprintf(out, "  %s\n", f)
			}
		}
	}
	if line := tokenCheckLine(res.Points); line != "" {
		fmt.Fprintln(out, line)
	}
	switch a := res.Audit; {
	case a.OK && a.Interrupted:
		fmt.Fprintf(out, "audit: ok (%d points; the run was interrupted)\n", a.Points)
	case a.OK:
		fmt.Fprintf(out, "audit: ok (%d points)\n", a.Points)
	case a.Interrupted && a.Points == 0:
		fmt.Fprintln(out, "audit: none (interrupted before any point was measured)")
	default:
		fmt.Fprintf(out, "audit: FAILED\n  %s\n", strings.Join(a.Errors, "\n  "))
	}
}

// printRates prints the rate search's probes and the highest rate found.
func printRates(out io.Writer, w objective.Workload, res *objective.Result) {
	rs := w.Chat.RateSearch
	if rs == nil {
		return
	}
	fmt.Fprintln(out, "\nrate probes (open loop, latencies from the scheduled sends):")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rate\toffered\tachieved\tcompleted\tTTFT p99\tlatency p99\tmax in flight\tkept up\t")
	for _, p := range res.Points {
		if p.Phase != objective.PhaseRate {
			continue
		}
		kept := "-"
		if p.KeptUp != nil {
			kept = map[bool]string{true: "yes", false: "no"}[*p.KeptUp]
		}
		fmt.Fprintf(tw, "%.3g\t%.3g\t%.3g\t%d/%d\t%s\t%s\t%d\t%s\t\n", p.Rate, p.OfferedRateS, p.AchievedRateS, p.Completed, p.Requested,
			secs(p.TTFT.P99), secs(p.Latency.P99), p.MaxInFlight, kept)
	}
	tw.Flush()
	v, ok, why := objective.Score(objective.ScoreSpec{Metric: objective.MetricMaxRate, SLO: rs.SLO}, res)
	if ok {
		fmt.Fprintf(out, "max rate: %.3g requests/s (%s)\n", v, why)
	} else {
		fmt.Fprintf(out, "max rate: none (%s)\n", why)
	}
}

// printMatrix prints seed 004's tables: prefill by context, then decode
// total tok/s (or status) by context x concurrency.
func printMatrix(out io.Writer, w objective.Workload, res *objective.Result) {
	cell := map[[2]int]objective.Point{}
	fmt.Fprintln(out, "prefill:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "context\tstatus\tprompt tok/s\tTTFT\t")
	for _, p := range res.Points {
		switch p.Phase {
		case objective.PhasePrefill:
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t\n", p.Context, p.Status, p.PromptTokS, secs(p.TTFT.P50))
		case objective.PhaseDecode:
			cell[[2]int{p.Context, p.Concurrency}] = p
		}
	}
	tw.Flush()
	fmt.Fprintln(out, "\nsustained decode, total tok/s (TTFT p50); rows context, columns simultaneous requests:")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "context\t"
	for _, c := range w.Matrix.Concurrency {
		head += strconv.Itoa(c) + "\t"
	}
	fmt.Fprintln(tw, head)
	for _, ctx := range w.Matrix.Contexts {
		row := strconv.Itoa(ctx) + "\t"
		for _, c := range w.Matrix.Concurrency {
			p, ok := cell[[2]int{ctx, c}]
			switch {
			case !ok:
				row += "-\t"
			case p.Status == objective.StatusValid:
				row += fmt.Sprintf("%.1f (%s)\t", p.OutputTokS, secs(p.TTFT.P50))
			case p.Status == objective.StatusQueued:
				row += fmt.Sprintf("%.1f queued (%s)\t", p.OutputTokS, secs(p.TTFT.P50))
			default:
				row += p.Status + "\t"
			}
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintln(out, "Requests queued: the server could not run all requests at once, so some waited in a queue. Over capacity: not run because this many requests at this context would exceed the server's KV cache. Not run: skipped during the run, or the run stopped early.")
}

// secs formats seconds as ms below 1 s.
func secs(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.1f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

// tokenCheckLine sums up the points' checks against the server's counter.
func tokenCheckLine(points []objective.Point) string {
	var n, passed, failed int
	var metric, skipped string
	for _, p := range points {
		tc := p.Audit.ServerTokens
		if tc == nil {
			continue
		}
		n++
		metric = tc.Metric
		switch tc.State {
		case objective.CheckPassed:
			passed++
		case objective.CheckFailed:
			failed++
		default:
			skipped = tc.Reason
		}
	}
	switch {
	case n == 0:
		return ""
	case skipped != "" && passed+failed == 0:
		return "server token counter: not checked (" + skipped + ")"
	}
	line := fmt.Sprintf("server token counter %s: %d of %d points equal to the client's count", metric, passed, n)
	if failed > 0 {
		line += fmt.Sprintf(", %d DIFFER", failed)
	}
	if skipped != "" {
		line += ", some not checked (" + skipped + ")"
	}
	return line
}

// auditWord is the table cell of a point's audit.
func auditWord(p objective.Point) string {
	switch {
	case p.State == objective.StateInterrupted:
		return "interrupted"
	case p.Audit.OK():
		return "ok"
	}
	return "FAILED"
}

// serverTokens is the table cell of a point's token check.
func serverTokens(tc *objective.TokenCheck) string {
	switch {
	case tc == nil:
		return "-"
	case tc.State == objective.CheckSkipped:
		return "skipped"
	case tc.Tolerance > 0:
		return fmt.Sprintf("%d±%d", tc.Server, tc.Tolerance)
	}
	return strconv.FormatInt(tc.Server, 10)
}

package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/sgtune/sgtune/shell"
)

// writeMarkdown writes report.md: the same study as the page, for a
// terminal, a pull request or a wiki.
func writeMarkdown(w io.Writer, v *view) {
	st := v.St
	fmt.Fprint(w, reportMark)
	fmt.Fprintf(w, "# Study %s\n\n", st.Name)
	budget := ""
	if st.Budget > 0 {
		budget = fmt.Sprintf(" of %d", st.Budget)
	}
	reruns := ""
	if v.Reruns > 0 {
		reruns = fmt.Sprintf(" and %d confirmation reruns", v.Reruns)
	}
	fmt.Fprintf(w, "%d trials (%s); %d%s search launches%s; %s of launch and measurement time", len(st.Trials), v.Counts, v.Launched, budget, reruns, v.Measured)
	if v.Wall != "" {
		fmt.Fprintf(w, ", %s wall time", v.Wall)
	}
	fmt.Fprintf(w, ". Storage: `%s`.\n\n", st.Storage)
	if st.Score != "" {
		fmt.Fprintf(w, "Score: %s.\n\n", st.Score)
	}
	if v.Generated != "" {
		fmt.Fprintf(w, "Generated %s.\n\n", v.Generated)
	}

	if st.Best == nil {
		if !anyMeasured(st.Trials) {
			fmt.Fprintln(w, "No trial was measured yet.")
		} else {
			fmt.Fprintln(w, "No trial met the score's SLO and quality gates.")
		}
		fmt.Fprintln(w)
		if v.DefaultNote != "" {
			fmt.Fprintf(w, "%s\n\n", v.DefaultNote)
		}
	} else {
		b := st.Best
		fmt.Fprintf(w, "## Best: trial %d, score %s\n\n", b.Number, v.WinnerScore)
		fmt.Fprintf(w, "```\n%s\n```\n\n", shell.Join(b.Flags))
		levelTable(w, b.Levels)
		if v.DefaultNote != "" {
			fmt.Fprintf(w, "%s\n\n", v.DefaultNote)
		}
		if v.Plateau != "" {
			fmt.Fprintf(w, "%s\n\n", v.Plateau)
		}
	}
	if len(v.Confirm) > 0 {
		fmt.Fprintln(w, "## Confirmation reruns")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| trial | scores (first run, then reruns) | pooled | spread | spread / pooled |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
		for _, c := range v.Confirm {
			trial := fmt.Sprint(c.Trial)
			if c.Baseline {
				trial += " (engine default)"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", trial, c.Scores, c.Pooled, c.Spread, c.Rel)
		}
		fmt.Fprintln(w)
		if v.Tie != "" {
			fmt.Fprintf(w, "**%s**\n\n", v.Tie)
		}
		if st.Verdict != "" {
			fmt.Fprintf(w, "Winner: %s.\n\n", st.Verdict)
		}
	}
	for _, p := range v.Plots {
		fmt.Fprintf(w, "![%s](%s)\n\n", p.Alt, p.File)
	}
	if len(v.Ranked) > 0 {
		fmt.Fprintln(w, "## Ranking")
		fmt.Fprintln(w)
		note := "Configs confirmed by reruns rank by their pooled score, as the winner was declared."
		if len(v.Ranked) > 1 {
			first, _ := rankScore(v.Ranked[0], st.Confirmations)
			second, _ := rankScore(v.Ranked[1], st.Confirmations)
			if second > first {
				note += " The declared winner ranks first although a config below it scored higher: the study declares on pooled reruns, and within the measured spread a tie goes to the config with fewer flags changed from the engine's defaults when it is within 1% of the best (see Confirmation reruns)."
			}
		}
		fmt.Fprintln(w, note)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| rank | trial | score | params |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for i, t := range v.Ranked {
			if i == 10 {
				break
			}
			v, pooled := rankScore(t, st.Confirmations)
			score := fmt.Sprintf("%.2f", v)
			if pooled {
				score += " pooled"
			}
			trial := fmt.Sprint(t.Number)
			if st.Best != nil && t.Number == st.Best.Number {
				trial += " (winner)"
			}
			if t.Baseline {
				trial += " (engine default)"
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s |\n", i+1, trial, score, paramString(t.Params))
		}
		fmt.Fprintln(w)
	}
	if m := v.Matrix; m != nil {
		fmt.Fprintf(w, "## Context × concurrency (trial %d)\n\n", m.Trial)
		fmt.Fprintln(w, "Sustained decode, total tok/s (TTFT); rows are context length, columns simultaneous requests.")
		fmt.Fprintln(w)
		fmt.Fprint(w, "| context | prefill |")
		for _, c := range m.Columns {
			fmt.Fprintf(w, " %d |", c)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "|---|---|"+strings.Repeat("---|", len(m.Columns)))
		for i, r := range m.Rows {
			fmt.Fprintf(w, "| %s | %s |", r.Context, cellText(m.Prefill[i]))
			for _, c := range r.Cells {
				fmt.Fprintf(w, " %s |", cellText(c))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Requests queued: the server could not run all requests at once, so some waited in a queue. Over capacity: not run because this many requests at this context would exceed the server's KV cache. Not run: skipped during the run, or the run stopped early.")
		fmt.Fprintln(w)
	}
	if len(v.Failures) > 0 {
		fmt.Fprintln(w, "## Failures and rejections")
		fmt.Fprintln(w)
		for _, f := range v.Failures {
			exit := ""
			if f.ExitCode != "" {
				exit = ", exit " + f.ExitCode
			}
			fmt.Fprintf(w, "- trial %d, %s: %s%s: %s (%s)\n", f.Number, f.State, f.Class, exit, mdEscape(f.Reason), f.Params)
			if f.LogError != "" {
				fmt.Fprintf(w, "\n  %s\n", logLine(f.LogPath, f.LogError))
			}
			if f.Excerpt != "" {
				fmt.Fprintf(w, "\n  ```\n  %s\n  ```\n", strings.ReplaceAll(f.Excerpt, "\n", "\n  "))
			}
		}
		fmt.Fprintln(w)
	}
	if len(v.LogNotes) > 0 {
		fmt.Fprintln(w, "## Incomplete server logs")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "A write to the log or its close failed, so it lacks lines; the trial's outcome stands.")
		fmt.Fprintln(w)
		for _, n := range v.LogNotes {
			fmt.Fprintf(w, "- trial %d, %s: %s\n", n.Number, n.State, logLine(n.LogPath, n.LogError))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "## All trials")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| trial | state | score | detail | params |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, t := range st.Trials {
		score := "-"
		if t.Score != nil {
			score = fmt.Sprintf("%.2f", *t.Score)
			switch {
			case t.State != "complete":
				score += " (partial)"
			case !t.ScoreOK:
				score += " (SLO miss)"
			}
		}
		detail := t.Class
		if t.Reason != "" {
			detail = strings.TrimPrefix(detail+": "+t.Reason, ": ")
		}
		if t.RetryOf != nil {
			detail = strings.TrimSpace(fmt.Sprintf("retry of trial %d %s", *t.RetryOf, detail))
		}
		if t.ConfirmOf != nil {
			detail = strings.TrimSpace(fmt.Sprintf("confirms trial %d %s", *t.ConfirmOf, detail))
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s |\n", t.Number, t.State, score, mdEscape(detail), paramString(t.Params))
	}
}

// anyMeasured reports whether a trial ran to the end or failed: one that
// could meet the score's SLO and gates, or show why not.
func anyMeasured(trials []Trial) bool {
	for _, t := range trials {
		if t.State == "complete" || t.State == "failed" || t.State == "pruned" || t.State == "infeasible" {
			return true
		}
	}
	return false
}

func cellText(c matrixCell) string {
	if c.Detail == "" {
		return c.Text
	}
	return c.Text + " (" + c.Detail + ")"
}

func levelTable(w io.Writer, levels []Level) {
	if len(levels) == 0 {
		return
	}
	fmt.Fprintln(w, "| concurrency | repeats | output tok/s | TTFT p50 (s) | TTFT p99 (s) | latency p99 (s) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, l := range levels {
		fmt.Fprintf(w, "| %d | %d | %.1f | %.3f | %.3f | %.2f |\n", l.Concurrency, l.Repeats, l.OutputTokS, l.TTFTP50, l.TTFTP99, l.LatencyP99)
	}
	fmt.Fprintln(w)
}

// logLine says that a trial's server log is incomplete: "log: `PATH`
// (incomplete: ERR)".
func logLine(path, logErr string) string {
	if path == "" {
		return "log incomplete: " + mdEscape(logErr)
	}
	return fmt.Sprintf("log: `%s` (incomplete: %s)", path, mdEscape(logErr))
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/storage"
)

// defaultWatch is the refresh interval of a bare --watch.
const defaultWatch = 2 * time.Second

func (a *app) statusCmd() *cobra.Command {
	var sf studyFlags
	var asJSON bool
	var watch time.Duration
	cmd := &cobra.Command{
		Use:   "status [--watch [INTERVAL]]",
		Short: "List every trial of a study: state, score, SLO verdict, time, failure reason and params",
		Long: `Status prints every trial of a study as an aligned table, with a summary line:
trials by state, launches used, the running trial and the best so far.

--watch follows a running study from another shell: it re-reads the storage
every INTERVAL (default 2s; --watch 5s or --watch=5s) and redraws the table
(on a terminal; elsewhere it prints the table again only when it changed). It
ends on Ctrl-C, or when no trial is running and the run has ended: no live
process holds a GPU group of the study, and the process that owned the last
trial is gone (same host), or, for a run on another host, nothing changed for
three intervals. A trial queued to run again (after a Ctrl-C, say) waits for
the next run and does not keep the watch going. Status only reads: it never
creates or changes a database.`,
		Example: `  sgtune status
  sgtune status --storage runs/glm.db --watch
  sgtune status --watch 10s`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			// pflag cannot give --watch an optional separate value, so
			// "--watch 5s" arrives as a bare --watch and an argument.
			if d, err := time.ParseDuration(args[0]); err == nil && len(args) == 1 && cmd.Flags().Changed("watch") && d > 0 {
				watch = d
				return nil
			}
			return badInput(fmt.Errorf("status takes no arguments, got %q (an interval goes with --watch, e.g. --watch 5s) (see '%s --help')", args, cmd.CommandPath()))
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("watch") {
				if asJSON {
					return badInput(errors.New("--watch and --json do not go together; poll `sgtune status --json` instead"))
				}
				if watch <= 0 {
					return badInput(fmt.Errorf("--watch %s: want a positive interval such as 2s", watch))
				}
				return a.watchStatus(cmd.Context(), sf, watch)
			}
			d, err := sf.open()
			if err != nil {
				return err
			}
			defer d.store.Close()
			if asJSON {
				// What the text's first and last lines say, for scripts.
				doc := struct {
					Study    string `json:"study"`
					Launched int    `json:"launched"`
					Budget   int    `json:"budget,omitempty"`
					// Best is the declared winner's trial (before
					// confirmation, the best trial); absent when none
					// meets the SLO. Confirmed is the winner's pooled runs.
					Best      *int           `json:"best,omitempty"`
					Confirmed *search.Winner `json:"confirmed,omitempty"`
					// VersusDefault states the best against the
					// engine default (budget.baseline), as the text does.
					VersusDefault string          `json:"versus_default,omitempty"`
					Trials        []search.Record `json:"trials"`
				}{Study: d.name, Launched: d.launched, Budget: d.budget(), Trials: d.recs, VersusDefault: d.versusDefault()}
				if b, ok := d.best(); ok {
					doc.Best = &b.Number
					doc.Confirmed = d.confirmation(b)
				}
				return writeJSON(a.stdout, doc)
			}
			_, err = io.WriteString(a.stdout, statusText(d, time.Now()))
			return err
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the study as JSON: launched, budget, best, confirmed (the winner's pooled runs) and every trial")
	f.DurationVar(&watch, "watch", 0, "follow the study, re-reading the storage every INTERVAL (default 2s) until the run ends")
	f.Lookup("watch").NoOptDefVal = defaultWatch.String()
	return cmd
}

// statusText renders the study as the status table and summary.
func statusText(d *studyData, now time.Time) string {
	var b strings.Builder
	counts := map[string]int{}
	var running []search.Record
	for _, r := range d.recs {
		counts[r.State]++
		if r.State == search.StateRunning {
			running = append(running, r)
		}
	}
	states := make([]string, 0, len(counts))
	for s := range counts {
		states = append(states, s)
	}
	sort.Strings(states)
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("%d %s", counts[s], s)
	}
	budget := ""
	if n := d.budget(); n > 0 {
		budget = fmt.Sprintf(" of %d", n)
	}
	// Confirmation reruns are launched outside the search's budget. Those
	// that ran count, as run and report count them; one running, queued or
	// stopped by an interrupt (its retry is queued) is said apart.
	reruns := 0
	pending := map[string]int{}
	for _, r := range d.recs {
		if r.ConfirmOf == nil {
			continue
		}
		switch r.State {
		case search.StateComplete, search.StateFailed, search.StatePruned:
			reruns++
		case search.StateWaiting:
			pending["queued"]++
		default:
			pending[r.State]++
		}
	}
	if reruns > 0 || len(pending) > 0 {
		budget += fmt.Sprintf(" launched by the search, and %d confirmation rerun(s)", reruns)
		var more []string
		for _, s := range []string{search.StateRunning, "queued", search.StateInterrupted} {
			if pending[s] > 0 {
				more = append(more, fmt.Sprintf("%d %s", pending[s], s))
				delete(pending, s)
			}
		}
		for _, s := range slices.Sorted(maps.Keys(pending)) {
			more = append(more, fmt.Sprintf("%d %s", pending[s], s))
		}
		if len(more) > 0 {
			budget += " (" + strings.Join(more, ", ") + ")"
		}
	} else {
		budget += " launched"
	}
	fmt.Fprintf(&b, "study %s: %d trials (%s); %d%s\n", d.name, len(d.recs), strings.Join(parts, ", "), d.launched, budget)

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSTATE\tSCORE\tSLO\tTIME\tHOST\tJOB\tDETAIL\tPARAMS")
	for _, r := range d.recs {
		slo := ""
		if r.State == search.StateComplete && r.Score != nil {
			slo = "meets"
			if !r.ScoreOK {
				slo = "misses"
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Number, r.State, scoreCell(r), slo, timeCell(r, now), orDash(r.Host), orDash(r.SlurmJob),
			detail(r), paramsText(r))
	}
	tw.Flush()
	host, _ := os.Hostname()
	for _, r := range running {
		// A trial whose process died (kill -9) stays "running" in the
		// storage until a run takes it over.
		if search.OwnerLive(r.Owner, host) == search.LiveNo {
			fmt.Fprintf(&b, "stale: trial %d was left running by process %s, which has ended; the next run re-runs it\n", r.Number, r.Owner)
			continue
		}
		fmt.Fprintf(&b, "running: trial %d for %s", r.Number, clock(now.Sub(r.Start)))
		if r.Owner != "" {
			fmt.Fprintf(&b, " (process %s)", r.Owner)
		}
		fmt.Fprintln(&b)
	}
	for _, r := range d.recs {
		// Stored before its server stopped (search.Record.Stopping): the
		// stop is under way, or its process died before it ended.
		if !r.Stopping || r.State == search.StateRunning {
			continue
		}
		if search.OwnerLive(r.Owner, host) == search.LiveNo {
			fmt.Fprintf(&b, "stopping: trial %d's process %s ended before its server stopped; the next run kills what the server left\n", r.Number, r.Owner)
		} else {
			fmt.Fprintf(&b, "stopping: trial %d's server (its GPUs are released when it has stopped)\n", r.Number)
		}
	}
	for _, r := range d.recs {
		// The run warned as it happened; the trial's outcome stands.
		if r.LogError != "" {
			fmt.Fprintf(&b, "log: trial %d's server log %s is incomplete: %s\n", r.Number, orDash(r.LogPath), r.LogError)
		}
	}
	fmt.Fprintf(&b, "best: %s\n", d.bestLine())
	if v := d.versusDefault(); v != "" {
		fmt.Fprintln(&b, v)
	}
	return b.String()
}

func scoreCell(r search.Record) string {
	s, ok := r.Scored()
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(s, 'f', 1, 64)
}

// timeCell is a trial's duration, or for a running one the time so far.
func timeCell(r search.Record, now time.Time) string {
	switch {
	case r.State == search.StateRunning && !r.Start.IsZero():
		return clock(now.Sub(r.Start)) + "+"
	case r.DurationS > 0:
		return clock(time.Duration(r.DurationS * float64(time.Second)))
	case r.End != nil && !r.Start.IsZero():
		return clock(r.End.Sub(r.Start))
	}
	return "-"
}

// clock prints a duration as 42s, 3m05s or 2h07m.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, (s%3600)/60)
}

// watchStatus redraws the status every interval until the run ends or ctx
// is cancelled (Ctrl-C).
func (a *app) watchStatus(ctx context.Context, sf studyFlags, interval time.Duration) error {
	store, err := openExisting(sf.storage)
	if err != nil {
		return err
	}
	defer func() { store.Close() }() // the store read last (see Frozen)
	tty := isTerminal(a.stdout)
	host, _ := os.Hostname()
	var last string
	quiet, failures := 0, 0
	lastCount, reread := -1, false
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if store.Frozen() {
			// Read as it was when opened (a directory this user cannot
			// write, and no run had it open): open it again to see a run
			// that started since.
			if fresh, err := openExisting(sf.storage); err == nil {
				store.Close()
				store = fresh
			}
		}
		d, err := readStudy(store, sf.study)
		switch {
		case err != nil && lastCount < 0:
			// The first read decides: no such study is bad input.
			return err
		case err != nil:
			// A busy database or a transient read error: try again, but
			// not forever.
			if failures++; failures == 3 {
				return fmt.Errorf("status --watch: %w", err)
			}
		default:
			// The study's leases name the processes that run it now: a
			// run or worker holds its GPU group's lease while it takes and
			// runs trials, also while it is about to claim a queued one.
			leases, err := store.Leases(ctx, d.id)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if failures++; failures == 3 {
					return fmt.Errorf("status --watch: read the leases of study %s: %w", d.name, err)
				}
				break
			}
			failures = 0
			done, why := runEnded(d.recs, leases, host, time.Now(), lastCount, &quiet)
			lastCount = len(d.recs)
			if done && !reread {
				// The process may have written its last trial between this
				// read and the liveness check: read once more, so that the
				// last table shows what it left.
				reread = true
				continue
			}
			reread = done
			text := statusText(d, time.Now())
			switch {
			case tty:
				fmt.Fprint(a.stdout, "\x1b[H\x1b[2J"+text)
				if !done {
					fmt.Fprintf(a.stdout, "watching %s every %s; Ctrl-C to stop\n", d.store.Path(), interval)
				}
			case text != last:
				if last != "" {
					fmt.Fprintln(a.stdout)
				}
				fmt.Fprint(a.stdout, text)
			}
			last = text
			if done {
				fmt.Fprintf(a.stdout, "watch ended: %s\n", why)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// quietPolls is how many unchanged reads without a running trial end a
// watch when the run's process cannot be checked (another host).
const quietPolls = 3

// runEnded says whether a watched run is over: no trial is running, no
// live process holds a lease of the study, and the process that owned the
// latest trial is gone, or (owner on another host or unknown) nothing
// changed for quietPolls reads. A waiting trial (a queued retry or
// confirmation rerun) does not keep the watch alive by itself: only a live
// process runs it, and when none is left it waits for the next run.
func runEnded(recs []search.Record, leases []storage.Lease, host string, now time.Time, lastCount int, quiet *int) (bool, string) {
	var owner string
	var waiting []int
	for _, r := range recs {
		// A running trial whose process died (kill -9) is stale, not running:
		// the next run re-runs it.
		if r.State == search.StateRunning && search.OwnerLive(r.Owner, host) != search.LiveNo {
			*quiet = 0
			return false, ""
		}
		if r.State == search.StateWaiting {
			waiting = append(waiting, r.Number)
		}
		if r.Owner != "" {
			owner = r.Owner // records are in trial order: the latest wins
		}
	}
	for _, l := range leases {
		if leaseLive(l, host, now) {
			*quiet = 0
			return false, ""
		}
	}
	queued := queuedNote(waiting)
	switch search.OwnerLive(owner, host) {
	case search.LiveNo:
		return true, fmt.Sprintf("no trial is running and the run (process %s) has ended%s", owner, queued)
	case search.LiveYes:
		*quiet = 0
		return false, ""
	}
	if len(recs) == lastCount {
		*quiet++
	} else {
		*quiet = 0
	}
	if *quiet >= quietPolls {
		return true, fmt.Sprintf("no trial is running and nothing changed for %d reads%s", quietPolls, queued)
	}
	return false, ""
}

// leaseLive says whether a lease's holder still runs the study: a process
// of this host while it lives, another host's until the lease expires
// (it renews it while it runs).
func leaseLive(l storage.Lease, host string, now time.Time) bool {
	switch search.OwnerLive(l.Holder, host) {
	case search.LiveYes:
		return true
	case search.LiveNo:
		return false
	}
	return !l.Expired(now)
}

// queuedNote says which trials wait for the next run ("" when none).
func queuedNote(nums []int) string {
	switch len(nums) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("; trial %d is queued and runs when the study resumes", nums[0])
	}
	s := make([]string, len(nums))
	for i, n := range nums {
		s[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("; trials %s are queued and run when the study resumes", strings.Join(s, ", "))
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

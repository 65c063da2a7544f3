// randseednop=0 lets the study's seed reach goptuna's TPE, which draws from
// the global math/rand (reference/go-libraries.md §1).
//go:debug randseednop=0

// Command sgtune tunes the launch flags of an LLM-serving engine (SGLang
// first): it proposes configurations, rejects impossible ones, launches and
// benchmarks the rest, stores every trial and exports the winner.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/space"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // runtime failure
	exitUsage   = 2 // bad input; nothing was written
)

// usageError marks an error as bad input (exit code 2).
type usageError struct{ err error }

// Error implements error.
func (e usageError) Error() string { return e.err.Error() }

// Unwrap returns the bad-input error.
func (e usageError) Unwrap() error { return e.err }

// badInput wraps err so that main exits with code 2.
func badInput(err error) error { return usageError{err} }

// app is the process environment a command runs in; tests build their own.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// interrupts delivers SIGINT/SIGTERM. run stops gracefully on the
	// first, tears down at once on the second and exits on the third;
	// every other command is cancelled on the first.
	interrupts <-chan os.Signal
	// exit ends the process (the third interrupt of run); nil in tests.
	exit func(code int)
}

func main() {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	a := &app{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, interrupts: sig, exit: os.Exit}
	os.Exit(a.execute(context.Background(), os.Args[1:]))
}

// execute runs the CLI with args and returns the exit code.
func (a *app) execute(ctx context.Context, args []string) int {
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	// run handles its interrupts itself (graceful, then at once); any other
	// command is simply cancelled by the first one.
	var interrupted atomic.Bool
	if c, _, err := root.Find(args); err != nil || c.Name() != "run" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-a.interrupts:
				interrupted.Store(true)
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	err := root.ExecuteContext(ctx)
	if interrupted.Load() {
		fmt.Fprintln(a.stderr, "sgtune: interrupted")
		return exitInterrupted
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(a.stderr, "sgtune:", err)
	var ue usageError
	// cobra reports an unknown command with an untyped error.
	if errors.As(err, &ue) || errors.Is(err, space.ErrInvalid) || strings.HasPrefix(err.Error(), "unknown command") {
		return exitUsage
	}
	if errors.As(err, new(interruptedError)) {
		return exitInterrupted
	}
	return exitFailure
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sgtune",
		Short: "Autotune the launch flags of an SGLang server",
		Long: `sgtune finds the best way to launch an LLM-serving engine on a set of GPUs.
It proposes SGLang launch configurations, rejects the ones that cannot work
before spending GPU time on them, launches and benchmarks the rest, keeps every
trial in SQLite, resumes after interruption, and exports the winner as a launch
script.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return badInput(fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
	})
	root.AddCommand(
		a.runCmd(),
		a.statusCmd(),
		a.bestCmd(),
		a.exportCmd(),
		a.reportCmd(),
		a.checkCmd(),
		a.benchCmd(),
		a.rescoreCmd(),
	)
	return root
}

// Command sgtune tunes the launch flags of an LLM-serving engine (SGLang
// first): it proposes configurations, rejects impossible ones, launches and
// benchmarks the rest, stores every trial and exports the winner.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/storage"
)

// Exit codes (errext decides them where errors are made).
const (
	exitOK          = int(errext.OK)
	exitFailure     = int(errext.Failure)     // runtime failure
	exitUsage       = int(errext.BadInput)    // bad input; nothing was written
	exitInterrupted = int(errext.Interrupted) // Ctrl-C stopped the command
)

// badInput marks err as bad input: main exits with code 2.
func badInput(err error) error { return errext.Bad(err) }

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
	// A closed terminal or ssh session (SIGHUP) stops a run as Ctrl-C does:
	// its trial is stopped, its Slurm job cancelled, and it is re-run on
	// resume (a HUP killed the process and left the job holding its GPUs).
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	if len(os.Args) > 1 && (os.Args[1] == "run" || os.Args[1] == "worker") {
		// A command that only reads (`sgtune best | head -1`) dies of the
		// closed pipe silently, as Unix tools do; one that runs trials
		// must stop them first.
		stopOnClosedOutput(sig)
	}
	a := &app{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, interrupts: sig, exit: os.Exit}
	os.Exit(a.execute(context.Background(), os.Args[1:]))
}

// stopOnClosedOutput sends sig one stop when standard output or error turns
// out to be a pipe nobody reads (`sgtune worker | head`, a tee that died):
// by default Go dies of the first write to it, which left a Slurm trial's
// job holding its GPUs and a local trial marked running. Later writes
// there fail quietly. A SIGPIPE of a socket (a server that crashed while a
// request was sent) is no stop: the load generator reads its error.
func stopOnClosedOutput(sig chan<- os.Signal) {
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	// Lives as long as the process, as the signal channel does.
	go func() {
		for range pipe {
			if closedPipe(1) || closedPipe(2) {
				signal.Ignore(syscall.SIGPIPE)
				select {
				case sig <- syscall.SIGPIPE:
				default: // a stop is already pending
				}
				return
			}
		}
	}()
}

// closedPipe reports whether fd is a pipe whose reading end is closed
// (poll reports POLLERR on its writing end).
func closedPipe(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&unix.POLLERR != 0
}

// execute runs the CLI with args and returns the exit code.
func (a *app) execute(ctx context.Context, args []string) int {
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	// cobra adds help and completion only inside Execute; add them now, so
	// that Find below knows them.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	// run and worker handle their interrupts themselves (graceful, then at once); any other
	// command is simply cancelled by the first one.
	c, _, err := root.Find(args)
	if err != nil {
		// An unknown command: cobra's error is untyped, so decide here.
		fmt.Fprintln(a.stderr, "sgtune:", err)
		return exitUsage
	}
	var interrupted atomic.Bool
	if c.Name() != "run" && c.Name() != "worker" {
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
	err = root.ExecuteContext(ctx)
	if interrupted.Load() {
		fmt.Fprintln(a.stderr, "sgtune: interrupted")
		return exitInterrupted
	}
	if err != nil {
		fmt.Fprintln(a.stderr, "sgtune:", err)
		if storage.IsFull(err) {
			next := ""
			if c.Name() == "run" || c.Name() == "worker" {
				next = ": the study resumes where it stopped (every completed trial is stored)"
			}
			fmt.Fprintf(a.stderr, "sgtune: the disk is full: free space there, then run the same command again%s\n", next)
		}
	}
	return int(errext.Code(err))
}

// version is set when linking (the Makefile passes git describe with
// -ldflags "-X main.version=..."); without it the module version of the
// build (a tag with go install), else "(devel)".
var version string

// buildVersion is what --version prints after "sgtune ".
func buildVersion() string {
	v := version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
	}
	return fmt.Sprintf("%s (%s %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
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
		Version:       buildVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.storageFromEnv(cmd)
		},
	}
	root.SetVersionTemplate("sgtune {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return badInput(fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
	})
	root.AddCommand(
		a.runCmd(),
		a.workerCmd(),
		a.statusCmd(),
		a.bestCmd(),
		a.exportCmd(),
		a.reportCmd(),
		a.checkCmd(),
		a.benchCmd(),
		a.rescoreCmd(),
		a.schemaCmd(),
	)
	return root
}

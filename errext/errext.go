// Package errext attaches a process exit code to an error, so that the code
// is decided where the error is made and mapped once, in main, with
// errors.As (after k6's errext). Wrapping keeps Unwrap, so errors.Is still
// sees the cause.
package errext

import "errors"

// ExitCode is a process exit status.
type ExitCode int

// The exit codes sgtune uses (README "Exit codes").
const (
	// OK: the command did what it was asked (also a study whose every
	// trial failed: the summary says why).
	OK ExitCode = 0
	// Failure: a runtime failure (storage, network, a server that could
	// not be stopped).
	Failure ExitCode = 1
	// BadInput: the input was wrong (a study file, a flag, a storage that
	// does not exist); nothing was written.
	BadInput ExitCode = 2
	// Interrupted: Ctrl-C stopped the command before it finished.
	Interrupted ExitCode = 130
)

// HasExitCode is an error that decides the process exit code.
type HasExitCode interface {
	error
	ExitCode() ExitCode
}

type withCode struct {
	err  error
	code ExitCode
}

func (w withCode) Error() string      { return w.err.Error() }
func (w withCode) Unwrap() error      { return w.err }
func (w withCode) ExitCode() ExitCode { return w.code }

// WithExitCode returns err carrying code (nil for a nil err). An error that
// already carries a code keeps its own: the innermost decision stands.
func WithExitCode(err error, code ExitCode) error {
	if err == nil {
		return nil
	}
	var hc HasExitCode
	if errors.As(err, &hc) {
		return err
	}
	return withCode{err: err, code: code}
}

// Bad marks err as bad input (exit code 2).
func Bad(err error) error { return WithExitCode(err, BadInput) }

// Code returns the exit code err carries: OK for nil, Failure when it
// carries none.
func Code(err error) ExitCode {
	if err == nil {
		return OK
	}
	var hc HasExitCode
	if errors.As(err, &hc) {
		return hc.ExitCode()
	}
	return Failure
}

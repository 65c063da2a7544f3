// Package launcher starts, watches and stops serving-engine processes. It
// parses facts from their startup logs and classifies how they ended. It does
// not measure.
package launcher

import (
	"context"
	"errors"
	"time"
)

// Failure classes stored with a failed trial.
const (
	ClassIllegalMemoryAccess = "illegal_memory_access"
	ClassOOM                 = "oom"
	ClassStartupCrash        = "startup_crash"
	ClassStartupTimeout      = "startup_timeout"
	ClassHang                = "hang"
	ClassCrashed             = "crashed"
	ClassBadCommand          = "bad_command"
)

// Spec is one server to start.
type Spec struct {
	Argv           []string      // program and flags, without --host/--port (the launcher adds them)
	Env            []string      // extra KEY=VALUE entries
	GPUs           []int         // exported as CUDA_VISIBLE_DEVICES when non-empty
	LogPath        string        // the server's combined stdout/stderr
	StartupTimeout time.Duration // 0 means 20 minutes
	APIKey         string        // used for readiness probes only; never logged
}

// Facts are what the startup log says about the server.
type Facts struct {
	MaxTotalNumTokens           int     `json:"max_total_num_tokens"`
	MaxRunningRequests          int     `json:"max_running_requests"`
	RequestedMaxRunningRequests int     `json:"requested_max_running_requests,omitempty"` // from the reduction warning
	MambaCacheSize              int     `json:"max_mamba_cache_size,omitempty"`
	ChunkedPrefillSize          int     `json:"chunked_prefill_size,omitempty"`
	ContextLen                  int     `json:"context_len,omitempty"`
	CUDAGraph                   bool    `json:"cuda_graph"`
	StartupS                    float64 `json:"startup_s"`
}

// Failure is how a server failed; it is an error.
type Failure struct {
	Class    string
	ExitCode int
	Excerpt  string // the log lines that decided the class
	Err      error
}

func (f *Failure) Error() string { return f.Class }

// Server is a started, ready server.
type Server struct {
	URL   string
	PID   int
	Facts Facts
}

// Start launches spec and waits until the server is ready, has died, or the
// startup timeout passed. On failure the error is a *Failure.
func Start(ctx context.Context, spec Spec) (*Server, error) {
	return nil, errors.New("launcher.Start: not implemented")
}

// Exited is closed when the server process has exited.
func (s *Server) Exited() <-chan struct{} { return nil }

// Failure classifies how the server ended; nil while it runs or after a clean stop.
func (s *Server) Failure() *Failure { return nil }

// Stop ends the server's process group: SIGTERM, a grace period, SIGKILL,
// then waits until its port is free.
func (s *Server) Stop(ctx context.Context) error { return nil }

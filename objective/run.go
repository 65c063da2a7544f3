package objective

import (
	"context"
	"errors"
)

// Options tune one run of a workload.
type Options struct {
	// Progress, when set, receives one human-readable line per finished point.
	Progress func(line string)
}

// ErrHang reports that no token arrived for the hang timeout while requests were in flight.
var ErrHang = errors.New("no token progress")

// Run measures w against t. The Result holds every point finished so far,
// also when an error ends the run early.
func Run(ctx context.Context, t Target, w Workload, opt Options) (*Result, error) {
	return nil, errors.New("objective.Run: not implemented")
}

// Score computes the study's score from stored points. ok is false when the
// SLO or a gate is not met; reason says why.
func Score(spec ScoreSpec, r *Result) (value float64, ok bool, reason string) {
	return 0, false, "not implemented"
}

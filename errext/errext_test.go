package errext

import (
	"errors"
	"fmt"
	"testing"
)

func TestCode(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		name string
		err  error
		want ExitCode
	}{
		{"nil", nil, OK},
		{"plain", cause, Failure},
		{"bad input", Bad(cause), BadInput},
		{"wrapped bad input", fmt.Errorf("loading: %w", Bad(cause)), BadInput},
		{"innermost code stands", WithExitCode(Bad(cause), Interrupted), BadInput},
		{"interrupted", WithExitCode(cause, Interrupted), Interrupted},
		{"joined: the first coded", errors.Join(cause, Bad(cause)), BadInput},
	}
	for _, tc := range tests {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("%s: Code = %d, want %d", tc.name, got, tc.want)
		}
	}
	if err := Bad(cause); !errors.Is(err, cause) || err.Error() != "cause" {
		t.Errorf("Bad hides its cause: %v", err)
	}
	if WithExitCode(nil, BadInput) != nil {
		t.Error("nil error got a code")
	}
}

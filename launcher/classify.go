package launcher

import (
	"slices"

	"github.com/sgtune/sgtune/engine"
)

// classifyExit is classify for an exit the kernel's OOM killer may have
// caused (a container's State.OOMKilled): oom decides it.
func classifyExit(m *logMatch, exitCode int, readyBefore, oom bool) string {
	if oom {
		return engine.ClassOOM
	}
	return classify(m, exitCode, readyBefore)
}

// classify decides the class of a process that exited on its own, from the
// decisive log line's signature (see engine.Signature) and the exit status.
// readyBefore says whether it had become ready.
func classify(m *logMatch, exitCode int, readyBefore bool) string {
	if m != nil && m.sig != nil {
		switch {
		case len(m.sig.ExitCodes) == 0:
			return m.sig.Class
		case !readyBefore && slices.Contains(m.sig.ExitCodes, exitCode):
			return m.sig.Class
		}
	}
	if readyBefore {
		return engine.ClassCrashed
	}
	return engine.ClassStartupCrash
}

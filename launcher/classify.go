package launcher

import (
	"regexp"
	"strings"
)

// Substrings that decide a failure class, from PyTorch/SGLang texts
// (reference/sglang.md §3). Matching is on single, redacted log lines.
var (
	imaTexts = []string{
		"an illegal memory access was encountered", // RuntimeError / torch.AcceleratorError / NCCL watchdog
		"cudaErrorIllegalAddress",
	}
	oomTexts = []string{
		"CUDA out of memory", // torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...
		"OutOfMemoryError",   // torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
		"CUDA error: out of memory",
		"Not enough memory",     // RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
		"Not enough GPU memory", // hybrid state cache sizing
		"leave no GPU memory for the KV cache",
		"state cache is too small to serve any requests",
		"scheduler died during initialization (exit code: -9)", // host OOM killer
	}
	portTexts = []string{
		"address already in use", // uvicorn: [Errno 98] error while attempting to bind on address ...: address already in use
		"Address already in use",
		"[Errno 98]",
	}
	// argparse: "usage: launch_server.py [-h] ..." then "prog: error: ...".
	reUsage = regexp.MustCompile(`^usage: |: error: (unrecognized arguments|argument |the following arguments are required|invalid choice)`)
)

// fatalClass returns the class a log line points to ("" if none) and
// whether it reports the listening port as taken.
func fatalClass(line string) (class string, port bool) {
	for _, t := range portTexts {
		if strings.Contains(line, t) {
			port = true
			break
		}
	}
	for _, t := range imaTexts {
		if strings.Contains(line, t) {
			return ClassIllegalMemoryAccess, port
		}
	}
	for _, t := range oomTexts {
		if strings.Contains(line, t) {
			return ClassOOM, port
		}
	}
	if reUsage.MatchString(line) {
		return ClassBadCommand, port
	}
	return "", port
}

// rank orders log-derived classes: a more specific cause replaces a less
// specific one seen earlier in the same log.
func rank(class string) int {
	switch class {
	case ClassIllegalMemoryAccess:
		return 3
	case ClassOOM:
		return 2
	case ClassBadCommand:
		return 1
	}
	return 0
}

// classify decides the class of a process that exited on its own.
// readyBefore says whether it had become ready.
func classify(m *logMatch, exitCode int, readyBefore bool) string {
	if m != nil {
		switch m.class {
		case ClassIllegalMemoryAccess, ClassOOM:
			return m.class
		case ClassBadCommand:
			if exitCode == 2 && !readyBefore {
				return ClassBadCommand
			}
		}
	}
	if readyBefore {
		return ClassCrashed
	}
	return ClassStartupCrash
}

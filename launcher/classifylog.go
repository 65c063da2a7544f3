package launcher

import (
	"fmt"
	"io"

	"github.com/sgtune/sgtune/engine"
)

// ClassifyLog classifies a server that ended on its own, from its whole
// log and exit status, exactly as Start (readyBefore false) and
// Server.Failure (readyBefore true) classify a process they watched, with
// the engine's signatures. It is for engines run in process, such as the
// simulator in virtual time.
func ClassifyLog(e *engine.Engine, log io.Reader, exitCode int, readyBefore bool) *Failure {
	sink := newLineSink(nil, newRedactor(nil), e)
	if _, err := io.Copy(sink, log); err != nil {
		sink.note(fmt.Sprintf("reading the log: %v", err))
	}
	sink.flush()
	_, _, m := sink.state()
	class := classify(m, exitCode, readyBefore)
	if readyBefore {
		sink.note(fmt.Sprintf("exited with status %d after ready", exitCode))
	} else {
		sink.note(fmt.Sprintf("exited with status %d before ready: %s", exitCode, class))
	}
	f := &Failure{Class: class, ExitCode: exitCode,
		Reason: sink.reason(m), Excerpt: sink.excerpt(m), Tail: sink.Tail(tailLines)}
	if f.Reason == "" {
		f.Reason = fmt.Sprintf("exited with status %d", exitCode)
	}
	return f
}

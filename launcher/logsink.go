package launcher

import (
	"bytes"
	"fmt"

	"github.com/sgtune/sgtune/engine"

	"io"
	"regexp"
	"strings"
	"sync"
)

// Redacted replaces every secret in what the launcher writes or returns.
const Redacted = "<redacted>"

// notePrefix starts the lines the launcher itself writes to the log.
const notePrefix = "# sgtune launcher: "

// maxPartial bounds how much of an unterminated line is buffered before it is
// flushed anyway (tqdm progress bars use \r and can grow without a newline).
const maxPartial = 64 * 1024

// redactor replaces secrets in text.
type redactor struct {
	secrets []string // non-empty, longest first
	maxLen  int
}

func newRedactor(secrets []string) *redactor {
	r := &redactor{}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		r.secrets = append(r.secrets, s)
		r.maxLen = max(r.maxLen, len(s))
	}
	// Longest first, so a secret that contains another is replaced whole.
	for i := 1; i < len(r.secrets); i++ {
		for j := i; j > 0 && len(r.secrets[j]) > len(r.secrets[j-1]); j-- {
			r.secrets[j], r.secrets[j-1] = r.secrets[j-1], r.secrets[j]
		}
	}
	return r
}

// String returns s with every secret replaced by Redacted.
func (r *redactor) String(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, Redacted)
	}
	return s
}

// lineSink receives the child's combined output through Write, redacts it
// line by line, writes it to the log file, and keeps what classification and
// readiness need: a tail of recent lines, the decisive lines around the first
// fatal pattern, and the facts parser. Safe for concurrent use.
type lineSink struct {
	red *redactor

	mu       sync.Mutex
	out      io.Writer // the log file; nil discards
	partial  []byte
	tail     []string // ring of the last tailCap lines
	tailNext int
	tailFull bool
	eng      *engine.Engine
	facts    engine.LogParser
	match    *logMatch // first fatal pattern of this attempt
	after    int       // lines still to append to match.lines
	onReady  func()    // called once, without mu held, when the ready line arrives
	onLine   func(string)
	// writeErr is the first error writing or closing the log file; no
	// line is written after it (the tail and the parsers go on).
	writeErr error
}

// logMatch is the first fatal-pattern line with its context.
type logMatch struct {
	sig   *engine.Signature // nil when only the port line matched
	port  bool              // a line says the port was taken
	line  string            // the decisive line
	lines []string          // the decisive line with context
}

const (
	tailCap       = 400
	contextBefore = 12
	contextAfter  = 6
	excerptMax    = 4096
)

func newLineSink(out io.Writer, red *redactor, eng *engine.Engine) *lineSink {
	return &lineSink{out: out, red: red, eng: eng, facts: eng.NewLogParser(), tail: make([]string, tailCap)}
}

// class is the match's failure class ("" when only the port line matched).
func (m *logMatch) class() string {
	if m == nil || m.sig == nil {
		return ""
	}
	return m.sig.Class
}

// rank orders matches: a more specific cause replaces a less specific one.
func (m *logMatch) rank() int {
	if m == nil || m.sig == nil {
		return 0
	}
	return m.sig.Rank
}

// Write implements io.Writer for the copy goroutine.
func (s *lineSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.partial = append(s.partial, p...)
	var readyNow bool
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		readyNow = s.lineLocked(string(s.partial[:i+1])) || readyNow
		s.partial = s.partial[i+1:]
	}
	if len(s.partial) > maxPartial {
		// Redact the whole buffer, then flush all but the last maxLen-1
		// bytes: a secret cut by the buffer's end lies wholly in what is kept.
		red := []byte(s.red.String(string(s.partial)))
		keep := max(s.red.maxLen-1, 0)
		cut := len(red) - keep
		readyNow = s.lineRawLocked(string(red[:cut])) || readyNow
		s.partial = append([]byte(nil), red[cut:]...)
	}
	if len(s.partial) == 0 {
		s.partial = nil // let a large backing array go
	}
	cb := s.onReady
	s.mu.Unlock()
	if readyNow && cb != nil {
		cb()
	}
	return len(p), nil
}

// flush emits an unterminated last line (at EOF).
func (s *lineSink) flush() {
	s.mu.Lock()
	var readyNow bool
	if len(s.partial) > 0 {
		readyNow = s.lineLocked(string(s.partial))
		s.partial = nil
	}
	cb := s.onReady
	s.mu.Unlock()
	if readyNow && cb != nil {
		cb()
	}
}

// note writes a launcher line (already free of secrets or not: it is
// redacted too) to the log and the tail.
func (s *lineSink) note(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lineLocked(notePrefix + line + "\n")
}

// lineLocked redacts one line and handles it; it reports whether this line
// made the server ready.
func (s *lineSink) lineLocked(raw string) bool {
	return s.lineRawLocked(s.red.String(raw))
}

func (s *lineSink) lineRawLocked(line string) bool {
	if s.out != nil && s.writeErr == nil {
		if _, err := io.WriteString(s.out, line); err != nil {
			s.writeErr = fmt.Errorf("launcher: write log: %w", err)
		}
	}
	text := engine.LastFrame(line) // tqdm redraws with \r: the tail and parsers keep the last frame
	if s.after > 0 && s.match != nil {
		s.match.lines = append(s.match.lines, text)
		s.after--
	}
	if sig, port := s.eng.Classify(text); sig != nil || port {
		m := &logMatch{sig: sig}
		if s.match == nil || m.rank() > s.match.rank() {
			// The first fatal line, or a more specific cause later in the log
			// (e.g. the CUDA error at the end of a "Scheduler hit an
			// exception" traceback), decides.
			m.port = port || (s.match != nil && s.match.port)
			m.line, m.lines = text, append(s.lastLocked(contextBefore), text)
			s.match = m
			s.after = contextAfter
		} else {
			s.match.port = s.match.port || port
			if sig != nil && sig.Class == s.match.class() && strings.Contains(text, ": error: ") {
				s.match.line = text // argparse's error line says more than its usage line
			}
		}
	}
	s.tail[s.tailNext] = text
	s.tailNext = (s.tailNext + 1) % len(s.tail)
	if s.tailNext == 0 {
		s.tailFull = true
	}
	wasReady := s.facts.Ready()
	s.facts.Line(text)
	if s.onLine != nil {
		s.onLine(text)
	}
	return !wasReady && s.facts.Ready()
}

// closeOut closes the log file f and stops writing to it; a failed close
// (buffered data lost on a network filesystem, say) is the log's error
// unless a write failed first.
func (s *lineSink) closeOut(f io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := f.Close(); err != nil && s.writeErr == nil {
		s.writeErr = fmt.Errorf("launcher: close log: %w", err)
	}
	s.out = nil
}

// logErr returns the first error writing or closing the log file, nil
// when there was none.
func (s *lineSink) logErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeErr
}

// lastLocked returns up to n most recent lines, oldest first.
func (s *lineSink) lastLocked(n int) []string {
	size := s.tailNext
	if s.tailFull {
		size = len(s.tail)
	}
	n = min(n, size)
	out := make([]string, 0, n)
	for i := n; i > 0; i-- {
		out = append(out, s.tail[(s.tailNext-i+len(s.tail))%len(s.tail)])
	}
	return out
}

// Tail returns the last n lines joined with newlines (already redacted).
func (s *lineSink) Tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lastLocked(n), "\n")
}

// state returns a snapshot of the parsed facts, readiness, and the first
// fatal match.
func (s *lineSink) state() (engine.Facts, bool, *logMatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m *logMatch
	if s.match != nil {
		c := *s.match
		c.lines = append([]string(nil), s.match.lines...)
		m = &c
	}
	return s.facts.Facts(), s.facts.Ready(), m
}

// reset starts a new attempt: new parser, no match; the tail is kept so the
// log of earlier attempts stays visible.
func (s *lineSink) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.facts = s.eng.NewLogParser()
	s.match = nil
	s.after = 0
	s.partial = nil
}

// excerpt returns the decisive lines (or the tail) capped at excerptMax
// bytes, keeping the end, where the error usually is.
func (s *lineSink) excerpt(m *logMatch) string {
	var text string
	if m != nil && len(m.lines) > 0 {
		text = strings.Join(m.lines, "\n")
	} else {
		text = s.Tail(40)
	}
	return capText(text, excerptMax)
}

// rePyException matches the last line of a Python traceback, e.g.
// "RuntimeError: ..." or "torch.OutOfMemoryError: ...".
var rePyException = regexp.MustCompile(`^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(:|$)`)

// reErrorish picks a generic crash's likely cause from the tail.
var reErrorish = regexp.MustCompile(`(?i)error|exception|failed|killed|assert`)

// reason returns the one line that best says why the server failed: the
// decisive line of a match, else the last Python exception line of the
// tail, else its last error-looking line, else "".
func (s *lineSink) reason(m *logMatch) string {
	if m != nil && m.line != "" {
		return strings.TrimSpace(m.line)
	}
	s.mu.Lock()
	lines := s.lastLocked(60)
	s.mu.Unlock()
	for _, re := range []*regexp.Regexp{rePyException, reErrorish} {
		for i := len(lines) - 1; i >= 0; i-- {
			l := lines[i]
			if !strings.HasPrefix(l, notePrefix) && !strings.HasPrefix(l, " ") && re.MatchString(l) {
				return strings.TrimSpace(l)
			}
		}
	}
	return ""
}

// capText keeps at most n bytes of s: the start of the decisive line
// region is less useful than its end, so it cuts from the front at a line
// boundary where it can.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return s
}

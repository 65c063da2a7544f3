package launcher

import (
	"github.com/sgtune/sgtune/engine"

	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSinkTailAndExcerpt(t *testing.T) {
	var out bytes.Buffer
	s := newLineSink(&out, newRedactor([]string{"KEY123"}), engine.SGLang)
	for i := range 500 {
		fmt.Fprintf(s, "line %d KEY123\n", i)
	}
	if got := s.Tail(2); got != "line 498 <redacted>\nline 499 <redacted>" {
		t.Errorf("Tail(2) = %q", got)
	}
	if n := strings.Count(s.Tail(10000), "\n") + 1; n != tailCap {
		t.Errorf("tail holds %d lines, want %d", n, tailCap)
	}
	_, _ = s.Write([]byte(imaTraceback))
	for i := range 50 {
		fmt.Fprintf(s, "after %d\n", i)
	}
	_, _, m := s.state()
	if m == nil || m.class() != engine.ClassIllegalMemoryAccess {
		t.Fatalf("match = %+v", m)
	}
	ex := s.excerpt(m)
	for _, want := range []string{"Scheduler hit an exception", "RuntimeError: CUDA error: an illegal memory access", "after 0"} {
		if !strings.Contains(ex, want) {
			t.Errorf("excerpt lacks %q:\n%s", want, ex)
		}
	}
	if strings.Contains(ex, "after 10") {
		t.Errorf("excerpt runs on too long:\n%s", ex)
	}
	if strings.Contains(out.String(), "KEY123") {
		t.Error("log holds the key")
	}
}

func TestSinkMoreSpecificClassWins(t *testing.T) {
	tests := []struct {
		log   string
		class string
		port  bool
	}{
		{"usage: x\nfoo\n" + oomTraceback, engine.ClassOOM, false},
		{oomTraceback + imaTraceback, engine.ClassIllegalMemoryAccess, false},
		{imaTraceback + oomTraceback, engine.ClassIllegalMemoryAccess, false},
		{"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 1): address already in use\n", "", true},
		{"address already in use\n" + imaTraceback, engine.ClassIllegalMemoryAccess, true},
		{genericTraceback, "", false},
	}
	for i, tc := range tests {
		s := newLineSink(nil, newRedactor(nil), engine.SGLang)
		_, _ = s.Write([]byte(tc.log))
		_, _, m := s.state()
		var class string
		var port bool
		if m != nil {
			class, port = m.class(), m.port
		}
		if class != tc.class || port != tc.port {
			t.Errorf("%d: class %q port %v, want %q %v", i, class, port, tc.class, tc.port)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		m     *logMatch
		code  int
		ready bool
		want  string
	}{
		{nil, 1, false, engine.ClassStartupCrash},
		{nil, 1, true, engine.ClassCrashed},
		{nil, 0, true, engine.ClassCrashed},
		{&logMatch{sig: sig(engine.ClassOOM)}, 1, false, engine.ClassOOM},
		{&logMatch{sig: sig(engine.ClassIllegalMemoryAccess)}, 134, true, engine.ClassIllegalMemoryAccess},
		{&logMatch{sig: sig(engine.ClassBadCommand)}, 2, false, engine.ClassBadCommand},
		{&logMatch{sig: sig(engine.ClassBadCommand)}, 1, false, engine.ClassStartupCrash},
		{&logMatch{port: true}, 1, false, engine.ClassStartupCrash},
	}
	for _, tc := range tests {
		if got := classify(tc.m, tc.code, tc.ready); got != tc.want {
			t.Errorf("classify(%+v, %d, %v) = %s, want %s", tc.m, tc.code, tc.ready, got, tc.want)
		}
	}
}

func TestCapText(t *testing.T) {
	long := strings.Repeat("0123456789\n", 1000) + "the end"
	got := capText(long, 100)
	if len(got) > 100 || !strings.HasSuffix(got, "the end") || !strings.HasPrefix(got, "0123") {
		t.Errorf("capText = %q", got)
	}
}

// TestSinkLongLineSecretAtFlushBoundary puts a key across the point where an
// unterminated line is flushed.
func TestSinkLongLineSecretAtFlushBoundary(t *testing.T) {
	const key = "sk-ABCDEFGHIJKLMNOP"
	for _, off := range []int{-len(key) - 1, -len(key), -len(key) / 2, -1, 0, 1, len(key)} {
		var out bytes.Buffer
		s := newLineSink(&out, newRedactor([]string{key}), engine.SGLang)
		data := strings.Repeat("x", maxPartial+off) + key + strings.Repeat("y", 100) + key
		for i := 0; i < len(data); i += 4096 {
			_, _ = s.Write([]byte(data[i:min(i+4096, len(data))]))
		}
		s.flush()
		if strings.Contains(out.String(), key) {
			t.Errorf("offset %d: key leaked", off)
		}
		if strings.Count(out.String(), Redacted) != 2 {
			t.Errorf("offset %d: %d redactions", off, strings.Count(out.String(), Redacted))
		}
		if out.Len() != len(data)-2*len(key)+2*len(Redacted) {
			t.Errorf("offset %d: %d bytes out", off, out.Len())
		}
	}
}

func TestRedactorLongestFirst(t *testing.T) {
	r := newRedactor([]string{"abc", "", "abcdef"})
	if got := r.String("xabcdefx abc"); got != "x<redacted>x <redacted>" {
		t.Errorf("got %q", got)
	}
}

func FuzzRedaction(f *testing.F) {
	f.Add([]byte("server_args=ServerArgs(api_key='sk-1234')\n--api-key sk-1234 x"), "sk-1234", uint16(20), uint16(3))
	f.Add([]byte("aaaa\r\naaa"), "aa", uint16(1), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, secret string, cut, step uint16) {
		if secret == "" || strings.ContainsAny(secret, "<>\r\n") || strings.Contains(Redacted, secret) {
			return
		}
		var out bytes.Buffer
		s := newLineSink(&out, newRedactor([]string{secret}), engine.SGLang)
		c := min(int(cut), len(data))
		_, _ = s.Write(data[:c])
		st := max(int(step), 1)
		for i := c; i < len(data); i += st {
			_, _ = s.Write(data[i:min(i+st, len(data))])
		}
		s.flush()
		if strings.Contains(out.String(), secret) {
			t.Fatalf("secret %q in log %q", secret, out.String())
		}
		if strings.Contains(s.Tail(tailCap), secret) {
			t.Fatalf("secret %q in tail", secret)
		}
		want := strings.ReplaceAll(string(data), secret, Redacted)
		if len(data) <= maxPartial && out.String() != want {
			t.Fatalf("log %q, want %q", out.String(), want)
		}
	})
}

// sig returns SGLang's signature of a class.
func sig(class string) *engine.Signature {
	for i := range engine.SGLang.Signatures {
		if engine.SGLang.Signatures[i].Class == class {
			return &engine.SGLang.Signatures[i]
		}
	}
	panic("no signature " + class)
}

// failingLog is a log file that takes n bytes, then fails every write; its
// Close returns closeErr.
type failingLog struct {
	n        int
	buf      bytes.Buffer
	closeErr error
}

var (
	errDiskFull = errors.New("no space left on device")
	errStaleNFS = errors.New("stale file handle")
)

func (f *failingLog) Write(p []byte) (int, error) {
	if f.buf.Len()+len(p) > f.n {
		return 0, errDiskFull
	}
	return f.buf.Write(p)
}

func (f *failingLog) Close() error { return f.closeErr }

// TestSinkLogErr: the first failed write or close of the log file is kept
// for the caller (before, a write error stopped the log silently and a
// close error was dropped), and the tail goes on after it.
func TestSinkLogErr(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int // bytes the log takes
		closeErr error
		want     error // nil: no error
		wantText string
	}{
		{name: "whole log", n: 1 << 20},
		{name: "disk full mid-trial", n: 20, want: errDiskFull, wantText: "launcher: write log: "},
		{name: "close fails", n: 1 << 20, closeErr: errStaleNFS, want: errStaleNFS, wantText: "launcher: close log: "},
		{name: "the write error is kept over the close's", n: 20, closeErr: errStaleNFS, want: errDiskFull, wantText: "launcher: write log: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &failingLog{n: tc.n, closeErr: tc.closeErr}
			s := newLineSink(f, newRedactor(nil), engine.SGLang)
			for i := range 5 {
				fmt.Fprintf(s, "line %d\n", i)
			}
			s.closeOut(f)
			err := s.logErr()
			if tc.want == nil {
				if err != nil {
					t.Errorf("logErr = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.HasPrefix(fmt.Sprint(err), tc.wantText) {
				t.Errorf("logErr = %v, want %q wrapping %v", err, tc.wantText, tc.want)
			}
			if got := s.Tail(1); got != "line 4" {
				t.Errorf("tail ends %q after the log failed, want line 4", got)
			}
		})
	}
}

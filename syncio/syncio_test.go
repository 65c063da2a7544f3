package syncio

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// slowBuffer writes p one byte at a time and yields between bytes, so
// that unserialised concurrent writes interleave.
type slowBuffer struct{ buf bytes.Buffer }

func (b *slowBuffer) Write(p []byte) (int, error) {
	for i := range p {
		b.buf.WriteByte(p[i])
		runtime.Gosched()
	}
	return len(p), nil
}

func TestWriterKeepsLinesWhole(t *testing.T) {
	var sb slowBuffer
	w := NewWriter(&sb)
	const writers, lines = 8, 200
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := strings.Repeat(string(rune('a'+g)), 40) + "\n"
			for range lines {
				if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
					t.Errorf("Write = %d, %v", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(sb.buf.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	for i, l := range got {
		if len(l) != 40 || strings.Count(l, l[:1]) != 40 {
			t.Fatalf("line %d interleaved: %q", i, l)
		}
	}
}

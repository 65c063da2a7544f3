// Package syncio holds I/O helpers safe for concurrent use.
package syncio

import (
	"io"
	"sync"
)

// Writer is an io.Writer whose Write calls are serialised: goroutines that
// each write whole lines through it never interleave their bytes.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter returns a Writer that writes to w. Every write to w must go
// through the Writer for the serialisation to hold.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p to the underlying writer while holding the lock.
func (l *Writer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

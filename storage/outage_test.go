package storage

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// proxy forwards TCP connections to a server until it is taken down
// (listener and open connections closed) and back up on the same address:
// a PostgreSQL restart or a network cut, seen from the client. Brought up
// as a black hole it accepts connections but never answers: a cut that
// drops packets, where connecting hangs instead of failing.
type proxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target}
	p.up("127.0.0.1:0")
	t.Cleanup(p.down)
	return p
}

func (p *proxy) up(addr string)        { p.listen(addr, false) }
func (p *proxy) blackHole(addr string) { p.listen(addr, true) }

func (p *proxy) listen(addr string, hole bool) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	p.wg.Add(1)
	go func() { // ends when down closes the listener
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if hole { // held open until down
				p.mu.Lock()
				p.conns = append(p.conns, c)
				p.mu.Unlock()
				continue
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

func (p *proxy) down() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// TestPostgresOutage: a write or read that finds the PostgreSQL server
// unreachable waits for it (a worker holding a measured trial stored it
// once the server was back, instead of losing it and exiting), and fails
// with errUnreachable after its OutageWait.
func TestPostgresOutage(t *testing.T) {
	s, px := proxiedStore(t)
	id, err := s.CreateNewStudy("outage")
	if err != nil {
		t.Fatal(err)
	}

	px.down()
	go func() {
		time.Sleep(time.Second)
		px.up(px.addr)
	}()
	start := time.Now()
	if err := s.SetStudyUserAttr(id, "k", "v"); err != nil {
		t.Fatalf("a write during a 1 s outage: %v", err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the write took %v: the outage was not seen", d)
	}
	if attrs, err := s.GetStudyUserAttrs(id); err != nil || attrs["k"] != "v" {
		t.Fatalf("after the outage: %v, %v", attrs, err)
	}

	// A read waits too.
	px.down()
	go func() {
		time.Sleep(time.Second)
		px.up(px.addr)
	}()
	if _, err := s.GetStudyUserAttrs(id); err != nil {
		t.Fatalf("a read during a 1 s outage: %v", err)
	}

	// An outage longer than OutageWait fails the write, saying why.
	s.SetOutageWait(500 * time.Millisecond)
	px.down()
	if err := s.SetStudyUserAttr(id, "k", "w"); !errors.Is(err, errUnreachable) {
		t.Errorf("a write during a long outage: %v, want %v", err, errUnreachable)
	}
	px.up(px.addr)
}

// TestPostgresOutageWaitSet: a store given a shorter OutageWait (a study
// with a short launch.stale_after) gives a write up after that wait, though
// the server comes back later, well inside the default minute; the wait is
// a minute by default and never more.
func TestPostgresOutageWaitSet(t *testing.T) {
	s, px := proxiedStore(t)
	if got := s.OutageWait(); got != time.Minute {
		t.Errorf("default OutageWait %v, want 1m", got)
	}
	s.SetOutageWait(time.Hour)
	if got := s.OutageWait(); got != time.Minute {
		t.Errorf("OutageWait set to 1h: %v, want the 1m cap", got)
	}
	id, err := s.CreateNewStudy("outage")
	if err != nil {
		t.Fatal(err)
	}

	const wait, outage = time.Second, 4 * time.Second
	s.SetOutageWait(wait)
	px.down()
	back := make(chan struct{})
	go func() {
		defer close(back)
		time.Sleep(outage)
		px.up(px.addr)
	}()
	start := time.Now()
	err = s.SetStudyUserAttr(id, "k", "v")
	d := time.Since(start)
	if !errors.Is(err, errUnreachable) {
		t.Errorf("a write during a %v outage with OutageWait %v: %v, want %v", outage, wait, err, errUnreachable)
	}
	if d < wait || d >= outage {
		t.Errorf("the write gave up after %v, want %v to %v", d, wait, outage)
	}
	<-back
}

// TestPostgresOutageBlackHole: during a cut that drops packets, where a
// connection attempt hangs for pgConnectTimeout (15 s) instead of failing,
// a write still gives up with errUnreachable soon after its OutageWait;
// once the server answers again the store works.
func TestPostgresOutageBlackHole(t *testing.T) {
	s, px := proxiedStore(t)
	id, err := s.CreateNewStudy("outage")
	if err != nil {
		t.Fatal(err)
	}

	const wait = time.Second
	s.SetOutageWait(wait)
	px.down()
	px.blackHole(px.addr)
	start := time.Now()
	err = s.SetStudyUserAttr(id, "k", "v")
	d := time.Since(start)
	if !errors.Is(err, errUnreachable) {
		t.Errorf("a write during a black-hole cut with OutageWait %v: %v, want %v", wait, err, errUnreachable)
	}
	if d < wait || d > 3*wait {
		t.Errorf("the write gave up after %v, want %v to %v", d, wait, 3*wait)
	}

	px.down()
	px.up(px.addr)
	if err := s.SetStudyUserAttr(id, "k", "w"); err != nil {
		t.Fatalf("a write once the server answers again: %v", err)
	}
	if attrs, err := s.GetStudyUserAttrs(id); err != nil || attrs["k"] != "w" {
		t.Fatalf("after the cut: %v, %v", attrs, err)
	}
}

// TestPostgresOutageConnectTimeout: a black-hole cut longer than the
// connect timeout but shorter than OutageWait is ridden out: a connection
// attempt that runs out of connect_timeout is tried again, not taken for
// a failure of the write.
func TestPostgresOutageConnectTimeout(t *testing.T) {
	s, px := proxiedStore(t, "connect_timeout", "1")
	id, err := s.CreateNewStudy("outage")
	if err != nil {
		t.Fatal(err)
	}

	s.SetOutageWait(5 * time.Second)
	px.down()
	px.blackHole(px.addr)
	back := make(chan struct{})
	go func() { // owned by the test: it waits for the server to be back
		defer close(back)
		time.Sleep(2500 * time.Millisecond)
		px.down()
		px.up(px.addr)
	}()
	defer func() { <-back }()
	if err := s.SetStudyUserAttr(id, "k", "v"); err != nil {
		t.Fatalf("a write during a 2.5 s black-hole cut with connect_timeout=1: %v", err)
	}
	if attrs, err := s.GetStudyUserAttrs(id); err != nil || attrs["k"] != "v" {
		t.Fatalf("after the cut: %v, %v", attrs, err)
	}
}

// proxiedStore opens a store on a fresh PostgreSQL database reached
// through a proxy the test can cut (see proxy), its URL given the query
// parameters in keyValues (key, value, ...); the store closes with t.
func proxiedStore(t *testing.T, keyValues ...string) (*Store, *proxy) {
	t.Helper()
	b := postgresBackend(t)
	dsn, err := url.Parse(b.newDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, dsn.Host)
	dsn.Host = px.addr
	q := dsn.Query()
	for i := 0; i+1 < len(keyValues); i += 2 {
		q.Set(keyValues[i], keyValues[i+1])
	}
	dsn.RawQuery = q.Encode()
	s, err := Open(dsn.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, px
}

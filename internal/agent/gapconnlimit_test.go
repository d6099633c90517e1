package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// limitServer serves, on a unix socket behind a connLimit of max
// connections, an HTTP handler that answers "/" at once and "/hold" once
// release is closed (or the test ends).
type limitServer struct {
	t       *testing.T
	l       *connLimit
	path    string
	release chan struct{}
	held    chan struct{} // a /hold request arrived
}

func startLimitServer(t *testing.T, max int) *limitServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &limitServer{t: t, path: path, release: make(chan struct{}), held: make(chan struct{}, 16),
		l: limitListener(ln, max, "unix", newConnVecs(prometheus.NewRegistry()))}
	srv := &http.Server{ConnState: s.l.connState, IdleTimeout: time.Minute,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				s.held <- struct{}{}
				<-s.release
			}
			io.WriteString(w, "ok")
		})}
	served := make(chan struct{})
	go func() { srv.Serve(s.l); close(served) }()
	t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
		srv.Close()
		<-served
	})
	return s
}

// conn is a keep-alive client connection.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func (s *limitServer) dial() *conn {
	s.t.Helper()
	c, err := net.Dial("unix", s.path)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	return &conn{Conn: c, r: bufio.NewReader(c)}
}

// send writes a keep-alive GET of path.
func (c *conn) send(path string) error {
	_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	return err
}

// answer reads one answer within d.
func (c *conn) answer(d time.Duration) error {
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

// get sends a GET of path and reads its answer within d.
func (c *conn) get(path string, d time.Duration) error {
	if err := c.send(path); err != nil {
		return err
	}
	return c.answer(d)
}

// waitIdle waits until the listener counts n idle connections.
func (s *limitServer) waitIdle(n int) {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		s.l.mu.Lock()
		k := len(s.l.idle)
		s.l.mu.Unlock()
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d idle connections, want %d", k, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitWaits waits until the listener counted n waits at its limit.
func (s *limitServer) waitWaits(n float64) {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for testutil.ToFloat64(s.l.m.waits) < n {
		if time.Now().After(deadline) {
			s.t.Fatalf("%v waits at the limit, want %v", testutil.ToFloat64(s.l.m.waits), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// hold sends a /hold request on each of cs and waits until the handler
// holds them all.
func (s *limitServer) hold(cs ...*conn) {
	s.t.Helper()
	for _, c := range cs {
		if err := c.send("/hold"); err != nil {
			s.t.Fatal(err)
		}
		select {
		case <-s.held:
		case <-time.After(2 * time.Second):
			s.t.Fatal("a /hold request not taken in within 2 s")
		}
	}
}

// waitOpen waits until the listener counts n open connections.
func (s *limitServer) waitOpen(n float64) {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for testutil.ToFloat64(s.l.m.open) != n {
		if time.Now().After(deadline) {
			s.t.Fatalf("%v open connections, want %v", testutil.ToFloat64(s.l.m.open), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGapConnLimitHoldsItsCap guards the connection cap itself: with a
// cap of 2 and two connections busy, a third is not taken in; one of
// them answering and turning idle while the third waits is closed at
// once for it (Accept starved), and the third is answered. The open and
// limit gauges say so.
func TestGapConnLimitHoldsItsCap(t *testing.T) {
	s := startLimitServer(t, 2)
	if g := testutil.ToFloat64(s.l.m.limit); g != 2 {
		t.Fatalf("connections_limit %v, want 2", g)
	}
	s.hold(s.dial(), s.dial())
	if g := testutil.ToFloat64(s.l.m.open); g != 2 {
		t.Fatalf("connections_open %v with two open, want 2", g)
	}
	c := s.dial()
	if err := c.get("/", 300*time.Millisecond); err == nil {
		t.Fatal("a third connection answered beside two busy ones, at a cap of 2")
	}
	s.waitWaits(1)
	s.release <- struct{}{} // one answers, turns idle: closed for c
	if err := c.answer(2 * time.Second); err != nil {
		t.Fatalf("the third connection, one of the busy two turned idle: %v; want it closed for the third", err)
	}
	if n := testutil.ToFloat64(s.l.m.idleClosed); n < 1 {
		t.Fatalf("idle_connections_closed_total %v, want the one closed for the third counted", n)
	}
}

// TestGapConnLimitClosesAnIdleConnection guards the room made at the cap:
// the connection that fills the cap makes Accept close an idle keep-alive
// one (counted in idle_connections_closed_total), so the next connection
// is answered at once, not after the idle timeout.
func TestGapConnLimitClosesAnIdleConnection(t *testing.T) {
	s := startLimitServer(t, 2)
	a := s.dial()
	if err := a.get("/", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	s.waitIdle(1)
	s.hold(s.dial()) // the cap: a, idle, is closed for the next
	c := s.dial()
	if err := c.get("/", 2*time.Second); err != nil {
		t.Fatalf("a connection at the cap, beside an idle one: %v; want the idle one closed for it", err)
	}
	if n := testutil.ToFloat64(s.l.m.idleClosed); n < 1 {
		t.Fatalf("idle_connections_closed_total %v, want the idle connection closed counted", n)
	}
	if err := a.get("/", 2*time.Second); err == nil {
		t.Fatal("the idle connection still answers after it made room")
	}
}

// TestGapConnLimitStarvationEnds guards the end of a wait at the cap:
// once the listener has room again, a keep-alive connection that turns
// idle stays open for its next request (starved is cleared).
func TestGapConnLimitStarvationEnds(t *testing.T) {
	s := startLimitServer(t, 2)
	a, b := s.dial(), s.dial()
	s.hold(a, b)
	s.waitWaits(1)
	s.release <- struct{}{} // one of them answers, is closed: room again
	s.waitOpen(1)
	s.release <- struct{}{} // the other answers, turns idle, below the cap
	var kept *conn
	for _, c := range []*conn{a, b} {
		if c.answer(2*time.Second) == nil && c.get("/", 2*time.Second) == nil {
			kept = c
		}
	}
	if kept == nil {
		t.Fatal("below the cap again, an idle keep-alive connection was closed: none of the two answered a second request")
	}
}

// TestGapConnLimitKeepsIdleConnectionsBelowTheCap guards Accept's fast
// path: below the cap, a new connection neither counts a wait nor closes
// an idle one.
func TestGapConnLimitKeepsIdleConnectionsBelowTheCap(t *testing.T) {
	s := startLimitServer(t, 4)
	a := s.dial()
	if err := a.get("/", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	s.waitIdle(1)
	if err := s.dial().get("/", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := a.get("/", 2*time.Second); err != nil {
		t.Fatalf("an idle connection below the cap, after another came: %v", err)
	}
	if w, n := testutil.ToFloat64(s.l.m.waits), testutil.ToFloat64(s.l.m.idleClosed); w != 0 || n != 0 {
		t.Fatalf("below the cap: %v waits, %v idle closed; want none", w, n)
	}
}

// TestGapConnLimitDoesNotCloseABusyConnection guards connState's removal
// of a connection from the idle set when it turns active again: at the
// cap, a keep-alive connection busy with its second request is not
// closed under it to make room.
func TestGapConnLimitDoesNotCloseABusyConnection(t *testing.T) {
	s := startLimitServer(t, 2)
	a := s.dial()
	if err := a.get("/", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	s.waitIdle(1)
	s.hold(a)        // busy again
	s.hold(s.dial()) // the cap
	s.waitWaits(1)
	s.release <- struct{}{}
	s.release <- struct{}{}
	if err := a.answer(2 * time.Second); err != nil {
		t.Fatalf("a connection busy with its second request at the cap: %v; want its answer", err)
	}
}

// failingListener fails its first Accept.
type failingListener struct {
	net.Listener
	once sync.Once
}

func (l *failingListener) Accept() (net.Conn, error) {
	var failed bool
	l.once.Do(func() { failed = true })
	if failed {
		return nil, errors.New("accept failed")
	}
	return l.Listener.Accept()
}

// TestGapConnLimitSlots guards the slot accounting: a failed accept gives
// its slot back, a connection closed twice frees one slot (not another
// connection's), and Close ends an Accept waiting for room.
func TestGapConnLimitSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l := limitListener(&failingListener{Listener: ln}, 1, "unix", newConnVecs(prometheus.NewRegistry()))
	defer l.Close()
	accept := func() <-chan error {
		ch := make(chan error, 1)
		go func() {
			c, err := l.Accept()
			if err == nil {
				c.Close()
				c.Close() // twice: one slot freed
			}
			ch <- err
		}()
		return ch
	}
	if err := <-accept(); err == nil {
		t.Fatal("the first accept did not fail")
	}
	for i := range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		select {
		case err := <-accept():
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("accept %d after a failed accept and connections closed twice: waits for a slot at a cap of 1", i+1)
		}
	}
	if g := testutil.ToFloat64(l.m.open); g != 0 {
		t.Fatalf("connections_open %v with every connection closed, want 0", g)
	}
	// A connection holds the slot; an Accept waits; Close ends it.
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waiting := make(chan error, 1)
	go func() { _, err := l.Accept(); waiting <- err }()
	time.Sleep(20 * time.Millisecond)
	l.Close()
	select {
	case err := <-waiting:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a waiting Accept at Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end an Accept waiting for room")
	}
}

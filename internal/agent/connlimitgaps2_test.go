package agent

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGapConnLimitKeepsAConnectionTurningIdleWithASlotFree guards
// connState's "no slot free" condition: while Accept waits (starved) but
// a slot was freed meanwhile, not yet taken by the waiting Accept, a
// keep-alive connection turning idle is kept (that slot is Accept's
// without it); only with every slot held is it closed to make room.
func TestGapConnLimitKeepsAConnectionTurningIdleWithASlotFree(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l := limitListener(ln, 2, "unix", newConnVecs(prometheus.NewRegistry()))
	defer l.Close()
	pipe := func() *limitedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return &limitedConn{Conn: a, l: l}
	}
	// Accept found the cap and waits; one of the two connections closed
	// since, its slot not yet taken: one slot held, one free.
	l.mu.Lock()
	l.starved = true
	l.mu.Unlock()
	l.sem <- struct{}{}
	kept := pipe()
	l.connState(kept, http.StateIdle)
	l.mu.Lock()
	_, idle := l.idle[kept]
	l.mu.Unlock()
	if !idle || len(l.sem) != 1 || testutil.ToFloat64(l.m.idleClosed) != 0 {
		t.Fatalf("a connection turning idle while starved with a slot free: idle %v, %d slots held, %v idle closed; want it kept (idle, 1 slot, 0 closed)",
			idle, len(l.sem), testutil.ToFloat64(l.m.idleClosed))
	}
	// Every slot held: the next one turning idle makes room.
	l.sem <- struct{}{}
	closed := pipe()
	l.connState(closed, http.StateIdle)
	if len(l.sem) != 1 || testutil.ToFloat64(l.m.idleClosed) != 1 {
		t.Fatalf("a connection turning idle while starved at the cap: %d slots held, %v idle closed; want it closed (1 slot, 1 closed)",
			len(l.sem), testutil.ToFloat64(l.m.idleClosed))
	}
}

// TestGapConnLimitStaysStarvedAfterAStaleWake guards the wait at the cap
// against a wake left by an earlier close (a release with no Accept
// waiting): Accept, woken by it and finding no slot, still waits starved,
// so a connection turning idle is closed at once for the new one (not
// kept until its idle timeout), and the wait is counted once in
// connection_limit_waits_total.
func TestGapConnLimitStaysStarvedAfterAStaleWake(t *testing.T) {
	s := startLimitServer(t, 2)
	x := s.dial()
	if err := x.get("/", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	x.Close()
	s.waitOpen(0) // its release, no Accept waiting: a wake pending
	a, b := s.dial(), s.dial()
	s.hold(a, b)
	s.waitWaits(1)
	deadline := time.Now().Add(2 * time.Second)
	for len(s.l.room) != 0 { // the waiting Accept took the stale wake
		if time.Now().After(deadline) {
			t.Fatal("the waiting Accept did not take the pending wake within 2 s")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if w := testutil.ToFloat64(s.l.m.waits); w != 1 {
		t.Fatalf("connection_limit_waits_total %v after one wait at the cap (woken once by an earlier close), want 1", w)
	}
	c := s.dial()
	s.release <- struct{}{} // one of a, b answers, turns idle: closed for c
	if err := c.get("/", 2*time.Second); err != nil {
		t.Fatalf("a new connection at the cap, Accept woken by an earlier close, then one turned idle: %v; want the idle one closed for it", err)
	}
}

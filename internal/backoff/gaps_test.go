package backoff

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"
)

// TestJitterHalf protects the jitter's use of Jitter itself (the agent's
// dial and regionctl heartbeat use 0.5): a delay is drawn from
// [d, d(1+Jitter)], and at the cap from [Max/(1+Jitter), Max], spread.
func TestJitterHalf(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	b.Jitter = 0.5
	for range 200 {
		b.Reset()
		if d := b.Next(); d < 100*time.Millisecond || d > 150*time.Millisecond {
			t.Fatalf("first delay %v with jitter 0.5, want within [100ms, 150ms]", d)
		}
	}
	for range 10 {
		b.Next()
	}
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := b.Next()
		lo, hi = min(lo, d), max(hi, d)
	}
	if want := time.Second * 2 / 3; lo < want || hi > time.Second || hi-lo < 200*time.Millisecond {
		t.Fatalf("delays at the cap in [%v, %v], want spread within [%v, 1s]", lo, hi, want)
	}
}

// TestFactorAndNoReset protects Factor (the watch's retries use 10) and
// ResetAft 0, which never starts over however long the quiet.
func TestFactorAndNoReset(t *testing.T) {
	now := time.Unix(0, 0)
	b := New(100*time.Millisecond, time.Hour)
	b.Factor, b.Jitter, b.ResetAft = 3, 0, 0
	b.now = func() time.Time { return now }
	for i, want := range []time.Duration{100, 300, 900, 2700} {
		if d := b.Next(); d != want*time.Millisecond {
			t.Fatalf("delay %d with factor 3 = %v, want %v", i, d, want*time.Millisecond)
		}
		now = now.Add(24 * time.Hour)
	}
}

// TestWaitConnForgetsAFlap protects the flap's end: a connection that
// dropped and came back at once, then much later drops and comes back at
// once again, is not an outage of the time between (the wait goes on to
// its delay), though the first drop began more than MinOutage ago.
func TestWaitConnForgetsAFlap(t *testing.T) {
	c := &laterConn{conn: &conn{states: []connectivity.State{
		connectivity.Ready, connectivity.TransientFailure, connectivity.Ready, connectivity.Connecting, connectivity.Ready,
	}}, at: 3, after: MinOutage + 100*time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), MinOutage+500*time.Millisecond)
	defer cancel()
	if err := New(time.Hour, time.Hour).WaitConn(ctx, c, time.Time{}); err != context.DeadlineExceeded {
		t.Fatalf("WaitConn after two flaps %v apart = %v, want it still waiting at its context's end", c.after, err)
	}
}

// laterConn is a conn whose change into its state at index at (of the
// states it started with) comes only after a while.
type laterConn struct {
	*conn
	at    int
	after time.Duration
	n     int
}

func (c *laterConn) WaitForStateChange(ctx context.Context, from connectivity.State) bool {
	if c.n++; c.n == c.at {
		time.Sleep(c.after)
	}
	return c.conn.WaitForStateChange(ctx, from)
}

// TestSleepEndsWithItsContext protects Sleep's and Wait's early end: a
// cancelled context ends them at once with its error.
func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep with a cancelled context = %v, want context.Canceled", err)
	}
	if err := New(time.Hour, time.Hour).Wait(ctx); err != context.Canceled {
		t.Fatalf("Wait with a cancelled context = %v, want context.Canceled", err)
	}
	if err := New(time.Hour, time.Hour).WaitConn(ctx, nil, time.Time{}); err != context.Canceled {
		t.Fatalf("WaitConn without a connection, context cancelled = %v, want context.Canceled", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("cancelled waits took %v", waited)
	}
}

// TestLongOutageStaysCapped protects the cap over a long outage: after
// thousands of failures in a row every delay is still within
// [Max/(1+Jitter), Max] (the delay it grows from does not run past Max).
func TestLongOutageStaysCapped(t *testing.T) {
	for _, jitter := range []float64{0, 0.5, 1} {
		b := New(800*time.Millisecond, 30*time.Second)
		b.Jitter = jitter
		lo := time.Duration(float64(30*time.Second) / (1 + jitter))
		for i := range 5000 {
			if d := b.Next(); i > 10 && (d < lo || d > 30*time.Second) {
				t.Fatalf("jitter %v, failure %d: delay %v, want within [%v, 30s]", jitter, i, d, lo)
			}
		}
	}
}

// TestWaitConnCountsTheOutageFromItsStart protects where an outage is
// counted from: the first state seen not ready, not the last; down for
// MinOutage across two states of under MinOutage each is an outage.
func TestWaitConnCountsTheOutageFromItsStart(t *testing.T) {
	half := MinOutage/2 + 100*time.Millisecond
	c := &pacedConn{conn: &conn{states: []connectivity.State{
		connectivity.Ready, connectivity.TransientFailure, connectivity.Connecting, connectivity.Ready,
	}}, after: map[int]time.Duration{2: half, 3: half}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*MinOutage+500*time.Millisecond)
	defer cancel()
	if err := New(time.Hour, time.Hour).WaitConn(ctx, c, time.Time{}); err != nil {
		t.Fatalf("WaitConn after %v down in two states = %v, want nil at once", 2*half, err)
	}
}

// pacedConn is a conn whose n-th state change (from 1) comes only after
// after[n].
type pacedConn struct {
	*conn
	after map[int]time.Duration
	n     int
}

func (c *pacedConn) WaitForStateChange(ctx context.Context, from connectivity.State) bool {
	c.n++
	time.Sleep(c.after[c.n])
	return c.conn.WaitForStateChange(ctx, from)
}

package backoff

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"
)

func TestGrowsCapsAndResets(t *testing.T) {
	now := time.Unix(0, 0)
	b := New(100*time.Millisecond, time.Second)
	b.Jitter = 0
	b.now = func() time.Time { return now }
	var got []time.Duration
	for i := 0; i < 6; i++ {
		got = append(got, b.Next())
		now = now.Add(time.Second)
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delay %d = %v, want %v (all: %v)", i, got[i], want[i]*time.Millisecond, got)
		}
	}
	now = now.Add(3 * time.Minute)
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("after a quiet period delay = %v, want reset to 100ms", d)
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("after Reset delay = %v, want 100ms", d)
	}
}

func TestJitterBounded(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	for i := 0; i < 100; i++ {
		b.Reset()
		if d := b.Next(); d < 100*time.Millisecond || d > 200*time.Millisecond {
			t.Fatalf("jittered delay %v outside [100ms, 200ms]", d)
		}
	}
}

// TestCapHoldsWithJitter: at the cap the jittered delay stays within
// [Max/(1+Jitter), Max]: it went up to twice Max (jitter 1), so an agent
// waited up to a minute to retry an etcd that was back, where the docs say
// 30 s.
func TestCapHoldsWithJitter(t *testing.T) {
	b := New(800*time.Millisecond, 30*time.Second)
	for range 12 { // well past the cap
		b.Next()
	}
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := b.Next()
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi > 30*time.Second || lo < 15*time.Second {
		t.Fatalf("delays at the cap in [%v, %v], want within [15s, 30s]", lo, hi)
	}
	if hi-lo < 10*time.Second {
		t.Fatalf("delays at the cap in [%v, %v]: want them spread (jitter)", lo, hi)
	}
}

// conn is a connection whose states are given: each WaitForStateChange
// moves to the next one, and once they run out it waits for ctx.
type conn struct {
	states   []connectivity.State
	connects int
}

func (c *conn) GetState() connectivity.State { return c.states[0] }

func (c *conn) WaitForStateChange(ctx context.Context, from connectivity.State) bool {
	if len(c.states) > 1 {
		c.states = c.states[1:]
		return true
	}
	<-ctx.Done()
	return false
}

func (c *conn) Connect() { c.connects++ }

// TestWaitConnEndsWhenTheConnectionIsBack: a wait of an hour ends once a
// connection down for MinOutage is ready again (down since the caller's
// note, or since the wait found it down); an idle one is asked to
// connect. One ready all along, or back after a flap, waits on; a
// cancelled context ends a wait with its error. (The mirror's reconnect
// after an outage, over real etcd, is watch's
// TestWatchBackSoonAfterLongOutage.)
func TestWaitConnEndsWhenTheConnectionIsBack(t *testing.T) {
	b := New(time.Hour, time.Hour)
	c := &conn{states: []connectivity.State{connectivity.Ready, connectivity.TransientFailure, connectivity.Idle, connectivity.Connecting}}
	if err := b.WaitConn(context.Background(), &slowConn{c, MinOutage + 100*time.Millisecond}, time.Time{}); err != nil {
		t.Fatalf("WaitConn = %v, want nil once the connection is back after %v down", err, MinOutage)
	}
	if c.connects != 1 {
		t.Fatalf("an idle connection was asked to connect %d times, want 1", c.connects)
	}
	// Back before the wait began, after the caller found it down: no wait.
	long := time.Now().Add(-2 * MinOutage)
	if err := b.WaitConn(context.Background(), &conn{states: []connectivity.State{connectivity.Ready}}, long); err != nil {
		t.Fatalf("WaitConn on a connection back since the failure = %v, want nil at once", err)
	}
	// Ready all along, or back after flaps: the whole delay.
	for name, states := range map[string][]connectivity.State{
		"ready all along": {connectivity.Ready},
		"flapping":        {connectivity.Ready, connectivity.TransientFailure, connectivity.Ready, connectivity.Idle, connectivity.Connecting, connectivity.Ready},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := New(time.Hour, time.Hour).WaitConn(ctx, &conn{states: states}, time.Time{})
		cancel()
		if err != context.DeadlineExceeded {
			t.Errorf("WaitConn with the connection %s = %v, want it still waiting at its context's end", name, err)
		}
	}
	b = New(50*time.Millisecond, 50*time.Millisecond)
	b.Jitter = 0
	start := time.Now()
	if err := b.WaitConn(context.Background(), &conn{states: []connectivity.State{connectivity.Ready}}, time.Time{}); err != nil {
		t.Fatalf("WaitConn with a ready connection = %v, want nil after the delay", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("with the connection ready all along WaitConn returned after %v, before its 50ms delay", waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New(time.Hour, time.Hour).WaitConn(ctx, &conn{states: []connectivity.State{connectivity.TransientFailure}}, time.Time{}); err != context.Canceled {
		t.Fatalf("WaitConn with a cancelled context = %v, want context.Canceled", err)
	}
}

// slowConn is a conn whose last change (back to ready) comes after a
// while: the outage before it lasts that long.
type slowConn struct {
	*conn
	after time.Duration
}

func (c *slowConn) WaitForStateChange(ctx context.Context, from connectivity.State) bool {
	if len(c.states) == 1 && from != connectivity.Ready {
		time.Sleep(c.after)
		c.states = []connectivity.State{connectivity.Ready}
		return true
	}
	return c.conn.WaitForStateChange(ctx, from)
}

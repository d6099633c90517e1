// Package backoff is a capped, jittered exponential backoff with a reset
// after a quiet period, after client-go's reflector (800 ms → 30 s, reset
// after 2 min without failure). The cap holds with the jitter: no delay
// is longer than Max.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
)

// Backoff computes retry delays. The zero value is not usable; use New or
// Default. A Backoff is not safe for concurrent use.
type Backoff struct {
	Initial  time.Duration // first delay
	Max      time.Duration // cap
	Factor   float64       // growth per failure
	Jitter   float64       // extra random fraction of the delay, 0..1
	ResetAft time.Duration // a failure longer than this after the previous one starts over

	cur      time.Duration
	lastFail time.Time
	now      func() time.Time
}

// Default returns client-go's reflector settings: 800 ms doubling to 30 s,
// jitter 1.0, reset after 2 min.
func Default() *Backoff {
	return New(800*time.Millisecond, 30*time.Second)
}

// New returns a backoff from initial to max, doubling, jitter 1.0, reset
// after 2 min.
func New(initial, max time.Duration) *Backoff {
	return &Backoff{Initial: initial, Max: max, Factor: 2, Jitter: 1, ResetAft: 2 * time.Minute, now: time.Now}
}

// Next returns the delay before the next attempt, after a failure.
func (b *Backoff) Next() time.Duration {
	now := b.now()
	if b.cur == 0 || (b.ResetAft > 0 && now.Sub(b.lastFail) > b.ResetAft) {
		b.cur = b.Initial
	} else {
		b.cur = time.Duration(float64(b.cur) * b.Factor)
	}
	if b.cur > b.Max {
		b.cur = b.Max
	}
	b.lastFail = now
	d := b.cur
	if b.Jitter > 0 {
		// Drawn from [d, d(1+Jitter)], never past Max: near the cap, from
		// [Max/(1+Jitter), Max] (the cap doubled by the jitter held an
		// agent up to a minute from an etcd that was back).
		if hi := float64(d) * (1 + b.Jitter); hi > float64(b.Max) {
			d = time.Duration(float64(b.Max) / (1 + b.Jitter))
		}
		d += time.Duration(rand.Float64() * b.Jitter * float64(d))
	}
	return min(d, b.Max)
}

// Reset starts the next failure over at Initial.
func (b *Backoff) Reset() { b.cur = 0 }

// Wait sleeps for Next() or until ctx is done, returning ctx.Err() then.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// GRPCReconnect is how a long-lived client (the agent) has gRPC redial a
// lost connection: 1 s growing to at most 5 s, each ±20% after the cap
// (0.8–6 s; gRPC's default grows to
// 120 s, and clientv3 keeps it), so it is back within seconds of an etcd
// that was away for minutes; WaitConn then ends the retry's wait.
var GRPCReconnect = grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// Conn is a client connection whose state can be followed: a
// *grpc.ClientConn (clientv3's ActiveConnection).
type Conn interface {
	GetState() connectivity.State
	WaitForStateChange(ctx context.Context, from connectivity.State) bool
	Connect()
}

// MinOutage is how long a connection must have been down for WaitConn to
// end its wait when it is back: one that drops and comes back at once (a
// server closing connections as they open) is not an outage, and ending
// each wait there would retry in a loop, the backoff gone.
const MinOutage = time.Second

// WaitConn sleeps for Next() as Wait does, but returns early once conn is
// ready after an outage: not ready for at least MinOutage, counted from
// downSince (when the caller found it not ready, as its attempt failed;
// zero if it did not) or from when the wait finds it not ready. A retry
// after etcd came back (or its proxy, or the network) need not wait out a
// delay grown during the outage, up to Max. A failure with the connection
// ready all along (a refusal, a timeout of a loaded etcd) waits the whole
// delay, as does one whose connection only flapped. gRPC's jittered
// redial spreads the retries of many clients after an outage. conn nil:
// Wait.
func (b *Backoff) WaitConn(ctx context.Context, conn Conn, downSince time.Time) error {
	d := b.Next()
	if conn == nil {
		return Sleep(ctx, d)
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	since := downSince // when the connection was last seen going down; zero while up
	for st := conn.GetState(); ; {
		switch {
		case st != connectivity.Ready:
			if since.IsZero() {
				since = time.Now()
			}
			if st == connectivity.Idle {
				conn.Connect() // an idle channel waits for an RPC to connect
			}
		case !since.IsZero() && time.Since(since) >= MinOutage:
			return ctx.Err() // back after an outage
		default:
			since = time.Time{} // up, or back after a flap: wait on
		}
		if !conn.WaitForStateChange(wctx, st) {
			return ctx.Err() // the delay passed (nil), or ctx ended
		}
		st = conn.GetState()
	}
}

// WaitClient is WaitConn on cli's connection (a clientv3.Client), or Wait
// when it has none.
func (b *Backoff) WaitClient(ctx context.Context, cli interface{ ActiveConnection() *grpc.ClientConn }, downSince time.Time) error {
	if conn := cli.ActiveConnection(); conn != nil {
		return b.WaitConn(ctx, conn, downSince)
	}
	return b.Wait(ctx)
}

// Sleep sleeps for d or until ctx is done, returning ctx.Err() then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

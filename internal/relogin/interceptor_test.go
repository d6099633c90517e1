package relogin_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/regiond/regiond/internal/relogin"
)

// renewal is a stream the interceptor opened to log in again: on which
// connection, and whether its context had a deadline within the login's
// bound (renewTimeout, 30 s).
type renewal struct {
	cc        *grpc.ClientConn
	method    string
	deadlined bool
}

// conns makes gRPC connections to an in-memory server with no services.
// Each records the streams opened on it in renewals (and opens none: the
// login itself is clientv3's, tested against etcd in
// TestLoginRenewedAfterARestore). ready brings one to connectivity.Ready.
type conns struct {
	t        *testing.T
	lis      *bufconn.Listener
	renewals chan renewal
}

func newConns(t *testing.T) *conns {
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return &conns{t: t, lis: lis, renewals: make(chan renewal, 16)}
}

func (c *conns) conn(ready bool) *grpc.ClientConn {
	t := c.t
	record := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, _ grpc.Streamer, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		dl, ok := ctx.Deadline()
		c.renewals <- renewal{cc: cc, method: method, deadlined: ok && time.Until(dl) <= 30*time.Second}
		return nil, errors.New("recorded, not opened")
	}
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return c.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(record))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	if !ready {
		if s := cc.GetState(); s == connectivity.Ready {
			t.Fatalf("a new connection is %v: test setup", s)
		}
		return cc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc.Connect()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection never became ready (%v)", s)
		}
	}
	return cc
}

// call runs a unary call through ic on cc whose invoker returns err.
func call(ic grpc.UnaryClientInterceptor, cc *grpc.ClientConn, method string, err error) error {
	return ic(context.Background(), method, nil, nil, cc, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return err
	})
}

// awaitRenewal waits for the next stream the interceptor opens and says
// on which connection. It fails (after a bound: only a broken interceptor
// waits it out) when none comes.
func (c *conns) awaitRenewal(name string) renewal {
	c.t.Helper()
	select {
	case r := <-c.renewals:
		return r
	case <-time.After(10 * time.Second):
		c.t.Fatalf("%s: no login was started", name)
		return renewal{}
	}
}

var (
	get          = "/etcdserverpb.KV/Range"
	authenticate = "/etcdserverpb.Auth/Authenticate"
	deadline     = status.Error(codes.DeadlineExceeded, "context deadline exceeded")
)

// TestLoginOnlyAfterATimeoutOnAReadyConnection: the interceptor starts a
// login (a Watch stream, bounded by a deadline) after a request that timed
// out on a ready connection, and after nothing else: not after a login
// that timed out (one more bcrypt check for an etcd too busy to answer),
// another error, a success, or a timeout while the connection is down
// (it says nothing of the token, and would spend the next Every for
// nothing). Each of those gets its own connection and shares the one
// interceptor, allowed one login an hour: one started by mistake would
// take the last case's login, and show on its connection.
func TestLoginOnlyAfterATimeoutOnAReadyConnection(t *testing.T) {
	c := newConns(t)
	ic := relogin.Interceptor(time.Hour)
	wrong := map[*grpc.ClientConn]string{}
	for _, tc := range []struct {
		name   string
		ready  bool
		method string
		err    error
	}{
		{"a login that timed out", true, authenticate, deadline},
		{"a request refused", true, get, status.Error(codes.PermissionDenied, "etcdserver: permission denied")},
		{"a request etcd could not take", true, get, status.Error(codes.Unavailable, "connection refused")},
		{"a request answered", true, get, nil},
		{"a timeout while the connection is down", false, get, deadline},
	} {
		cc := c.conn(tc.ready)
		wrong[cc] = tc.name
		if err := call(ic, cc, tc.method, tc.err); !errors.Is(err, tc.err) && err != tc.err {
			t.Fatalf("%s: the interceptor returned %v, want the request's %v", tc.name, err, tc.err)
		}
	}
	good := c.conn(true)
	if err := call(ic, good, get, deadline); err != deadline {
		t.Fatalf("the interceptor returned %v, want the request's error", err)
	}
	r := c.awaitRenewal("a read that timed out on a ready connection")
	if name, ok := wrong[r.cc]; ok {
		t.Fatalf("a login was started after %s", name)
	}
	if r.cc != good || r.method != "/etcdserverpb.Watch/Watch" || !r.deadlined {
		t.Fatalf("the login: a stream %s (own connection %v, deadline within 30 s %v); want a Watch stream on the connection of the request, bounded", r.method, r.cc == good, r.deadlined)
	}
}

// TestLoginAfterEitherFormOfTimeout: a timeout is a gRPC DeadlineExceeded
// status, or the context's own error (wrapped or not), as an interceptor
// chained after this one may return it.
func TestLoginAfterEitherFormOfTimeout(t *testing.T) {
	c := newConns(t)
	for _, err := range []error{deadline, context.DeadlineExceeded, fmt.Errorf("list: %w", context.DeadlineExceeded)} {
		cc := c.conn(true)
		call(relogin.Interceptor(time.Hour), cc, get, err)
		if r := c.awaitRenewal(fmt.Sprintf("after %v", err)); r.cc != cc {
			t.Fatalf("after %v: a login on another connection", err)
		}
	}
}

// TestLoginsAtMostOncePerEvery: Interceptor(0) means Every (30 s): a
// second timeout right after the first starts no second login. (Its
// absence is checked after a pause: a login started by mistake may come
// later, never a false failure.)
func TestLoginsAtMostOncePerEvery(t *testing.T) {
	c := newConns(t)
	ic := relogin.Interceptor(0)
	first, second := c.conn(true), c.conn(true)
	call(ic, first, get, deadline)
	if r := c.awaitRenewal("the first timeout"); r.cc != first {
		t.Fatal("the first timeout: a login on another connection")
	}
	call(ic, second, get, deadline)
	select {
	case <-c.renewals:
		t.Fatal("a second timeout right after the first started a second login: Interceptor(0) must mean Every")
	case <-time.After(200 * time.Millisecond):
	}
}

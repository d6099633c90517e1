package cli

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/routing"
)

// TestHeartbeatWithOriginRole: with authentication on, an origin's role
// reads no pool, so the heartbeat skips the pool check without a word and
// runs; a pool id typo is refused by permission, and the refusal asks
// whether POOL is the pool's id (the role covers one pool's health keys).
// An operator, who reads the pool and so knows it exists, is told it
// lacks the origin role instead (it used to be asked about the id too).
func TestHeartbeatWithOriginRole(t *testing.T) {
	t.Parallel()
	e := newRBACEnv(t, true)
	if r := e.as(rbacOperator, "apply", "-f", exampleConfig, "--reason", "seed"); r.code != ExitOK {
		t.Fatalf("operator apply: %s", r)
	}
	p := rbacPrefix
	r := e.as(rbacOrigin, "heartbeat", "eu-centrl", "--instance", "fra-1a", "--addr", "10.0.0.12:443")
	want := "needs readwrite on " + p + "/routing/health/eu-centrl/ (role regiond-origin-eu-centrl)"
	hint := "; is eu-centrl the pool's id? the role regiond-origin-eu-centrl covers only its own pool's health keys (regionctl get pools, as an operator or viewer, lists the ids)"
	if r.code != ExitRefused || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, hint) {
		t.Fatalf("origin heartbeat of a typo'd pool: %s; want exit 1 with %q and %q", r, want, hint)
	}

	r = e.as(rbacOperator, "heartbeat", "eu-central", "--instance", "fra-1a", "--addr", "10.0.0.12:443")
	want = "needs readwrite on " + p + "/routing/health/eu-central/ (role regiond-origin-eu-central)"
	lacks := "; pool eu-central exists, so its id is right: user op lacks the role regiond-origin-eu-central, which alone writes its health keys"
	// The way out is the pool's origin user, not a grant of the origin
	// role to the operator's user (the auth review: it then held two jobs).
	way := "run the heartbeat as the pool's origin user (regionctl --prefix " + p + " auth apply --origin eu-central makes user regiond-origin-eu-central with that role alone"
	if r.code != ExitRefused || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, lacks+": "+way) ||
		strings.Contains(r.stderr, "the pool's id?") || strings.Contains(r.stderr, "grant-role") {
		t.Fatalf("an operator's heartbeat of an existing pool: %s; want exit 1 with %q and %q, not asking about the id", r, want, lacks)
	}

	h := e.startOriginHeartbeat(t)
	if code := h.stop(); code != ExitOK || h.errb.String() != "" {
		t.Fatalf("origin heartbeat: exit %d; want 0 and nothing on stderr (the pool check skipped silently):\n%s%s", code, h.out.String(), h.errb.String())
	}
}

// TestHeartbeatStrandedByAuthEnable: authentication turned on under a
// heartbeat that has no credentials ends its lease (etcd refuses its
// keep-alives) and refuses its new grant ("user name is empty"). The
// heartbeat says so once, at ERROR, with what to do (credentials in
// heartbeat.env, a restart), not a WARN on every retry, and keeps
// retrying: once etcd lets it again, the key comes back. It used to log
// only "cannot write marker, retrying" WARNs, several a second, with no
// hint.
func TestHeartbeatStrandedByAuthEnable(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	const prefix = "/hbstranded"
	key := prefix + "/routing/" + routing.HealthKey("eu-central", "fra-1")
	if _, err := cli.Put(context.Background(), prefix+"/routing/"+routing.PoolKey("eu-central"),
		`{"host":"edge-fra-1.example.net:443","residency":"eu","status":"active","health_check":true}`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb logbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--endpoints", strings.Join(srv.Endpoints, ","), "--prefix", prefix,
			"heartbeat", "eu-central", "--instance", "fra-1", "--addr", "10.0.0.1:443", "--ttl", "2s"},
			&out, &errb, func(string) string { return "" })
	}()
	present := func(c *clientv3.Client) bool {
		resp, err := c.Get(context.Background(), key)
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0
	}
	if _, ok := poll.Until(10*time.Second, func() bool { return present(cli) }); !ok {
		t.Fatalf("health key not written:\n%s%s", out.String(), errb.String())
	}

	devetcd.EnableTestAuth(t, srv, prefix)
	root, err := srv.ClientAs("root", devetcd.TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	hint := "etcd's authentication is on and this heartbeat has no credentials: put REGIONCTL_USER and REGIONCTL_PASSWORD of a user with the role regiond-origin-eu-central"
	if _, ok := poll.Until(30*time.Second, func() bool { return strings.Contains(errb.String(), hint) }); !ok {
		t.Fatalf("no hint about credentials once auth is on:\n%s", errb.String())
	}
	// Time for a few retries (1 s, 2 s apart): fewer on a loaded machine
	// only weakens the check that they are not logged.
	time.Sleep(4 * time.Second)
	logs := errb.String()
	if n := strings.Count(logs, "level=ERROR"); n != 1 || !strings.Contains(logs, "user name is empty") || strings.Contains(logs, "cannot write marker") {
		t.Fatalf("want the refusal logged once at ERROR (got %d) naming etcd's \"user name is empty\", and no WARN per retry:\n%s", n, logs)
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=ERROR") && !strings.Contains(line, hint) {
			t.Fatalf("the ERROR line lacks the hint:\n%s", line)
		}
	}

	// Still retrying: once etcd lets it (here, authentication off
	// again), the key is back.
	if _, err := root.AuthDisable(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := poll.Until(60*time.Second, func() bool { return present(cli) }); !ok {
		t.Fatalf("health key not written again once etcd let it:\n%s", errb.String())
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("heartbeat: exit %d:\n%s", code, errb.String())
	}
}

// TestHeartbeatPasswordChangedUnderIt: its user's password changed while
// a heartbeat runs, etcd keeps its lease alive (keep-alives ask for no
// login) but refuses the login the heartbeat needs once the lease is lost
// (revoked here). The heartbeat says so once, at ERROR, naming its user
// and what to do (its credentials in heartbeat.env, a restart), and keeps
// retrying: with the old password back, its key comes back.
func TestHeartbeatPasswordChangedUnderIt(t *testing.T) {
	t.Parallel()
	e, h := startSeededOriginHeartbeat(t)
	ctx := context.Background()
	if _, err := e.root.UserChangePassword(ctx, rbacOrigin, "changed-by-the-test"); err != nil {
		t.Fatal(err)
	}
	resp, err := e.root.Get(ctx, h.key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("health key: %v %v", resp, err)
	}
	if _, err := e.root.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	h.refusedOnce(t, "etcd no longer takes user "+rbacOrigin+"'s login (its password changed, or the user was removed): put its credentials in /etc/regiond/heartbeat.env and restart the heartbeat")
	if _, err := e.root.UserChangePassword(ctx, rbacOrigin, e.passwords[rbacOrigin]); err != nil {
		t.Fatal(err)
	}
	if _, ok := poll.Until(60*time.Second, h.present); !ok {
		t.Fatalf("health key not written again with the old password back:\n%s", h.errb.String())
	}
}

// TestHeartbeatRoleRevokedUnderIt: its user's role revoked while a
// heartbeat runs and its marker deleted (its lease lives on), the
// heartbeat's read and put-back are refused. It says so once, at ERROR,
// naming the user and the role to grant, not a WARN every few seconds as
// it did, and keeps retrying: with the role granted again, the marker is
// back; revoked again, it says so again.
func TestHeartbeatRoleRevokedUnderIt(t *testing.T) {
	t.Parallel()
	var cutWatch atomic.Pointer[context.CancelFunc] // ends the heartbeat's latest watch stream
	cut := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == "/etcdserverpb.Watch/Watch" {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			cutWatch.Store(&cancel)
		}
		return streamer(ctx, desc, cc, method, opts...)
	})
	e, h := startSeededOriginHeartbeatCtx(t, context.WithValue(context.Background(), dialOptionsHook{}, []grpc.DialOption{cut}))
	ctx := context.Background()
	if _, err := e.root.UserRevokeRole(ctx, rbacOrigin, rbacOrigin); err != nil {
		t.Fatal(err)
	}
	if _, err := e.root.Delete(ctx, h.key); err != nil {
		t.Fatal(err)
	}
	h.refusedOnce(t, "user "+rbacOrigin+" lacks the role "+rbacOrigin+", which alone writes the pool's health keys: run the heartbeat as the pool's origin user (regionctl --prefix "+rbacPrefix+" auth apply --origin eu-central makes user "+rbacOrigin+" with that role alone, or grants it again")
	if _, err := e.root.UserGrantRole(ctx, rbacOrigin, rbacOrigin); err != nil {
		t.Fatal(err)
	}
	if _, ok := poll.Until(60*time.Second, h.present); !ok {
		t.Fatalf("marker not put back with the role granted again:\n%s", h.errb.String())
	}
	// Revoked again, the marker left in place, and the marker's watch
	// stream cut (a network blip): the watch made again and the reads are
	// refused. The first refusal was put right meanwhile, so this one is
	// news: at ERROR again (it was logged at debug when the watch ended
	// before the marker changed).
	// The marker's watch stream is there to cut (under CI's load it was
	// not yet when the marker was back: a nil cut).
	if _, ok := poll.Until(30*time.Second, func() bool { return cutWatch.Load() != nil }); !ok {
		t.Fatalf("the heartbeat opened no watch stream:\n%s", h.errb.String())
	}
	if _, err := e.root.UserRevokeRole(ctx, rbacOrigin, rbacOrigin); err != nil {
		t.Fatal(err)
	}
	(*cutWatch.Load())()
	if _, ok := poll.Until(30*time.Second, func() bool { return strings.Count(h.errb.String(), "level=ERROR") == 2 }); !ok {
		t.Fatalf("the role revoked a second time: want a second ERROR:\n%s", h.errb.String())
	}
}

// startSeededOriginHeartbeat starts an etcd with authentication on, the
// example config applied, and the origin's heartbeat running (stopped at
// the test's end).
func startSeededOriginHeartbeat(t *testing.T) (*rbacEnv, *originHeartbeat) {
	t.Helper()
	return startSeededOriginHeartbeatCtx(t, context.Background())
}

// startSeededOriginHeartbeatCtx is startSeededOriginHeartbeat with the
// heartbeat under parent (which may carry a dialOptionsHook).
func startSeededOriginHeartbeatCtx(t *testing.T, parent context.Context) (*rbacEnv, *originHeartbeat) {
	t.Helper()
	e := newRBACEnv(t, true)
	if r := e.as(rbacOperator, "apply", "-f", exampleConfig, "--reason", "seed"); r.code != ExitOK {
		t.Fatalf("operator apply: %s", r)
	}
	h := e.startOriginHeartbeatCtx(t, parent)
	t.Cleanup(func() { h.stop() })
	return e, h
}

// refusedOnce waits for the heartbeat to log hint, then checks, after a
// few retries (1 s, 2 s apart), that it logged one ERROR line, no WARN per
// retry, and that its key is gone.
func (h *originHeartbeat) refusedOnce(t *testing.T, hint string) {
	t.Helper()
	if _, ok := poll.Until(30*time.Second, func() bool { return strings.Contains(h.errb.String(), hint) }); !ok {
		t.Fatalf("no ERROR with %q:\n%s", hint, h.errb.String())
	}
	time.Sleep(4 * time.Second) // retries, which must not be logged again
	logs := h.errb.String()
	if n := strings.Count(logs, "level=ERROR"); n != 1 || strings.Contains(logs, "level=WARN msg=\"heartbeat: cannot") || h.present() {
		t.Fatalf("want the refusal logged once at ERROR (got %d), no WARN per retry, and no key (present %v):\n%s", n, h.present(), logs)
	}
}

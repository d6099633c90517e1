package watch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// TestProxyAuthWatcherWithoutToken: etcd's grpc-proxy (v3.7.3) serves all
// its watchers from one upstream watch stream, which carries the token of
// the watcher that opened it. A watcher that connected before
// authentication was enabled (no token) keeps that stream, and etcd then
// refuses every new watch on it without a word through the proxy: a
// mirror logged in with a password gets its list but never its watch.
// Its Status says what this looks like and what to do (restart the
// proxy), and once that watcher is gone the mirror follows etcd.
func TestProxyAuthWatcherWithoutToken(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	if testing.Short() {
		t.Skip("starts an etcd process and its grpc-proxy")
	}
	c := etcdproc.Start(t, etcdproc.Config{Members: 1})
	direct := c.Client(t)
	ctx := context.Background()
	loadExample(t, direct)
	p := c.StartProxy(t, etcdproc.ProxyConfig{})
	before := p.Client(t) // a watcher from before auth enable
	wctx, stopBefore := context.WithCancel(ctx)
	defer stopBefore()
	if wr := <-before.Watch(wctx, "/regiond/", clientv3.WithPrefix(), clientv3.WithCreatedNotify()); !wr.Created {
		t.Fatalf("the watcher before auth: %+v", wr)
	}
	if err := devetcd.EnableAuth(ctx, direct, devetcd.Auth{RootPassword: "root-pw", User: "agent", Password: "agent-pw", Prefix: "/regiond/"}); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 5 * time.Second, Username: "agent", Password: "agent-pw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	m := startMirror(t, cli, watch.Config{})
	st := watchStatus(t, m, "the watch's creation unanswered, said", 30*time.Second, func(s watch.Status) bool {
		return !s.Connected && strings.Contains(s.Unreachable, "does not answer the creation of a watch")
	}, func(watch.Status) error { return nil })
	if !strings.Contains(st.Unreachable, "restart the proxy") {
		t.Fatalf("Unreachable %q does not say what to do", st.Unreachable)
	}

	stopBefore() // the watcher without a token goes (a proxy restart does the same)
	before.Close()
	rev := putWithin(t, direct2(t, c), "routes/DE", deRoute(55))
	waitUntil(t, m, "the change made once the tokenless watcher is gone", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	watchStatus(t, m, "connected", 30*time.Second, func(s watch.Status) bool { return s.Connected && s.Unreachable == "" }, func(watch.Status) error { return nil })
}

// direct2 is root's client of the cluster, once authentication is on.
func direct2(t *testing.T, c *etcdproc.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Username: "root", Password: "root-pw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestProxyRestartWithAuth: with authentication on, a mirror logged in
// with a password behind a grpc-proxy that is killed, and started again
// once the mirror's token has expired (etcd's --auth-token-ttl, here 2 s),
// follows etcd again: the change made while the proxy was down, and the
// next. (A reviewer once saw an agent stuck for minutes after such a
// restart; not reproduced here.)
func TestProxyRestartWithAuth(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	if testing.Short() {
		t.Skip("starts an etcd process and its grpc-proxy")
	}
	c := etcdproc.Start(t, etcdproc.Config{Members: 1, Args: []string{"--auth-token-ttl=2"}})
	direct := c.Client(t)
	ctx := context.Background()
	loadExample(t, direct)
	if err := devetcd.EnableAuth(ctx, direct, devetcd.Auth{RootPassword: "root-pw", User: "agent", Password: "agent-pw", Prefix: "/regiond/"}); err != nil {
		t.Fatal(err)
	}
	p := c.StartProxy(t, etcdproc.ProxyConfig{AuthOn: true})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 5 * time.Second, Username: "agent", Password: "agent-pw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	m := startMirror(t, cli, watch.Config{})
	connected := func(s watch.Status) bool { return s.Connected }
	watchStatus(t, m, "connected", 30*time.Second, connected, func(watch.Status) error { return nil })
	root := direct2(t, c)
	p.Kill()
	rev := putWithin(t, root, "routes/DE", deRoute(44))
	time.Sleep(5 * time.Second) // the mirror's token expires meanwhile
	p.Start()
	waitUntil(t, m, "the change made while the proxy was down", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	rev = putWithin(t, root, "routes/DE", deRoute(45))
	waitUntil(t, m, "the change after the restart", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	watchStatus(t, m, "connected", 30*time.Second, connected, func(watch.Status) error { return nil })
}

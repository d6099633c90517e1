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
	"github.com/regiond/regiond/internal/tcpproxy"
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
	c, p, agent := shortTokenProxy(t)
	m := startMirror(t, agent(p.URL()), watch.Config{})
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

// TestProxyExpiredTokenStream: etcd's grpc-proxy (v3.7.3) opens every
// upstream watch on one stream, which carries the token of the watcher
// that opened it; once that token has expired (--auth-token-ttl, here 2 s;
// the watcher itself uses it for nothing more), etcd refuses each new
// upstream watch, and the proxy never says so. A watch the proxy can join
// to the upstream watch it has (one from at or past that watch's
// revision) needs none. A mirror cut off while changes are made reopens
// from its applied revision, behind that upstream watch: the creation is
// never answered. The mirror then asks etcd where it is and, as etcd holds
// changes past its table, relists, and watches from etcd's revision, which
// the proxy joins to its live watch: it serves the changes made while it
// was cut off, and the next (it reopened from the applied revision for
// good before; seen).
func TestProxyExpiredTokenStream(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	if testing.Short() {
		t.Skip("starts an etcd process and its grpc-proxy")
	}
	c, p, agent := shortTokenProxy(t)
	ctx := context.Background()
	// Another agent's watch opens the proxy's upstream stream first, and
	// keeps it: its token is the stream's.
	wctx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	first := agent(p.URL()).Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := <-first; !wr.Created {
		t.Fatalf("the first watcher: %+v", wr)
	}
	go func() {
		for range first { // it follows, as a live agent does
		}
	}()
	path, err := tcpproxy.New(strings.TrimPrefix(p.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { path.Close() })
	m := startMirror(t, agent(path.URL()), watch.Config{})
	connected := func(s watch.Status) bool { return s.Connected }
	watchStatus(t, m, "connected", 30*time.Second, connected, func(watch.Status) error { return nil })
	time.Sleep(3 * time.Second) // the stream's token expires

	root := direct2(t, c)
	path.Sever()
	var rev int64
	for i := range 3 {
		rev = putWithin(t, root, "routes/DE", deRoute(20+i))
	}
	if err := path.Restore(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, m, "the changes made while it was cut off", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	rev = putWithin(t, root, "routes/DE", deRoute(30))
	waitUntil(t, m, "the change after", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	watchStatus(t, m, "connected", 30*time.Second, connected, func(watch.Status) error { return nil })
}

// shortTokenProxy starts an etcd process whose tokens expire 2 s after
// their last use (--auth-token-ttl), with the example fleet loaded,
// authentication on (root-pw; user agent may read /regiond/) and a
// grpc-proxy in front of it; agent returns a client of user agent at an
// endpoint, closed when the test ends.
func shortTokenProxy(t *testing.T) (c *etcdproc.Cluster, p *etcdproc.Proxy, agent func(endpoint string) *clientv3.Client) {
	t.Helper()
	c = etcdproc.Start(t, etcdproc.Config{Members: 1, Args: []string{"--auth-token-ttl=2"}})
	direct := c.Client(t)
	loadExample(t, direct)
	if err := devetcd.EnableAuth(context.Background(), direct, devetcd.Auth{RootPassword: "root-pw", User: "agent", Password: "agent-pw", Prefix: "/regiond/"}); err != nil {
		t.Fatal(err)
	}
	p = c.StartProxy(t, etcdproc.ProxyConfig{AuthOn: true})
	agent = func(endpoint string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Username: "agent", Password: "agent-pw", Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	return c, p, agent
}

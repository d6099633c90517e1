package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
)

// putStatus writes an agent's status key saying it serves rev, at the
// epoch stored now (as an agent that applied it reports it).
func putStatus(ctx context.Context, t testing.TB, cli *clientv3.Client, s *Store, node string, rev int64) {
	t.Helper()
	var epoch int64
	if resp, err := cli.Get(ctx, s.Keyspace().Epoch()); err == nil && len(resp.Kvs) > 0 {
		epoch, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	}
	b, _ := json.Marshal(routing.AgentStatus{Node: node, Revision: rev, Epoch: epoch, Connected: true})
	if _, err := cli.Put(ctx, s.Keyspace().Agent(node), string(b)); err != nil {
		t.Fatal(err)
	}
}

// signalHandler is a slog handler that signals each record with message msg.
type signalHandler struct {
	msg string
	ch  chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *signalHandler) WithGroup(string) slog.Handler            { return h }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// waitSignal waits for a signal, failing the test after 30s (a hang
// guard, not a timing assertion).
func waitSignal(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no signal within 30s")
	}
}

// proxiedClient returns a client of srv through a severable proxy.
func proxiedClient(t *testing.T, srv *devetcd.Server) (*clientv3.Client, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(srv.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := tcpproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, p
}

// laggingFleet starts an etcd of the test's own with the example config
// written, and a status key for each node one revision behind it.
func laggingFleet(t *testing.T, nodes ...string) (*devetcd.Server, *clientv3.Client, *Store, *Result) {
	t.Helper()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	s := newStore(t, cli, Options{})
	ctx := context.Background()
	res := put(ctx, t, s, exampleConfig(t))
	for _, n := range nodes {
		putStatus(ctx, t, cli, s, n, res.Revision-1)
	}
	return srv, cli, s, res
}

// TestWaitConvergedThroughOutage: with etcd cut off, WaitConverged keeps
// trying until its deadline and then says the agents could not be read
// and why; when etcd comes back within the deadline it returns once the
// agents are current, instead of failing on the first read.
func TestWaitConvergedThroughOutage(t *testing.T) {
	t.Parallel()
	srv, cli, s, res := laggingFleet(t, "node-a")
	ctx := context.Background()

	pcli, proxy := proxiedClient(t, srv)
	retrying := &signalHandler{msg: "wait converged: retrying", ch: make(chan struct{}, 1)}
	ws := New(pcli, s.Keyspace(), Options{RequestTimeout: 300 * time.Millisecond, Logger: slog.New(retrying)})
	proxy.Sever()

	dctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err := ws.WaitConverged(dctx, res.Revision)
	cancel()
	var nc *NotConvergedError
	var ue *UnreachableError
	if !errors.As(err, &nc) || !nc.Unknown || !errors.As(err, &ue) {
		t.Fatalf("wait with etcd cut off: want not converged, agents unknown, etcd unreachable: %v", err)
	}

	waitSignal(t, retrying.ch) // drain the signal of the wait above
	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() { _, err := ws.WaitConverged(wctx, res.Revision); done <- err }()
	waitSignal(t, retrying.ch) // it met the outage and goes on
	putStatus(ctx, t, cli, s, "node-a", res.Revision)
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("wait across an outage that ended: %v", err)
	}
}

// TestWaitConvergedLearnsFromWatch: the wait returns on the status put that
// completes the set (including an agent that appears during the wait and
// one whose key is deleted after it confirmed the revision), and names the
// laggards when it times out.
func TestWaitConvergedLearnsFromWatch(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	res := put(ctx, t, s, cfg)
	putStatus(ctx, t, cli, s, "node-a", res.Revision-1)
	putStatus(ctx, t, cli, s, "node-b", res.Revision-1)

	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := s.WaitConverged(dctx, res.Revision)
	cancel()
	var nc *NotConvergedError
	if !errors.As(err, &nc) || nc.Unknown || nc.Err != nil || len(nc.Lagging) != 2 || nc.Lagging[0].Node != "node-a" {
		t.Fatalf("timeout: %v", err)
	}

	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() { _, err := s.WaitConverged(wctx, res.Revision); done <- err }()
	putStatus(ctx, t, cli, s, "node-a", res.Revision)
	putStatus(ctx, t, cli, s, "node-c", res.Revision-1) // a new agent, behind
	putStatus(ctx, t, cli, s, "node-b", res.Revision)   // confirmed, then gone
	if _, err := cli.Delete(ctx, s.Keyspace().Agent("node-b")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("returned with node-c behind: %v", err)
	default:
	}
	putStatus(ctx, t, cli, s, "node-c", res.Revision+5)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWaitConvergedWaitsForAVanishedLaggard: an agent behind the
// revision whose status key disappears during the wait (its lease ran out:
// cut off from etcd, it still serves the old table) is not dropped from
// the wait: a wait that ends first names it in Vanished, and the wait
// returns once its key is back at the revision.
func TestWaitConvergedWaitsForAVanishedLaggard(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	res := put(ctx, t, s, cfg)
	putStatus(ctx, t, cli, s, "node-a", res.Revision-1)
	putStatus(ctx, t, cli, s, "node-b", res.Revision-1)

	listed := make(chan struct{}, 2)
	hooked := context.WithValue(ctx, listedHook{}, func() { listed <- struct{}{} })
	short, cancelShort := context.WithTimeout(hooked, 2*time.Second)
	defer cancelShort()
	long, cancelLong := context.WithTimeout(hooked, 30*time.Second)
	defer cancelLong()
	shortDone, longDone := make(chan error, 1), make(chan error, 1)
	go func() { _, err := s.WaitConverged(short, res.Revision); shortDone <- err }()
	go func() { _, err := s.WaitConverged(long, res.Revision); longDone <- err }()
	waitSignal(t, listed)
	waitSignal(t, listed) // both waits know node-b, behind

	putStatus(ctx, t, cli, s, "node-a", res.Revision)
	if _, err := cli.Delete(ctx, s.Keyspace().Agent("node-b")); err != nil {
		t.Fatal(err)
	}
	err := <-shortDone
	var nc *NotConvergedError
	if !errors.As(err, &nc) || len(nc.Lagging) != 0 || len(nc.Vanished) != 1 || nc.Vanished[0].Node != "node-b" ||
		!strings.Contains(err.Error(), "node-b@") || !strings.Contains(err.Error(), "status key disappeared") {
		t.Fatalf("a wait ended with node-b's key gone while behind: %v; want it not converged, node-b named as vanished", err)
	}
	putStatus(ctx, t, cli, s, "node-b", res.Revision) // back, and current
	if err := <-longDone; err != nil {
		t.Fatalf("node-b back at the revision: %v", err)
	}
}

// TestWaitConvergedVanishedAcrossARelist: a laggard whose key disappears
// while the wait's watch is down (the trouble that ends watches lets
// leases end too), its delete compacted away, is missing from the relist:
// it vanished, it is not forgotten. Its node record, left as an agent cut
// off leaves it, does not name it lost as well (mutation review: the
// vanished check of the lost filter taken out survived; the node was
// named, and counted, twice).
func TestWaitConvergedVanishedAcrossARelist(t *testing.T) {
	t.Parallel()
	srv, cli, s, res := laggingFleet(t, "node-a", "node-b")
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-b"} { // the agents' records, as their status keys say
		putStatusAt(ctx, t, cli, s, s.Keyspace().Node(n), routing.AgentStatus{Node: n, Revision: res.Revision - 1, Connected: true})
	}

	pcli, proxy := proxiedClient(t, srv)
	ws := New(pcli, s.Keyspace(), Options{RequestTimeout: 300 * time.Millisecond})
	listed := make(chan struct{}, 8)
	wctx, cancel := context.WithTimeout(context.WithValue(ctx, listedHook{}, func() { listed <- struct{}{} }), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := ws.WaitConverged(wctx, res.Revision); done <- err }()
	waitSignal(t, listed)

	proxy.Sever()
	if _, err := cli.Delete(ctx, s.Keyspace().Agent("node-b")); err != nil {
		t.Fatal(err)
	}
	putStatus(ctx, t, cli, s, "node-a", res.Revision)
	// Compacted past the watch's revision: its resume fails, and the
	// wait relists (without that, clientv3 would resume the watch and
	// deliver the delete).
	last, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, last.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var nc *NotConvergedError
	if !errors.As(err, &nc) || len(nc.Vanished) != 1 || nc.Vanished[0].Node != "node-b" || len(nc.Lagging) != 0 || len(nc.Lost) != 0 {
		t.Fatalf("node-b deleted while the wait's watch was down: %v; want not converged, node-b vanished (and not lost)", err)
	}
}

// TestWaitConvergedRefused: a user that may not read agents/ gets a
// *NotConvergedError whose Err is a *PermissionError naming the watch and
// the roles that may read it, not a retry until the deadline: no round
// is retried (mutation review: the retryable check taken out survived,
// the refusal being the last error at the deadline too).
func TestWaitConvergedRefused(t *testing.T) {
	t.Parallel()
	sec := devetcd.NewTestSecure(t, "/regiond/v1/routing/") // readwrite routing/ only
	retrying := &signalHandler{msg: "wait converged: retrying", ch: make(chan struct{}, 1)}
	s := New(sec.Client, keyspace.Default(), Options{User: sec.Auth.User, RequestTimeout: 2 * time.Second, Logger: slog.New(retrying)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.WaitConverged(ctx, 1)
	var nc *NotConvergedError
	var pe *PermissionError
	if !errors.As(err, &nc) || !errors.As(nc.Err, &pe) || !nc.Unknown ||
		!strings.Contains(err.Error(), "watch /regiond/v1/agents/ needs read on /regiond/v1/agents/ (role regiond-viewer or regiond-operator)") {
		t.Fatalf("WaitConverged without read on agents/: %v", err)
	}
	select {
	case <-retrying.ch:
		t.Fatalf("WaitConverged retried a refusal: %v", err)
	default:
	}
}

// TestServesRefused: skipped keys every agent serves alike (health keys,
// keys outside the grammar) keep no agent from converging, however many:
// skipped_alike counts them past the ten names; without it (an older
// agent) the names decide, and keys not named count as refused values.
func TestServesRefused(t *testing.T) {
	health := func(n int) []string {
		var keys []string
		for i := range n {
			keys = append(keys, fmt.Sprintf("health/eu-west/i%02d", i))
		}
		return keys
	}
	for _, tc := range []struct {
		name string
		st   routing.AgentStatus
		want bool
	}{
		{"none", routing.AgentStatus{}, false},
		{"a route", routing.AgentStatus{Skipped: 1, SkippedKeys: []string{"routes/PL"}}, true},
		{"alike, named", routing.AgentStatus{Skipped: 2, SkippedAlike: 2, SkippedKeys: []string{"bogus/key", "health/eu-west/x"}}, false},
		{"alike, past the names", routing.AgentStatus{Skipped: 12, SkippedAlike: 12, SkippedKeys: health(12)[:routing.MaxStatusSkippedKeys]}, false},
		{"a route and 11 alike", routing.AgentStatus{Skipped: 12, SkippedAlike: 11, SkippedKeys: append([]string{"routes/PL"}, health(9)...)}, true},
		{"older agent, alike named", routing.AgentStatus{Skipped: 2, SkippedKeys: []string{"health/eu-west/x", "pools/UPPER"}}, false},
		{"older agent, some not named", routing.AgentStatus{Skipped: 11, SkippedKeys: health(10)}, true},
		{"older agent, a route among them", routing.AgentStatus{Skipped: 2, SkippedKeys: []string{"health/eu-west/x", "routes/PL"}}, true},
		{"a route named, skipped_alike past it (by hand)", routing.AgentStatus{Skipped: 1, SkippedAlike: 3, SkippedKeys: []string{"routes/PL"}}, true},
	} {
		a := AgentInfo{AgentStatus: tc.st}
		if got := a.ServesRefused(); got != tc.want {
			t.Errorf("%s: ServesRefused %v, want %v", tc.name, got, tc.want)
		}
		if a.Converged(0) == tc.want {
			t.Errorf("%s: Converged(0) %v, want %v", tc.name, a.Converged(0), !tc.want)
		}
	}
	// A status key that does not decode says nothing, whatever fields the
	// decoder filled before the error.
	if a := agentInfo("k", "n", []byte(`{"revision":100,"version":"v9","skipped":"x"}`), 100, 100); a.Invalid == "" || a.Converged(0) {
		t.Errorf("an undecodable status key: %+v converged", a)
	}
}

// TestNotConvergedNamesTenAgents: a fleet of thousands behind does not make
// a message of thousands of names: ten, then how many more; an agent a lag
// alone does not explain (here serving refused values) is among the ten,
// however far down the list.
func TestNotConvergedNamesTenAgents(t *testing.T) {
	var lagging []AgentInfo
	for i := range 25 {
		a := AgentInfo{AgentStatus: routing.AgentStatus{Node: fmt.Sprintf("node-%02d", i), Revision: 7}, Lag: 3}
		if i == 20 {
			a.Skipped, a.SkippedKeys = 1, []string{"routes/PL"}
		}
		lagging = append(lagging, a)
	}
	msg := (&NotConvergedError{Revision: 10, Lagging: lagging}).Error()
	if !strings.Contains(msg, "25 agent(s) behind, of another history, serving refused values or with snapshot files not written: node-20@7 serving refused values of 1 key(s): routes/PL; node-00@7 (behind);") ||
		!strings.Contains(msg, "node-08@7 (behind); and 15 more (regionctl status lists them all)") ||
		strings.Contains(msg, "node-09") || !strings.Contains(msg, "regionctl validate") {
		t.Fatalf("message for 25 agents behind: %s", msg)
	}
}

// TestConflictOverSeveralWritesNamesThemAll: a write that met several
// commits since its read (epoch 2 → 4) points at all of them, not at the
// last one's record alone (the CLI review).
func TestConflictOverSeveralWritesNamesThemAll(t *testing.T) {
	got := (&ConflictError{Epoch: 2, Now: 4}).Error()
	if want := "config changed concurrently (epoch 2 → 4: 2 writes); re-run (it builds on the new state: regionctl history --limit 2 shows what changed)"; got != want {
		t.Fatalf("conflict over two writes: %q\nwant %q", got, want)
	}
}

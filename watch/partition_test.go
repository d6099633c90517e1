package watch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// These tests run a real 3-member etcd cluster (internal/etcdproc) and cut
// the member the mirror talks to off from the other two: the case of
// PITFALLS.md's "a watch on a partitioned member hangs silently". The
// partitioned member keeps serving its clients over an intact connection;
// its watch just delivers nothing more (no event, and no progress
// notification beyond its own stale revision). Two things end such a watch:
// the mirror's silence timer (three progress intervals without an answer,
// then a linearizable probe, which a member without a leader cannot serve,
// then a new watch, which that member refuses with "no leader"), and etcd
// cancelling require-leader watches
// (clientv3.WithRequireLeader) once the member has had no leader for three
// election timeouts. A mirror whose progress interval (1 min) cannot elapse
// during the test shows the second alone: without WithRequireLeader it stays
// Connected at the old revision for good.

// lone is the member the mirror talks to and the one cut off ("member 3");
// the writer talks to member 0 ("member 1"), which stays with the majority.
const lone = 2

// debugLogger logs every level, as text, into l.
func debugLogger(l *logbuf.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startPartitionCluster starts the cluster with member 0 as leader (so the
// member cut off is a follower, which loses its leader only by timing out)
// and loads the example fleet through member 0; it returns the writer and
// the revision of the load.
func startPartitionCluster(t *testing.T) (*etcdproc.Cluster, *clientv3.Client, int64) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	c := etcdproc.Start(t, etcdproc.Config{Members: 3})
	c.MoveLeader(t, 0)
	writer := c.Client(t, 0)
	return c, writer, fleettest.Load(t, writer, prefix)
}

// putWithin is put bounded by a timeout: a write through the majority must
// not wait on the partitioned member.
func putWithin(t *testing.T, cli *clientv3.Client, rel, val string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Put(ctx, prefix+rel, val)
	if err != nil {
		t.Fatalf("put %s: %v", rel, err)
	}
	return resp.Header.Revision
}

const newDE = `{"targets":[{"pool":"eu-west","weight":100}],"fallback":["eu-general"]}`

// watchStatus polls the mirror (on every table swap, and every 10ms) until
// done holds or within elapses; check runs on every sample and fails the
// test by returning an error. It returns the first status for which done
// held.
func watchStatus(t *testing.T, m *watch.Mirror, what string, within time.Duration,
	done func(watch.Status) bool, check func(watch.Status) error) watch.Status {
	t.Helper()
	deadline := time.After(within)
	for {
		ch := m.Changed()
		s := m.Status()
		if err := check(s); err != nil {
			t.Fatalf("while waiting for %s: %v", what, err)
		}
		if done != nil && done(s) {
			return s
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			if done == nil {
				return s
			}
			t.Fatalf("timed out after %s waiting for %s (status %+v)", within, what, s)
		}
	}
}

// servingStale checks what a cut-off mirror must do: keep serving its last
// table, and never claim a revision it cannot have seen.
func servingStale(m *watch.Mirror, changeRev int64) func(watch.Status) error {
	return func(s watch.Status) error {
		if s.Revision >= changeRev {
			return fmt.Errorf("the cut-off mirror claims revision %d, at or past the change it cannot have seen (%d)", s.Revision, changeRev)
		}
		tb := m.Table()
		if tb == nil {
			return fmt.Errorf("no table served while cut off")
		}
		d, err := tb.Resolve("DE", "viewer-1", time.Now())
		if err != nil || d.Pool != "eu-central" {
			return fmt.Errorf("while cut off DE resolves to %+v, %v; want the last table's eu-central", d, err)
		}
		return nil
	}
}

// observed is a mirror under test with its log and metrics.
type observed struct {
	name string
	m    *watch.Mirror
	reg  *prometheus.Registry
	logs *logbuf.Buffer
}

// startObserved starts a mirror on cli with its own log and registry; the
// log is printed when the test ends (with -v, or on failure).
func startObserved(t *testing.T, name string, cli *clientv3.Client, cfg watch.Config) *observed {
	t.Helper()
	o := &observed{name: name, reg: prometheus.NewRegistry(), logs: &logbuf.Buffer{}}
	t.Cleanup(func() { t.Logf("%s mirror log:\n%s", name, o.logs) })
	cfg.Logger, cfg.Registerer = debugLogger(o.logs), o.reg
	if cfg.RequestTimeout == 0 {
		// startMirror's 1 s is short for a 3-member cluster of processes
		// while CI runs other packages beside: a probe or a watch creation
		// answered late must not read as a broken watch on a healthy
		// cluster. The partition bounds below are far above it.
		cfg.RequestTimeout = 3 * time.Second
	}
	o.m = startMirror(t, cli, cfg)
	return o
}

// stable checks that the mirror stays connected and does not relist for d
// (several progress intervals). Nothing is written meanwhile, so etcd
// answers none of its progress requests (it answers none for a watch whose
// start revision is in the future), and that silence must not be taken for
// a broken watch.
func (o *observed) stable(t *testing.T, d time.Duration, where string) {
	t.Helper()
	before := resyncs(t, o.reg)
	watchStatus(t, o.m, o.name+" connected "+where, d, nil, func(s watch.Status) error {
		if !s.Connected {
			return fmt.Errorf("%s not connected %s", o.name, where)
		}
		return nil
	})
	if after := resyncs(t, o.reg); after != before {
		t.Fatalf("%s relisted %v times %s", o.name, after-before, where)
	}
}

// TestPartitionedMemberIsNotCurrent: a mirror whose only endpoint is a
// member cut off from the majority reports itself disconnected, keeps
// serving its last table without claiming newer revisions, and catches up
// once the partition heals. Two mirrors watch member 3: one with 200ms
// progress requests, and one whose progress requests (1 min) cannot fire
// during the test, so that only the require-leader check can end its watch.
func TestPartitionedMemberIsNotCurrent(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	c, writer, rev := startPartitionCluster(t)
	mirrors := []*observed{
		startObserved(t, "progress-200ms", c.Client(t, lone), watch.Config{ProgressInterval: 200 * time.Millisecond}),
		startObserved(t, "leader-check-only", c.Client(t, lone), watch.Config{ProgressInterval: time.Minute}),
	}
	for _, o := range mirrors {
		waitUntil(t, o.m, o.name+" initial list", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	}
	mirrors[0].stable(t, 1200*time.Millisecond, "on the healthy, idle cluster")

	c.Partition(lone)
	cut := time.Now()
	changeRev := putWithin(t, writer, "routes/DE", newDE)

	// (a) Within a bound far above election timeout + 3 progress intervals,
	// each mirror says it is not connected; (b) all along it serves the last
	// table, below the change's revision.
	syncedAt := make([]time.Time, len(mirrors))
	for i, o := range mirrors {
		watchStatus(t, o.m, o.name+" Connected=false while partitioned", 20*time.Second,
			func(s watch.Status) bool { return !s.Connected }, servingStale(o.m, changeRev))
		t.Logf("%s: Connected=false %v after the partition", o.name, time.Since(cut).Round(10*time.Millisecond))
		syncedAt[i] = o.m.Status().SyncedAt
	}
	// They stay so while the partition lasts: relists through the cut-off
	// member fail (a linearizable read needs a leader), and nothing may
	// confirm a table current meanwhile.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		for i, o := range mirrors {
			s := o.m.Status()
			if err := servingStale(o.m, changeRev)(s); err != nil {
				t.Fatalf("%s: %v", o.name, err)
			}
			if s.Connected {
				t.Fatalf("%s: Connected=true again while its only endpoint is partitioned", o.name)
			}
			if !s.SyncedAt.Equal(syncedAt[i]) {
				t.Fatalf("%s: SyncedAt moved from %s to %s while partitioned", o.name, syncedAt[i], s.SyncedAt)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}

	// (c) Healed, each mirror catches up and is connected again.
	c.Heal(lone)
	healed := time.Now()
	for _, o := range mirrors {
		o.caughtUp(t, changeRev, "after the heal", healed)
	}
}

// caughtUp waits until the mirror's table holds the change to DE at rev
// (eu-west) and its watch is connected; since is when it was cut off or
// healed, for the log.
func (o *observed) caughtUp(t *testing.T, rev int64, when string, since time.Time) {
	t.Helper()
	tb := waitUntil(t, o.m, o.name+" catching up "+when, func(tb *routing.Table) bool { return tb.Revision() >= rev })
	if got := resolvePool(t, tb, "DE"); got != "eu-west" {
		t.Fatalf("%s: %s DE -> %s, want the change's eu-west", o.name, when, got)
	}
	watchStatus(t, o.m, o.name+" Connected "+when, 15*time.Second, func(s watch.Status) bool { return s.Connected }, func(watch.Status) error { return nil })
	t.Logf("%s: caught up and connected %s, %v after", o.name, when, time.Since(since).Round(10*time.Millisecond))
}

// TestPartitionedEndpointFailsOver: with a second endpoint in the majority,
// the mirror does not need the partition to heal. Its watch on the cut-off
// member ends; clientv3 sends each new request or stream to its next
// endpoint (round-robin, blind to which member has a leader), so a probe
// that lands on member 3 fails, and a watch opened there is refused at
// once with "no leader" and opened again, from the applied revision, until
// it lands on member 1; no relist is needed. As above, one mirror with 200ms progress requests
// and one with only the leader check.
func TestPartitionedEndpointFailsOver(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	c, writer, rev := startPartitionCluster(t)
	var mirrors []*observed
	var clients []*clientv3.Client
	for _, cfg := range []struct {
		name     string
		interval time.Duration
	}{{"progress-200ms", 200 * time.Millisecond}, {"leader-check-only", time.Minute}} {
		// The client starts with member 3 alone, so the watch is opened
		// there; member 1 is added afterwards (the open watch stays).
		cli := c.Client(t, lone)
		o := startObserved(t, cfg.name, cli, watch.Config{ProgressInterval: cfg.interval})
		waitUntil(t, o.m, o.name+" initial list", func(tb *routing.Table) bool { return tb.Revision() >= rev })
		mirrors, clients = append(mirrors, o), append(clients, cli)
	}
	mirrors[0].stable(t, 1200*time.Millisecond, "on the healthy, idle cluster")
	for _, cli := range clients {
		cli.SetEndpoints(c.Endpoints(lone, 0)...)
	}
	// Both watches are on member 3, as etcd itself counts them.
	if n := serverWatchers(t, c.Members[lone].ClientURL); n != len(mirrors) {
		t.Fatalf("member 3 serves %d watchers, want the %d mirrors'", n, len(mirrors))
	}

	c.Partition(lone)
	cut := time.Now()
	changeRev := putWithin(t, writer, "routes/DE", newDE)
	for _, o := range mirrors {
		o.caughtUp(t, changeRev, "through member 1, partition not healed", cut)
	}
	// And settled there: a watch on member 1, not a loop of lists through
	// member 1 and watches refused by member 3.
	for _, o := range mirrors {
		o.stable(t, 1200*time.Millisecond, "after failing over to member 1")
	}
	if n := serverWatchers(t, c.Members[0].ClientURL); n != len(mirrors) {
		t.Fatalf("member 1 serves %d watchers, want the %d mirrors'", n, len(mirrors))
	}
}

// serverWatchers returns how many watchers the member at clientURL serves,
// from its etcd_debugging_mvcc_watcher_total gauge.
func serverWatchers(t *testing.T, clientURL string) int {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(clientURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "etcd_debugging_mvcc_watcher_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("watcher gauge %q: %v", l, err)
			}
			return int(n)
		}
	}
	t.Fatalf("no etcd_debugging_mvcc_watcher_total in %s/metrics", clientURL)
	return 0
}

// resyncs returns the mirror's resyncs_total over all reasons.
func resyncs(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "regiond_watch_resyncs_total" {
			for _, mt := range mf.GetMetric() {
				n += mt.GetCounter().GetValue()
			}
		}
	}
	return n
}

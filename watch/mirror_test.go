package watch_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

const prefix = "/regiond/v1/routing/"

// fastBackoff keeps tests short.
func fastBackoff() *backoff.Backoff { return backoff.New(20*time.Millisecond, 200*time.Millisecond) }

func startMirror(t *testing.T, cli *clientv3.Client, cfg watch.Config) *watch.Mirror {
	t.Helper()
	cfg.Client, cfg.Prefix = cli, prefix
	if cfg.NewBackoff == nil {
		cfg.NewBackoff = fastBackoff
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = 200 * time.Millisecond
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = time.Second
	}
	m, err := watch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runMirror(t, m)
	return m
}

// runMirror runs m until the test ends and waits (bounded) until it is ready.
func runMirror(t *testing.T, m *watch.Mirror) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := m.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
}

// waitUntil waits, bounded, until cond holds on the mirror's table.
func waitUntil(t *testing.T, m *watch.Mirror, what string, cond func(*routing.Table) bool) *routing.Table {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		ch := m.Changed()
		if tb := m.Table(); tb != nil && cond(tb) {
			return tb
		}
		select {
		case <-ch:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s (table revision %d)", what, m.Table().Revision())
		}
	}
}

func loadExample(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	return fleettest.Load(t, cli, prefix)
}

func put(t *testing.T, cli *clientv3.Client, rel, val string) int64 {
	t.Helper()
	resp, err := cli.Put(context.Background(), prefix+rel, val)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func resolvePool(t *testing.T, tb *routing.Table, cc string) string {
	t.Helper()
	d, err := tb.Resolve(cc, "viewer-1", time.Now())
	if err != nil {
		return "NoRoute"
	}
	return d.Pool
}

func TestPutDeleteTxnApplied(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	rev := loadExample(t, cli)
	m := startMirror(t, cli, watch.Config{})
	tb := m.Table()
	if tb.Revision() < rev || tb.Epoch() != 1 {
		t.Fatalf("initial table revision %d epoch %d, want >= %d and 1", tb.Revision(), tb.Epoch(), rev)
	}
	if got := resolvePool(t, tb, "DE"); got != "eu-central" {
		t.Fatalf("DE -> %s, want eu-central", got)
	}

	// A put.
	rev = put(t, cli, "routes/DE", `{"targets":[{"pool":"eu-west","weight":100}],"fallback":["eu-general"]}`)
	tb = waitUntil(t, m, "put applied", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	if got := resolvePool(t, tb, "DE"); got != "eu-west" {
		t.Fatalf("after put DE -> %s, want eu-west", got)
	}

	// A delete: DE falls back to _default's eu pool.
	resp, err := cli.Delete(context.Background(), prefix+"routes/DE")
	if err != nil {
		t.Fatal(err)
	}
	tb = waitUntil(t, m, "delete applied", func(tb *routing.Table) bool { return tb.Revision() >= resp.Header.Revision })
	if _, ok := tb.Route("DE"); ok {
		t.Fatal("routes/DE still in the table after delete")
	}
	if e := tb.Effective("DE"); e.Route != routing.DefaultRoute || e.Candidates[0].Pool != "eu-central" {
		t.Fatalf("after delete DE -> %+v, want _default's eu pools", e)
	}

	// A multi-key Txn is applied as one table: both changes or neither.
	tx, err := cli.Txn(context.Background()).Then(
		clientv3.OpPut(prefix+"pools/eu-central", `{"host":"edge-fra-9.example.net","residency":"eu","status":"draining"}`),
		clientv3.OpPut(prefix+"routes/AT", `{"targets":[{"pool":"eu-north","weight":100}]}`),
		clientv3.OpPut(prefix+"epoch", "2"),
	).Commit()
	if err != nil {
		t.Fatal(err)
	}
	tb = waitUntil(t, m, "txn applied", func(tb *routing.Table) bool { return tb.Revision() >= tx.Header.Revision })
	if tb.Epoch() != 2 || resolvePool(t, tb, "AT") != "eu-north" || resolvePool(t, tb, "CZ") == "eu-central" {
		t.Fatalf("txn not applied whole: epoch %d AT->%s CZ->%s", tb.Epoch(), resolvePool(t, tb, "AT"), resolvePool(t, tb, "CZ"))
	}
}

func TestInvalidValueKeepsLastGood(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	m := startMirror(t, cli, watch.Config{})
	rev := put(t, cli, "routes/PL", `{"targets":[{"pool":"eu-west","weight":130}]}`)
	tb := waitUntil(t, m, "bad value seen", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	sk := tb.Skipped()
	if len(sk) != 1 || sk[0].Key != "routes/PL" || !strings.Contains(sk[0].Error, "targets[0].weight: must be 0..100, got 130") {
		t.Fatalf("skipped = %+v, want routes/PL weight error", sk)
	}
	r, ok := tb.Route("PL")
	if !ok || len(r.Targets) != 2 || r.Targets[0].Weight != 70 {
		t.Fatalf("routes/PL = %+v, want the last good value (eu-central 70, eu-west 30)", r)
	}
	// A good value clears the skip.
	rev = put(t, cli, "routes/PL", `{"targets":[{"pool":"eu-west","weight":100}]}`)
	tb = waitUntil(t, m, "good value", func(tb *routing.Table) bool { return tb.Revision() >= rev })
	if len(tb.Skipped()) != 0 || resolvePool(t, tb, "PL") != "eu-west" {
		t.Fatalf("after fix: skipped %+v, PL -> %s", tb.Skipped(), resolvePool(t, tb, "PL"))
	}
}

// etcdState returns every key/value of the prefix as "key=value" lines.
func etcdState(t *testing.T, cli *clientv3.Client) []string {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, fmt.Sprintf("%s=%s", kv.Key[len(prefix):], kv.Value))
	}
	return out
}

// tableState returns the table's pools and routes as "key=value" lines, to
// compare with etcdState restricted to pools and routes.
func tableState(t *testing.T, tb *routing.Table) []string {
	t.Helper()
	var out []string
	for _, id := range tb.PoolIDs() {
		p, _ := tb.Pool(id)
		b, _ := routing.EncodeValue(&p.Pool)
		out = append(out, fmt.Sprintf("pools/%s=%s", id, b))
	}
	for _, name := range tb.RouteNames() {
		r, _ := tb.Route(name)
		b, _ := routing.EncodeValue(r)
		out = append(out, fmt.Sprintf("routes/%s=%s", name, b))
	}
	sort.Strings(out)
	return out
}

func configLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "pools/") || strings.HasPrefix(l, "routes/") {
			out = append(out, l)
		}
	}
	return out
}

func TestCompactionWhileCutOffRelists(t *testing.T) {
	srv := devetcd.NewTest(t)
	direct := devetcd.NewTestClient(t, srv)
	// Values written through the agent-visible path are normalized JSON, so
	// the table's re-encoding is byte-equal to etcd's.
	for i := 0; i < 20; i++ {
		put(t, direct, fmt.Sprintf("pools/p%02d", i), fmt.Sprintf(`{"host":"h%d.example.net","residency":"eu","status":"active"}`, i))
	}
	put(t, direct, "routes/_default", `{"targets":[{"pool":"p00","weight":100}],"affinity":"sticky"}`)
	proxy, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.URL()}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	m := startMirror(t, cli, watch.Config{PageSize: 7}) // lists in pages of 7 keys

	proxy.Sever()
	// While the agent is cut off: deletes, puts, and a compaction past them.
	for i := 0; i < 10; i++ {
		if _, err := direct.Delete(context.Background(), fmt.Sprintf("%spools/p%02d", prefix, i+10)); err != nil {
			t.Fatal(err)
		}
	}
	put(t, direct, "routes/_default", `{"targets":[{"pool":"p01","weight":100}],"affinity":"sticky"}`)
	last := put(t, direct, "pools/new", `{"host":"new.example.net","residency":"eu","status":"active"}`)
	if _, err := direct.Compact(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	tb := waitUntil(t, m, "relist after compaction", func(tb *routing.Table) bool { return tb.Revision() >= last })
	want := configLines(etcdState(t, direct))
	got := tableState(t, tb)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after relist the table differs from etcd:\n got: %v\nwant: %v", got, want)
	}
	if _, ok := tb.Pool("p15"); ok {
		t.Fatal("deleted pool p15 still in the table")
	}
}

func TestConcurrentReadersNeverSeeTornTables(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	m := startMirror(t, cli, watch.Config{})
	const writes = 1000
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var last int64
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tb := m.Table()
				if !tb.VerifyChecksum() {
					errs <- "torn table: checksum mismatch"
					return
				}
				if tb.Revision() < last {
					errs <- fmt.Sprintf("revision went backwards: %d after %d", tb.Revision(), last)
					return
				}
				last = tb.Revision()
				d, err := tb.Resolve("PL", fmt.Sprint(i), time.Now())
				if err == nil && d.Revision != tb.Revision() {
					errs <- "decision revision differs from its table's"
					return
				}
				time.Sleep(time.Millisecond) // leave CPU to the writer and the mirror on small machines
			}
		}(r)
	}
	var lastRev int64
	for i := 0; i < writes; i++ {
		w := i % 101
		lastRev = put(t, cli, "routes/PL", fmt.Sprintf(`{"targets":[{"pool":"eu-central","weight":%d},{"pool":"eu-west","weight":%d}]}`, w, 100-w))
	}
	waitUntil(t, m, "all writes", func(tb *routing.Table) bool { return tb.Revision() >= lastRev })
	close(stop)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

// TestHealthGrace: a pool whose last health key goes stays healthy for the
// grace window, counted by the mirror from when it applied the deletion,
// then the mirror rebuilds the table with no etcd event. The window is
// checked on the tables' own record of it (Healthy at a given time), not
// by timing the test: the deletion is applied after the test's mark
// before, so the pool must be healthy until before+grace on every table.
func TestHealthGrace(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	put(t, cli, "pools/kr-music", `{"host":"edge-icn-1.example.net:443","residency":"apac","status":"active","health_check":true}`)
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), prefix+"health/kr-music/i1", `{"addr":"10.0.0.1:443"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	grace := 500 * time.Millisecond
	m := startMirror(t, cli, watch.Config{HealthGrace: grace})
	onKR := func(tb *routing.Table) bool {
		ex := tb.Explain("KR", "", time.Now())
		return ex.Decision != nil && len(ex.Routes) > 0 && ex.Routes[0].Pools[0].Eligible
	}
	waitUntil(t, m, "kr-music healthy", onKR)
	// The lease ends: the key goes, then the grace window.
	before := time.Now()
	revoked, err := cli.Revoke(context.Background(), lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	gone := waitUntil(t, m, "the health key's deletion", func(tb *routing.Table) bool { return tb.Revision() >= revoked.Header.Revision })
	if p, _ := gone.Pool("kr-music"); p.Instances != 0 || !gone.Healthy("kr-music", before.Add(grace-time.Nanosecond)) {
		t.Fatalf("kr-music after its key went (instances %d): unhealthy before the grace window ended", p.Instances)
	}
	tb := waitUntil(t, m, "kr-music unhealthy", func(tb *routing.Table) bool { return !tb.Healthy("kr-music", time.Now()) })
	if !tb.Healthy("kr-music", before.Add(grace-time.Nanosecond)) {
		t.Fatalf("the rebuilt table has kr-music unhealthy before the grace window ended")
	}
	if tb.Revision() != revoked.Header.Revision {
		t.Fatalf("rebuilt at revision %d, want the deletion's %d (no etcd event needed)", tb.Revision(), revoked.Header.Revision)
	}
	ex := tb.Explain("KR", "", time.Now())
	if ex.Routes[0].Pools[0].Reason != "pool-unhealthy:kr-music" {
		t.Fatalf("KR explain = %+v, want kr-music passed over as unhealthy", ex.Routes[0])
	}
	// A health key returns: healthy again.
	put(t, cli, "health/kr-music/i2", `{"addr":"10.0.0.2:443"}`)
	waitUntil(t, m, "kr-music healthy again", func(tb *routing.Table) bool { return tb.Healthy("kr-music", time.Now()) })
}

// TestBoostEndsAtItsExpiresAt: a boost whose lease lives on past its
// expires_at (a leader election renews every lease to its full TTL) is
// applied until expires_at, then the mirror rebuilds the table without
// it, with no etcd event, while its key is still in etcd.
func TestBoostEndsAtItsExpiresAt(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	m := startMirror(t, cli, watch.Config{})
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
	resp, err := cli.Put(context.Background(), prefix+"overrides/jp",
		`{"route":"JP","targets":[{"pool":"kr-music","weight":100}],"expires_at":"`+end+`"}`, clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	pool := func(tb *routing.Table) string {
		d, _ := tb.Resolve("JP", "viewer-1", time.Now())
		return d.Pool
	}
	boosted := waitUntil(t, m, "the boost applied", func(tb *routing.Table) bool { return tb.Revision() >= resp.Header.Revision })
	if got := pool(boosted); got != "kr-music" {
		t.Fatalf("JP with the boost live: %s", got)
	}
	ended := waitUntil(t, m, "the boost ended by its expires_at", func(tb *routing.Table) bool {
		r, _ := tb.Route("JP")
		return len(r.Targets) > 0 && r.Targets[0].Pool != "kr-music"
	})
	if ended.Revision() != resp.Header.Revision || len(ended.Overrides()) != 0 || pool(ended) != "apac-tokyo" {
		t.Fatalf("table at revision %d (the boost's %d), overrides %v, JP to %s; want the boost's revision, none, apac-tokyo",
			ended.Revision(), resp.Header.Revision, ended.Overrides(), pool(ended))
	}
	if g, err := cli.Get(context.Background(), prefix+"overrides/jp"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("the boost's key, whose lease lives on: %v %v", g, err)
	}
}

func TestRevisionBehindSnapshotIsAnAlarm(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	rev := loadExample(t, cli)
	// A snapshot from a cluster far ahead (etcd since restored from an
	// older backup): the mirror follows etcd, and says so.
	seed := routing.Compile(rev+100000, nil, nil, routing.CompileOptions{Stale: true})
	m, reg := runSeeded(t, cli, seed)
	if tb := m.Table(); tb.Stale() || tb.Revision() < rev || tb.Revision() > rev+10 {
		t.Fatalf("table revision %d stale %v, want etcd's (%d) and fresh", tb.Revision(), tb.Stale(), rev)
	}
	if got := testutil.ToFloat64(metric(t, reg, "regiond_watch_revision_regressions_total")); got != 1 {
		t.Fatalf("revision regressions = %v, want 1", got)
	}
}

// metric returns the collector of a registered metric family by name.
func metric(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			v := mf.GetMetric()[0]
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
			g.Set(v.GetCounter().GetValue() + v.GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

func TestSnapshotOfAnotherClusterIsNotARegression(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	rev := loadExample(t, cli)
	// A snapshot written against another cluster (since replaced), far
	// ahead in its own revisions: not comparable, not an alarm.
	seed := routing.Compile(rev+100000, nil, nil, routing.CompileOptions{Stale: true, ClusterID: 0xdead})
	m, reg := runSeeded(t, cli, seed)
	tb := m.Table()
	if tb.ClusterID() == 0xdead || tb.ClusterID() == 0 || tb.Revision() < rev {
		t.Fatalf("table cluster %x revision %d, want etcd's cluster and revision >= %d", tb.ClusterID(), tb.Revision(), rev)
	}
	if got := testutil.ToFloat64(metric(t, reg, "regiond_watch_cluster_changes_total")); got != 1 {
		t.Fatalf("cluster changes = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metric(t, reg, "regiond_watch_revision_regressions_total")); got != 0 {
		t.Fatalf("revision regressions = %v, want 0 (another cluster's revisions are not comparable)", got)
	}
}

// runSeeded runs a mirror seeded with a snapshot table until the test ends,
// and waits for its first list; it returns the mirror and its metrics.
func runSeeded(t *testing.T, cli *clientv3.Client, seed *routing.Table) (*watch.Mirror, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := watch.New(watch.Config{Client: cli, Prefix: prefix, Registerer: reg, NewBackoff: fastBackoff})
	if err != nil {
		t.Fatal(err)
	}
	m.Seed(seed, time.Now())
	runMirror(t, m)
	return m, reg
}

// TestAfterChangeSeesTheNewTable: AfterChange runs after each swap of a
// table of new content (here built from watch events), in the mirror's goroutine, and the table
// it sees is already the new one (the snapshot writer writes that table).
func TestAfterChangeSeesTheNewTable(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	seen := make(chan int64, 16)
	var m atomic.Pointer[watch.Mirror]
	m.Store(startMirror(t, cli, watch.Config{AfterChange: func() {
		if mm := m.Load(); mm != nil { // nil for the first list, inside startMirror
			seen <- mm.Table().Revision()
		}
	}}))
	for i := range 3 {
		rev := put(t, cli, "routes/DE", fmt.Sprintf(`{"targets":[{"pool":"eu-west","weight":%d}]}`, 10+i))
		select {
		case r := <-seen:
			if r < rev {
				t.Fatalf("AfterChange saw revision %d, want the put's %d", r, rev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("AfterChange not called after the put at revision %d", rev)
		}
	}
}

// TestListedTableWaitsForItsWatch: the table of the first list is
// published (AfterChange: the snapshot file) once its watch is created,
// not before. A client that reads the new file and then writes has its
// change sent by a watch that is already at etcd's revision: etcd
// delivers to such a watch at once, while one created behind it is
// caught up only every 100 ms.
func TestListedTableWaitsForItsWatch(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	connected := make(chan bool, 16)
	var m atomic.Pointer[watch.Mirror]
	cfg := watch.Config{Client: cli, Prefix: prefix, NewBackoff: fastBackoff, ProgressInterval: 200 * time.Millisecond, RequestTimeout: time.Second,
		AfterChange: func() { connected <- m.Load().Status().Connected }}
	mm, err := watch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Store(mm)
	runMirror(t, mm)
	select {
	case c := <-connected:
		if !c {
			t.Fatal("the listed table was published before its watch was created")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AfterChange not called for the listed table")
	}
}

// TestChangedWakesAfterAfterChange: the Changed waiters of a swap are
// woken only once AfterChange has returned (it writes the snapshot first,
// not competing with them for a CPU), and the table AfterChange sees is
// already the new one.
func TestChangedWakesAfterAfterChange(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	type seen struct {
		rev    int64
		closed bool // the channel Changed gave before the put
	}
	calls := make(chan seen, 16)
	var before atomic.Pointer[<-chan struct{}]
	var m atomic.Pointer[watch.Mirror]
	m.Store(startMirror(t, cli, watch.Config{ProgressInterval: time.Hour, AfterChange: func() {
		mm, ch := m.Load(), before.Load()
		if mm == nil || ch == nil { // the first list, inside startMirror
			return
		}
		s := seen{rev: mm.Table().Revision()}
		select {
		case <-*ch:
			s.closed = true
		default:
		}
		calls <- s
	}}))
	for i := range 3 {
		ch := m.Load().Changed()
		before.Store(&ch)
		rev := put(t, cli, "routes/DE", fmt.Sprintf(`{"targets":[{"pool":"eu-west","weight":%d}]}`, 20+i))
		select {
		case s := <-calls:
			if s.rev < rev {
				t.Fatalf("AfterChange saw revision %d, want the put's %d", s.rev, rev)
			}
			if s.closed {
				t.Fatalf("put %d: Changed waiters were woken before AfterChange was called", i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("AfterChange not called after the put at revision %d", rev)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("put %d: Changed not closed after AfterChange returned", i)
		}
	}
}

// TestSeedsUnhealthyPoolStaysUnhealthy: an agent restarted on a snapshot
// file that has a health-checked pool unhealthy, whose origin is still
// down (no health key in etcd), does not send viewers there for the
// grace window from its start (the docs review: a fleet's restart did,
// on every node); the pool the file has healthy gets that window, its
// keys having gone while no agent watched.
func TestSeedsUnhealthyPoolStaysUnhealthy(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	kvs := []routing.KV{
		{Key: "pools/eu-north", Value: []byte(`{"host":"north.example.net","residency":"eu","health_check":true}`)},
		{Key: "pools/eu-south", Value: []byte(`{"host":"south.example.net","residency":"eu","health_check":true}`)},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"eu-north","weight":50},{"pool":"eu-south","weight":50}]}`)},
	}
	for _, kv := range kvs {
		put(t, cli, kv.Key, string(kv.Value))
	}
	// The file the last run wrote: eu-north past its grace, eu-south live.
	start := time.Now().Add(-time.Hour)
	written := start.Add(time.Minute)
	live := append(kvs[:len(kvs):len(kvs)], routing.KV{Key: "health/eu-south/h1", Value: []byte(`{"addr":"10.0.0.2:443"}`)})
	b, err := routing.Compile(1, live, nil, routing.CompileOptions{Now: start}).JSON(written)
	if err != nil {
		t.Fatal(err)
	}
	seed, _, err := routing.LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := runSeeded(t, cli, seed)
	tb, now := m.Table(), time.Now()
	if tb.Stale() {
		t.Fatalf("the table after the first list is still the seed")
	}
	if tb.Healthy("eu-north", now) {
		t.Errorf("eu-north, unhealthy in the snapshot, no health key in etcd: healthy after the restart; want unhealthy")
	}
	if !tb.Healthy("eu-south", now) {
		t.Errorf("eu-south, healthy in the snapshot: unhealthy at once; want the grace window")
	}
	for _, key := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if d, err := tb.Resolve("PL", key, now); err != nil || d.Pool != "eu-south" {
			t.Fatalf("PL %s after the restart: %+v %v; want eu-south", key, d, err)
		}
	}
}

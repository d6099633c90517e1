package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

// fakeClock is the status publisher's clock in tests: it ticks only when
// the test says so, and its time moves only when the test moves it.
type fakeClock struct {
	tick chan time.Time
	ns   atomic.Int64
}

func newFakeClock() *fakeClock {
	c := &fakeClock{tick: make(chan time.Time, 1)}
	c.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) now() time.Time { return time.Unix(0, c.ns.Load()) }

// fire ticks unless a tick is pending already.
func (c *fakeClock) fire() {
	select {
	case c.tick <- c.now():
	default:
	}
}

func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func (c *fakeClock) install(a *agent.Agent) { agent.SetStatusClock(a, c.tick, c.now) }

// statusKV reads an agent's status key: the value, its version and mod
// revision (zero when absent).
func statusKV(t *testing.T, cli *clientv3.Client, node string) (routing.AgentStatus, int64, int64) {
	t.Helper()
	resp, err := cli.Get(context.Background(), "/regiond/v1/agents/"+node)
	if err != nil {
		t.Fatal(err)
	}
	var st routing.AgentStatus
	if len(resp.Kvs) == 0 {
		return st, 0, 0
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
		t.Fatalf("status key of %s: %v", node, err)
	}
	return st, resp.Kvs[0].Version, resp.Kvs[0].ModRevision
}

// settleStatus waits until the status key says connected and no put is
// due, ticking the publisher's check meanwhile: the first put may come
// before the watch is created (connected=false), and the re-put that
// follows may still be in flight. A test that then cuts the connection,
// or reads the key's revision to watch it from, starts from a publisher
// that is idle; it does not tick it again.
func settleStatus(t *testing.T, cli *clientv3.Client, h *harness, clock *fakeClock) {
	t.Helper()
	waitFor(t, "status key connected, no put due", func() bool {
		clock.fire()
		st, v, _ := statusKV(t, cli, "node-1")
		return v > 0 && st.Connected && h.a.Mirror().Status().Connected && !agent.StatusPutPending(h.a)
	})
}

// TestStatusKeyFollowsChangesAtOnce: the status key is put for a
// regionctl write's revision (a change that moves the epoch) as soon as
// the table has it, with no tick of the publisher's once-a-second check,
// no time passing on its clock (both injected, neither moves) and puts for
// changes that did not move the epoch an hour apart, so no rate limit or
// settle can have let it through; a run of writes ends with the status key
// at the last one. Its change_revision names the newest event applied, a
// delete too.
func TestStatusKeyFollowsChangesAtOnce(t *testing.T) {
	srv, cli := exampleEtcd(t)
	clock := newFakeClock()
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, "node-1")
	cfg.StatusTTL = 2 * time.Second
	h := runAgent(t, dir, cfg, clock.install, quietHour)
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	waitFor(t, "status key", func() bool { _, v, _ := statusKV(t, cli, "node-1"); return v > 0 })
	_, _, from := statusKV(t, cli, "node-1")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "/regiond/v1/agents/node-1", clientv3.WithRev(from+1))
	rev, epoch := regionctlWrite(t, cli, clientv3.OpPut(prefix+"routes/DE", `{"targets":[{"pool":"eu-north","weight":100}]}`))
	st := nextStatus(t, wch, func(st routing.AgentStatus) bool { return st.Revision >= rev })
	if st.Revision != rev || !st.Connected || st.Epoch != epoch {
		t.Fatalf("status put after the change: %+v, want revision %d, connected, epoch %d", st, rev, epoch)
	}

	if st.ChangeRevision != rev {
		t.Fatalf("status put after the change: change_revision %d, want %d", st.ChangeRevision, rev)
	}
	// It names the cluster its table was listed from (regionctl status
	// tells an agent of a restored backup's former cluster by it).
	hdr, err := cli.Get(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterID != fmt.Sprintf("%x", hdr.Header.ClusterId) {
		t.Fatalf("status put: cluster_id %q, want etcd's %x", st.ClusterID, hdr.Header.ClusterId)
	}
	// A delete leaves no key: the status key says the agent applied it.
	d, _ := regionctlWrite(t, cli, clientv3.OpDelete(prefix+"routes/DE"))
	if st := nextStatus(t, wch, func(st routing.AgentStatus) bool { return st.Revision >= d }); st.ChangeRevision != d {
		t.Fatalf("status put after a delete: %+v, want change_revision %d", st, d)
	}

	var last int64
	for i := 0; i < 30; i++ {
		last, _ = regionctlWrite(t, cli, clientv3.OpPut(prefix+"routes/DE", deRoute(10+i)))
	}
	if st := nextStatus(t, wch, func(st routing.AgentStatus) bool { return st.Revision >= last }); st.Revision != last {
		t.Fatalf("status after a run of changes: revision %d, want the last change's %d", st.Revision, last)
	}
}

// TestStatusPutsCoalesce: regionctl writes that reach the table while a
// status put is in flight wait for it (one put at a time), then go out in
// one put carrying the latest of them, with no tick of the publisher's
// check.
func TestStatusPutsCoalesce(t *testing.T) {
	srv, cli := exampleEtcd(t)
	clock := newFakeClock()
	var held atomic.Bool
	var inFlight, most atomic.Int32
	entered, release := make(chan struct{}, 1), make(chan struct{})
	hold := func(time.Time) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		if held.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
	}
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Node, cfg.Logger = srv.Endpoints, "node-1", quietLogger()
	cfg.Socket, cfg.Listen, cfg.Snapshot = "", "127.0.0.1:0", ""
	cfg.StatusTTL = 2 * time.Second
	h := runAgent(t, dir, cfg, clock.install, quietHour, func(a *agent.Agent) { agent.SetBeforeStatusPut(a, hold) })
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the agent stops
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	settleStatus(t, cli, h, clock)
	_, _, from := statusKV(t, cli, "node-1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "/regiond/v1/agents/node-1", clientv3.WithRev(from+1))

	put := func(w int) int64 {
		rev, _ := regionctlWrite(t, cli, clientv3.OpPut(prefix+"routes/DE", deRoute(w)))
		return rev
	}
	held.Store(true)
	first := put(10)
	<-entered // the put for the first change is in flight, held
	put(20)
	third := put(30)
	waitFor(t, "the later changes in the table, a put pending", func() bool {
		return h.a.Mirror().Status().ChangeRevision == third && agent.StatusPutPending(h.a)
	})
	letGo()
	if st := nextStatus(t, wch, func(routing.AgentStatus) bool { return true }); st.Revision != first {
		t.Fatalf("first status put after the changes: revision %d, want the first change's %d", st.Revision, first)
	}
	if st := nextStatus(t, wch, func(routing.AgentStatus) bool { return true }); st.Revision != third {
		t.Fatalf("next status put: revision %d, want the last change's %d (the one between coalesced)", st.Revision, third)
	}
	if n := most.Load(); n != 1 {
		t.Fatalf("%d status puts were in flight at once, want 1", n)
	}
}

// quietHour makes the agent's status publisher put changes that did not
// move the epoch an hour apart: within a test, only the puts for
// regionctl's writes (and the first) go out.
func quietHour(a *agent.Agent) { agent.SetStatusQuietSpacing(a, time.Hour) }

// regionctlWrite applies ops in one Txn with the epoch key moved by one,
// as each of regionctl's writes does, and returns the Txn's revision and
// the new epoch.
func regionctlWrite(t *testing.T, cli *clientv3.Client, ops ...clientv3.Op) (int64, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"epoch")
	if err != nil {
		t.Fatal(err)
	}
	var epoch int64
	if len(resp.Kvs) == 1 {
		if epoch, err = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64); err != nil {
			t.Fatalf("epoch key: %v", err)
		}
	}
	epoch++
	tx, err := cli.Txn(ctx).Then(append(ops, clientv3.OpPut(prefix+"epoch", strconv.FormatInt(epoch, 10)))...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	return tx.Header.Revision, epoch
}

// deRoute is a valid route for DE: eu-north at weight w (0..100), the
// rest on eu-central; each w a change.
func deRoute(w int) string {
	return fmt.Sprintf(`{"targets":[{"pool":"eu-north","weight":%d},{"pool":"eu-central","weight":%d}]}`, w, 100-w)
}

// nextStatus reads status puts from wch until one satisfies ok.
func nextStatus(t *testing.T, wch clientv3.WatchChan, ok func(routing.AgentStatus) bool) routing.AgentStatus {
	t.Helper()
	for resp := range wch {
		if err := resp.Err(); err != nil {
			t.Fatalf("watch of the status key: %v", err)
		}
		for _, ev := range resp.Events {
			var st routing.AgentStatus
			if ev.Type != clientv3.EventTypePut || json.Unmarshal(ev.Kv.Value, &st) != nil {
				continue
			}
			if ok(st) {
				return st
			}
		}
	}
	t.Fatal("no status put for the change before the watch ended (the publisher waited for a tick that never came?)")
	return routing.AgentStatus{}
}

// TestIdleAgentsDoNotDriveEachOthersStatus: agents on one etcd, idle, with
// progress notifications every 50 ms. Each agent's status put moves the
// revision every other agent then learns from a progress notification; a
// status re-put for that alone would make them write each other's
// revision forever. Over 20 rounds, each of which waits until every agent
// has received a progress notification and ticks its publisher, no status
// key is written (its version stays), unless for a connection that came
// or went; once the clock passes statusRefresh, each re-puts once.
func TestIdleAgentsDoNotDriveEachOthersStatus(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadRev := loadExample(t, cli)
	const n = 4
	var hs [n]*harness
	var clocks [n]*fakeClock
	node := func(i int) string { return fmt.Sprintf("node-%d", i) }
	for i := range hs {
		dir := t.TempDir()
		cfg := agent.DefaultConfig()
		cfg.Endpoints, cfg.Node, cfg.Logger = srv.Endpoints, node(i), quietLogger()
		cfg.Socket, cfg.Listen, cfg.Snapshot = "", "127.0.0.1:0", ""
		cfg.StatusTTL, cfg.ProgressInterval = 2*time.Second, 50*time.Millisecond
		clocks[i] = newFakeClock()
		hs[i] = runAgent(t, dir, cfg, clocks[i].install)
	}
	tickAll := func() {
		for _, c := range clocks {
			c.fire()
		}
	}
	waitFor(t, "every agent's status, synced and connected", func() bool {
		tickAll()
		for i := range hs {
			if st, _, _ := statusKV(t, cli, node(i)); st.Revision < loadRev || !st.Connected {
				return false
			}
		}
		return true
	})
	etcdRev := func() int64 {
		resp, err := cli.Get(context.Background(), "/regiond/v1/epoch", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	// The agents learn the revisions of each other's puts.
	waitFor(t, "every agent at etcd's revision", func() bool {
		rev := etcdRev()
		for _, h := range hs {
			if h.a.Mirror().Status().Revision != rev {
				return false
			}
		}
		return true
	})
	var versions [n]int64
	var last [n]routing.AgentStatus
	for i := range hs {
		last[i], versions[i], _ = statusKV(t, cli, node(i))
	}
	startRev := etcdRev()
	// progressRound ticks every publisher and waits until every agent has
	// received a progress notification since.
	progressRound := func() {
		var synced [n]time.Time
		for i, h := range hs {
			synced[i] = h.a.Mirror().Status().SyncedAt
		}
		tickAll()
		waitFor(t, "a progress notification at every agent", func() bool {
			for i, h := range hs {
				if !h.a.Mirror().Status().SyncedAt.After(synced[i]) {
					return false
				}
			}
			return true
		})
	}
	for round := 0; round < 20; round++ {
		progressRound()
	}
	for i := range hs {
		if _, v, _ := statusKV(t, cli, node(i)); v != versions[i] {
			explainPuts(t, cli, node(i), startRev, last[i])
		}
	}

	// A minute later by the clock, each status is refreshed once, to the
	// revision of etcd then; the refreshes are not refreshed in turn.
	for _, c := range clocks {
		c.advance(time.Minute + time.Second)
	}
	tickAll()
	waitFor(t, "every status refreshed", func() bool {
		for i := range hs {
			if _, v, _ := statusKV(t, cli, node(i)); v <= versions[i] {
				return false
			}
		}
		return true
	})
	var refreshedAt [n]int64
	for i := range hs {
		last[i], versions[i], refreshedAt[i] = statusKV(t, cli, node(i))
	}
	for round := 0; round < 5; round++ {
		progressRound()
	}
	for i := range hs {
		if _, v, _ := statusKV(t, cli, node(i)); v != versions[i] {
			explainPuts(t, cli, node(i), refreshedAt[i], last[i])
		}
	}
}

// explainPuts fails the test for each put of node's status key since rev
// that neither changed the connection nor the epoch of the status before
// it (a connection that came or went on a loaded machine is worth a put).
func explainPuts(t *testing.T, cli *clientv3.Client, node string, rev int64, prev routing.AgentStatus) {
	t.Helper()
	key := "/regiond/v1/agents/" + node
	cur, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for r := rev + 1; r <= cur.Header.Revision; r++ {
		resp, err := cli.Get(context.Background(), key, clientv3.WithRev(r))
		if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != r {
			continue
		}
		var st routing.AgentStatus
		json.Unmarshal(resp.Kvs[0].Value, &st)
		if st.Connected == prev.Connected && st.Epoch == prev.Epoch {
			t.Errorf("%s: status re-put at revision %d with only its revision moved (%d → %d): progress alone must not cause writes",
				node, r, prev.Revision, st.Revision)
		}
		prev = st
	}
}

// TestStatusKeyFollowsARelist: a change the agent learns by a relist (it
// was cut off while the change was made and the history compacted) is put
// to the status key as soon as the relisted table is in, like a change
// from the watch, with no tick of the publisher's check.
func TestStatusKeyFollowsARelist(t *testing.T) {
	cli, px, dir, cfg := exampleBehindProxy(t, "node-1")
	clock := newFakeClock()
	cfg.StatusTTL, cfg.ProgressInterval = 30*time.Second, 100*time.Millisecond
	h := runAgent(t, dir, cfg, clock.install)
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	// A put in flight when the connection is cut would fail, and a failed
	// put waits for the check's next tick, which this test never gives.
	settleStatus(t, cli, h, clock)

	px.Sever()
	p, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), p.Header.Revision); err != nil {
		t.Fatal(err)
	}
	_, _, from := statusKV(t, cli, "node-1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "/regiond/v1/agents/node-1", clientv3.WithRev(from+1))
	if err := px.Restore(); err != nil {
		t.Fatal(err)
	}
	// The put may say connected=false: the relisted table is in before the
	// new watch is created (the connection is re-put by the 1 s check).
	nextStatus(t, wch, func(st routing.AgentStatus) bool { return st.Revision >= p.Header.Revision })
}

// TestStatusPutsForChangesAreSpaced: a run of changes as fast as etcd
// takes them is reported in fewer puts than changes, the last carrying the
// last change, and the publisher decided on each put at least its spacing
// after the one before: statusSpacing for regionctl's writes (each moves
// the epoch), statusQuietSpacing for changes that do not (a heartbeat's
// health key, a lease ending). The instants are the publisher's own,
// handed to the hook before each put, not the test's reading of the time
// when the hook runs: that comes after the decision by however long the
// publisher's goroutine waited for a CPU, so under load two readings could
// be closer together than the decisions were. The publisher's instants
// never are, unless the spacing is broken.
func TestStatusPutsForChangesAreSpaced(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	for _, tc := range []struct {
		name    string
		spacing time.Duration
		pause   time.Duration // between changes: a run that spans at least two spacings
		write   func(t *testing.T, cli *clientv3.Client, op clientv3.Op) int64
	}{
		{"regionctl writes", agent.StatusSpacing, 0, func(t *testing.T, cli *clientv3.Client, op clientv3.Op) int64 {
			rev, _ := regionctlWrite(t, cli, op)
			return rev
		}},
		{"changes nobody waits on", agent.StatusQuietSpacing, agent.StatusQuietSpacing / 20, func(t *testing.T, cli *clientv3.Client, op clientv3.Op) int64 {
			resp, err := cli.Do(context.Background(), op)
			if err != nil {
				t.Fatal(err)
			}
			return resp.Put().Header.Revision
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := devetcd.NewTest(t)
			cli := devetcd.NewTestClient(t, srv)
			loadExample(t, cli)
			clock := newFakeClock()
			var mu sync.Mutex
			var puts []time.Time
			record := func(at time.Time) { mu.Lock(); puts = append(puts, at); mu.Unlock() }
			dir := t.TempDir()
			cfg := agent.DefaultConfig()
			cfg.Endpoints, cfg.Node, cfg.Logger = srv.Endpoints, "node-1", quietLogger()
			cfg.Socket, cfg.Listen, cfg.Snapshot = "", "127.0.0.1:0", ""
			cfg.StatusTTL = 2 * time.Second
			h := runAgent(t, dir, cfg, clock.install, func(a *agent.Agent) { agent.SetBeforeStatusPut(a, record) })
			waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
			settleStatus(t, cli, h, clock)
			_, _, from := statusKV(t, cli, "node-1")
			mu.Lock()
			puts = nil
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			wch := cli.Watch(ctx, "/regiond/v1/agents/node-1", clientv3.WithRev(from+1))
			const changes = 60 // over 3 s for changes nobody waits on
			var last int64
			for i := range changes {
				last = tc.write(t, cli, clientv3.OpPut(prefix+"routes/DE", deRoute(10+i)))
				time.Sleep(tc.pause)
			}
			if st := nextStatus(t, wch, func(st routing.AgentStatus) bool { return st.Revision >= last }); st.Revision != last {
				t.Fatalf("status after a run of changes: revision %d, want the last change's %d", st.Revision, last)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(puts) < 2 || len(puts) >= changes {
				t.Fatalf("%d status puts for %d changes, want fewer (coalesced), at least two", len(puts), changes)
			}
			for i := 1; i < len(puts); i++ {
				if d := puts[i].Sub(puts[i-1]); d < tc.spacing {
					t.Fatalf("status puts %d and %d decided only %v apart, want at least %v", i-1, i, d, tc.spacing)
				}
			}
			t.Logf("%d status puts for %d changes", len(puts), changes)
		})
	}
}

// TestQuietChangesDoNotHoldBackAWrite: changes that did not move the
// epoch (here a stream of plain puts, as a heartbeat's or an expiring
// lease's would be) are not put while the quiet spacing (an hour here)
// lasts, however many; a regionctl write among them is put at once
// all the same, carrying every change before it. So a storm of health
// changes costs etcd one status put per agent per second at most, and
// --wait-converged, which follows regionctl's writes, never waits on it.
// The write reaches the publisher in the quiet spacing's wait: the test
// holds it there, once woken, until the write is in the table (its
// observer), so that it is the wait that must end for the write, not a
// look at the status after a quiet change ended it.
func TestQuietChangesDoNotHoldBackAWrite(t *testing.T) {
	srv, cli := exampleEtcd(t)
	clock := newFakeClock()
	var puts atomic.Int32
	var waits waitLog
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Node, cfg.Logger = srv.Endpoints, "node-1", quietLogger()
	cfg.Socket, cfg.Listen, cfg.Snapshot = "", "127.0.0.1:0", ""
	cfg.StatusTTL = 2 * time.Second
	h := runAgent(t, dir, cfg, clock.install, quietHour, waits.install, func(a *agent.Agent) { agent.SetBeforeStatusPut(a, func(time.Time) { puts.Add(1) }) })
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	settleStatus(t, cli, h, clock)
	_, _, from := statusKV(t, cli, "node-1")
	before := puts.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "/regiond/v1/agents/node-1", clientv3.WithRev(from+1))
	var quiet int64
	for i := range 40 {
		p, err := cli.Put(ctx, prefix+"routes/DE", deRoute(10+i))
		if err != nil {
			t.Fatal(err)
		}
		quiet = p.Header.Revision
	}
	waitFor(t, "the quiet changes in the table", func() bool { return h.a.Mirror().Status().ChangeRevision == quiet })
	waitFor(t, "the publisher waiting out the quiet spacing", func() bool { return waits.count("spacing") > 0 })
	woken, release := waits.holdNext(t, "spacing-kick")
	rev, epoch := regionctlWrite(t, cli, clientv3.OpPut(prefix+"routes/AT", `{"targets":[{"pool":"eu-west","weight":100}]}`))
	held := false
	waitFor(t, "the publisher's wait woken by a change", func() bool {
		select {
		case <-woken:
			held = true
			return true
		default:
			return puts.Load() > before
		}
	})
	if !held {
		t.Fatalf("the write was put without the quiet spacing's wait being woken: a quiet change ended the wait (%d waits of the spacing began)", waits.count("spacing"))
	}
	waitFor(t, "the write in the table", func() bool { return h.a.Mirror().Status().ChangeRevision == rev })
	release()
	st := nextStatus(t, wch, func(routing.AgentStatus) bool { return true })
	if st.Revision != rev || st.Epoch != epoch || st.ChangeRevision != rev {
		t.Fatalf("first status put after 40 quiet changes and a write: %+v, want the write's revision %d and epoch %d", st, rev, epoch)
	}
	if n := puts.Load() - before; n != 1 {
		t.Fatalf("%d status puts for 40 quiet changes and a write, want 1 (the write's)", n)
	}
}

// TestSameNodeNameIsReported: a second agent started with the same --node
// (a cloned VM keeping its hostname, a regiond run by hand on a node)
// takes the status key; the first agent sees it at once (it watches its
// key), puts it back in a checked put, which finds the other's lease,
// logs an error naming the key and --node, and counts it in
// regiond_agent_node_conflicts_total; the second does the same, once. One
// agent alone never does. When the second stops (its revoke deletes the
// key it held), the first puts its key and node record back at once, not
// at its refresh a minute later (the runbook walk: the node was missing
// from regionctl status meanwhile).
func TestSameNodeNameIsReported(t *testing.T) {
	srv, cli := exampleEtcd(t)
	key := "/regiond/v1/agents/node-1"
	// status returns the key's lease and the revision its value reports.
	status := func() (int64, int64) {
		resp, err := cli.Get(context.Background(), key)
		if err != nil || len(resp.Kvs) != 1 {
			return 0, 0
		}
		var st routing.AgentStatus
		if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
			t.Fatal(err)
		}
		return resp.Kvs[0].Lease, st.Revision
	}
	lease := func() int64 { l, _ := status(); return l }
	var logs logbuf.Buffer
	cfg1 := offlineConfig(t.TempDir())
	cfg1.Endpoints, cfg1.StatusTTL = srv.Endpoints, 2*time.Second
	cfg1.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	h1 := runAgent(t, t.TempDir(), cfg1)
	waitFor(t, "the first agent's status key", func() bool { return lease() != 0 })
	first := lease()
	// A new epoch the first agent puts alone (a Txn on its own lease): no
	// conflict.
	p, err := cli.Put(context.Background(), prefix+"epoch", "2")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first agent's put of the change", func() bool { l, r := status(); return l == first && r >= p.Header.Revision })
	if n := counter(t, h1, "regiond_agent_node_conflicts_total"); n != 0 {
		t.Fatalf("one agent alone: regiond_agent_node_conflicts_total %v, want 0", n)
	}

	cfg2 := offlineConfig(t.TempDir())
	cfg2.Endpoints, cfg2.StatusTTL = srv.Endpoints, 2*time.Second
	h2 := runAgent(t, t.TempDir(), cfg2)
	// No change, no epoch: the first agent's next checked put would be
	// its refresh, a minute away; waitFor gives up after 30 s.
	waitFor(t, "the first agent's conflict", func() bool { return counter(t, h1, "regiond_agent_node_conflicts_total") >= 1 })
	waitFor(t, "the second agent's conflict", func() bool { return counter(t, h2, "regiond_agent_node_conflicts_total") >= 1 })
	if l := logs.String(); !strings.Contains(l, `"level":"ERROR","msg":"agent status: another agent publishes as this node`) ||
		!strings.Contains(l, `"key":"`+key+`"`) || !strings.Contains(l, "--node must be unique") {
		t.Fatalf("no error naming the key and --node:\n%s", l)
	}
	h2.stop()
	waitFor(t, "the first agent's key and node record back after the second's stop", func() bool {
		resp, err := cli.Get(context.Background(), "/regiond/v1/nodes/node-1")
		return lease() == first && err == nil && len(resp.Kvs) == 1
	})
	if n := counter(t, h1, "regiond_agent_node_conflicts_total"); n != 1 {
		t.Fatalf("the first agent counted %v conflicts, want 1 (the second agent's start)", n)
	}
}

// TestStatusKeyConfirmsTheReconnect: an agent whose watch was cut off
// from etcd for a while puts its status key when the connection is back,
// which may carry the synced_at of before the cut (the watch resumed, not
// yet confirmed current); the first confirmation after it is put too, not
// a minute later at the refresh (the status-page review: regionctl status
// and the fleet showed a synced_at of before the outage for a minute). The
// status key goes straight to etcd (--status-endpoints), so the put that
// says disconnected passes; the publisher's checks are the test's ticks,
// and its clock never reaches the refresh. A put of the connection back
// that a progress notification beat (a current synced_at: nothing to
// confirm) has the cut made again.
func TestStatusKeyConfirmsTheReconnect(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, cli := exampleEtcd(t)
	px := proxyTo(t, srv)
	dir := t.TempDir()
	cfg := tcpConfig(dir, []string{px.URL()}, "node-1")
	cfg.StatusEndpoints = srv.Endpoints
	cfg.StatusTTL, cfg.ProgressInterval = 30*time.Second, 300*time.Millisecond
	clock := newFakeClock()
	h := runAgent(t, dir, cfg, clock.install)
	settleStatus(t, cli, h, clock)
	m := h.a.Mirror()
	status := func() routing.AgentStatus { st, _, _ := statusKV(t, cli, "node-1"); return st }
	for attempt := 1; ; attempt++ {
		px.Sever()
		waitFor(t, "disconnected", func() bool { return !m.Status().Connected })
		waitFor(t, "the status key disconnected", func() bool { clock.fire(); return !status().Connected })
		// synced_at falls behind by more than confirmAfter (2 s).
		cut := m.Status().SyncedAt
		time.Sleep(time.Until(cut.Add(2*time.Second + 100*time.Millisecond)))
		_, _, from := statusKV(t, cli, "node-1")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		wch := cli.Watch(ctx, "/regiond/v1/agents/node-1", clientv3.WithRev(from+1))
		if err := px.Restore(); err != nil {
			t.Fatal(err)
		}
		// Checked at once: the resumed watch's first progress
		// notification comes an interval later.
		for deadline := time.Now().Add(30 * time.Second); !m.Status().Connected; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the watch not back within 30 s of the restore")
			}
		}
		clock.fire()
		back := nextStatus(t, wch, func(st routing.AgentStatus) bool { return st.Connected })
		if stale := cut.UTC().Format(time.RFC3339); back.SyncedAt != stale {
			t.Logf("attempt %d: the connection back was put with a current synced_at %s (cut at %s): cutting again", attempt, back.SyncedAt, stale)
			if attempt == 5 {
				t.Fatal("5 cuts, and each connection back was put after a progress notification: nothing to confirm")
			}
			continue
		}
		// Without the confirmation, nothing is put before the refresh,
		// which this clock never reaches.
		waitFor(t, "the confirmation of the connection back", func() bool {
			clock.fire()
			st := status()
			return st.Connected && st.SyncedAt != back.SyncedAt
		})
		return
	}
}

package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/snapshot"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// statusLease waits for node's status key and returns its lease.
func statusLease(t *testing.T, cli *clientv3.Client, node string) clientv3.LeaseID {
	t.Helper()
	var lease int64
	waitFor(t, "the status key of "+node+" and its node record", func() bool {
		ks := keyspace.Default()
		st, err1 := cli.Get(context.Background(), ks.Agent(node))
		rec, err2 := cli.Get(context.Background(), ks.Node(node))
		if err1 != nil || err2 != nil || len(st.Kvs) != 1 || len(rec.Kvs) != 1 {
			return false
		}
		lease = st.Kvs[0].Lease
		return lease != 0
	})
	return clientv3.LeaseID(lease)
}

// runNode runs an agent of node on endpoints (tcpConfig) with a 2 s status
// TTL, logging into logs unless it is nil; each setup is applied to it
// before it runs.
func runNode(t *testing.T, endpoints []string, node string, logs *logbuf.Buffer, setup ...func(*agent.Agent)) *harness {
	t.Helper()
	dir := t.TempDir()
	cfg := tcpConfig(dir, endpoints, node)
	cfg.StatusTTL = 2 * time.Second
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	return runAgent(t, dir, cfg, setup...)
}

// writeAndAwaitRecord makes a regionctl write (DE's route moved) and waits
// for node's record at the write's epoch: the agent's checked put of it,
// in one Txn with its status key.
func writeAndAwaitRecord(t *testing.T, cli *clientv3.Client, node string) {
	t.Helper()
	_, epoch := regionctlWrite(t, cli, clientv3.OpPut(prefix+"routes/DE", deRoute(30)))
	waitFor(t, fmt.Sprintf("the node record of %s at the write's epoch %d", node, epoch), func() bool {
		rec, _, _ := kv(t, cli, keyspace.Default().Node(node))
		return strings.Contains(rec, fmt.Sprintf(`"epoch":%d`, epoch))
	})
}

// awaitStatusError waits until the agent's status_error says want.
func awaitStatusError(t *testing.T, h *harness, want string) {
	t.Helper()
	waitFor(t, "status_error: "+want, func() bool {
		var st api.Status
		h.get("/v1/status", &st)
		return strings.Contains(st.StatusError, want)
	})
}

// revoke revokes lease, as etcd does when a lease ends.
func revoke(t *testing.T, cli *clientv3.Client, lease clientv3.LeaseID) {
	t.Helper()
	if _, err := cli.Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
}

// awaitNewLease waits for node's status key under another lease than old,
// and returns it.
func awaitNewLease(t *testing.T, cli *clientv3.Client, node string, old clientv3.LeaseID) clientv3.LeaseID {
	t.Helper()
	var l clientv3.LeaseID
	waitFor(t, "the status key of "+node+" under a new lease", func() bool {
		_, l, _ = kv(t, cli, keyspace.Default().Agent(node))
		return l != 0 && l != old
	})
	return l
}

// waitLog records the status publisher's waits (agent.SetStatusObserver),
// and holds the publisher at the next wait of a kind when asked to: the
// tests follow the publisher's own decisions by it, not the time its puts
// take.
type waitLog struct {
	mu    sync.Mutex
	waits []statusWait
	hold  string          // the kind of wait to hold the publisher at, once ("": none)
	held  chan statusWait // gets the wait held
	letGo chan struct{}   // closed to let the held publisher go on
}

// statusWait is one wait of the status publisher's: its kind, its length
// or the time left (see agent.SetStatusObserver), and when it was seen.
type statusWait struct {
	what string
	d    time.Duration
	at   time.Time
}

// install is the agent setup that makes the publisher report to w.
func (w *waitLog) install(a *agent.Agent) { agent.SetStatusObserver(a, w.observe) }

func (w *waitLog) observe(what string, d time.Duration) {
	w.mu.Lock()
	sw := statusWait{what, d, time.Now()}
	w.waits = append(w.waits, sw)
	if what != w.hold {
		w.mu.Unlock()
		return
	}
	w.hold = ""
	held, letGo := w.held, w.letGo
	w.mu.Unlock()
	held <- sw
	<-letGo
}

// all returns the waits of a kind seen so far.
func (w *waitLog) all(what string) []statusWait {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []statusWait
	for _, sw := range w.waits {
		if sw.what == what {
			out = append(out, sw)
		}
	}
	return out
}

// count returns how many waits of a kind were seen so far.
func (w *waitLog) count(what string) int { return len(w.all(what)) }

// holdNext holds the publisher at its next wait of kind what: the wait
// comes on the channel returned, and the publisher goes on once release
// is called (at the latest when the test ends, before the agent stops).
func (w *waitLog) holdNext(t *testing.T, what string) (<-chan statusWait, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hold, w.held, w.letGo = what, make(chan statusWait, 1), make(chan struct{})
	letGo := w.letGo
	var once sync.Once
	release := func() { once.Do(func() { close(letGo) }) }
	t.Cleanup(release)
	return w.held, release
}

// TestNodeRecordKeptBetweenLeases: while the status key has no lease (the
// last one lost, etcd refusing a new grant under NOSPACE), the node record
// stays: regionctl status lists the node LOST as its record said, rather
// than not at all (--wait-converged would not wait for it). Only a stop
// deletes it. (Mutation review: run() deleting the record after every
// session, not only at a stop, passed the suite.)
func TestNodeRecordKeptBetweenLeases(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	h := startAgent(t, t.TempDir(), srv.Endpoints)
	ks := keyspace.Default()
	ctx := context.Background()
	lease := statusLease(t, cli, "node-1")
	disarm := devetcd.RaiseNoSpaceAlarm(t, cli)
	defer disarm()
	revoke(t, cli, lease)
	// The grant is refused after the session's end was handled.
	awaitStatusError(t, h, "no lease for the status key")
	f, err := store.New(cli, ks, store.Options{}).Fleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Agents) != 0 || len(f.Lost) != 1 || f.Lost[0].Node != "node-1" {
		t.Fatalf("fleet while the agent has no lease: %d live, lost %+v; want node-1 lost (its record kept)", len(f.Agents), f.Lost)
	}
	h.stop()
	if r, err := cli.Get(ctx, ks.Node("node-1")); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("node record after the stop: %v %v; want it deleted", r.Kvs, err)
	}
}

// TestNoLeaseThroughEndpointsDoesNotNameStatusEndpoints: a lease grant
// that times out through --endpoints (no --status-endpoints given) says
// so in status_error without naming --status-endpoints. (Mutation review:
// naming them when none were given passed the suite.)
func TestNoLeaseThroughEndpointsDoesNotNameStatusEndpoints(t *testing.T) {
	t.Parallel()
	_, px, dir, cfg := exampleBehindProxy(t, "node-ne")
	cfg.StatusTTL = 2 * time.Second
	h := runAgent(t, dir, cfg)
	var st api.Status
	waitFor(t, "connected", func() bool { st = api.Status{}; h.get("/v1/status", &st); return st.Connected })
	px.Freeze()
	defer px.Thaw()
	waitWithin(t, time.Minute, "status_error: no lease", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return strings.Contains(st.StatusError, "no lease for the status key")
	})
	if !strings.Contains(st.StatusError, "etcd did not answer within 5s") || strings.Contains(st.StatusError, "--status-endpoints") {
		t.Fatalf("status_error %q: want the grant's timeout, and no --status-endpoints (none given)", st.StatusError)
	}
	px.Thaw()
}

// kv reads key: its value, lease and mod revision ("", 0, 0 when absent).
func kv(t *testing.T, cli *clientv3.Client, key string) (string, clientv3.LeaseID, int64) {
	t.Helper()
	r, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return "", 0, 0
	}
	return string(r.Kvs[0].Value), clientv3.LeaseID(r.Kvs[0].Lease), r.Kvs[0].ModRevision
}

// compactAll moves etcd's revision on (a key outside the prefix) and
// compacts up to it: every earlier revision is gone, as under etcd's
// auto-compaction on a busy cluster.
func compactAll(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	p, err := cli.Put(context.Background(), "/compact-probe", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), p.Header.Revision); err != nil {
		t.Fatal(err)
	}
}

// TestRestartAfterACrashIsNoConflict: an agent restarted while its crashed
// run's status key still holds that run's lease takes the key with its
// first put, unchecked: no conflict is counted or logged (docs/agent.md,
// --node). (Mutation review: checking a session's first put too passed
// the suite.)
func TestRestartAfterACrashIsNoConflict(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	ks := keyspace.Default()
	ctx := context.Background()
	old, err := cli.Grant(ctx, 30) // the crashed run's lease, not yet ended
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, ks.Agent("node-cr"), `{"node":"node-cr"}`, clientv3.WithLease(old.ID)); err != nil {
		t.Fatal(err)
	}
	h := runNode(t, srv.Endpoints, "node-cr", nil)
	awaitNewLease(t, cli, "node-cr", old.ID)
	if n := counter(t, h, "regiond_agent_node_conflicts_total"); n != 0 {
		t.Fatalf("regiond_agent_node_conflicts_total %v after a restart within the crashed run's TTL; want 0", n)
	}
}

// TestStatusKeyPutAgainAfterTheDuplicateStops: a second agent with the same
// --node takes the status key and the node record, then stops cleanly
// (both go with it). The first agent, which watches its key, puts it
// again at once (before, at its next checked put), and its next checked
// put (a regionctl write) puts the record; its own stop then deletes that
// record even once etcd compacted past it.
// (Mutation review: not putting the key again after a failed compare, and
// not remembering the revision of that put, both passed the suite: the
// first left the live agent out of regionctl status, neither live nor
// lost, the second left its record at a clean stop: LOST.)
func TestStatusKeyPutAgainAfterTheDuplicateStops(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	ks := keyspace.Default()
	a := runNode(t, srv.Endpoints, "node-dup2", nil)
	first := statusLease(t, cli, "node-dup2")
	b := runNode(t, srv.Endpoints, "node-dup2", nil)
	awaitNewLease(t, cli, "node-dup2", first)
	b.stop()
	waitFor(t, "the first agent's status key back after the duplicate's stop", func() bool {
		_, l, _ := kv(t, cli, ks.Agent("node-dup2"))
		return l == first
	})
	// The record and the key are put in one Txn: the key is back too.
	writeAndAwaitRecord(t, cli, "node-dup2")
	if _, l, _ := kv(t, cli, ks.Agent("node-dup2")); l != first {
		t.Fatalf("status key's lease at the write: %x; want the first agent's %x", l, first)
	}
	compactAll(t, cli)
	a.stop()
	if rec, _, _ := kv(t, cli, ks.Node("node-dup2")); rec != "" {
		t.Fatalf("node record after a clean stop: %s; want it deleted", rec)
	}
}

// TestNodeRecordDeletedAtAStopPastACompaction: the revision of the last
// checked put is remembered; a clean stop deletes the record it put even
// when etcd compacted the history that would tell it by the status key's
// lease. (Mutation review: not remembering a checked put's revision
// passed the suite; the record stayed, the stopped node LOST.)
func TestNodeRecordDeletedAtAStopPastACompaction(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	h := startAgent(t, t.TempDir(), srv.Endpoints)
	ks := keyspace.Default()
	statusLease(t, cli, "node-1")
	writeAndAwaitRecord(t, cli, "node-1")
	compactAll(t, cli)
	h.stop()
	if rec, _, _ := kv(t, cli, ks.Node("node-1")); rec != "" {
		t.Fatalf("node record after a clean stop past a compaction: %s; want it deleted", rec)
	}
}

// TestNodeRecordAtAStopBeforeTheFirstPut: agents that stop before their
// first put (etcd refuses their grants: NOSPACE) delete an earlier run's
// record while no status key lives (a crashed run's: not LOST after this
// clean stop), and leave a live agent's (one started by mistake with its
// --node). (Mutation review: dropping or inverting the status key's
// create-revision compare, or making it always true, passed the suite.)
func TestNodeRecordAtAStopBeforeTheFirstPut(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	ks := keyspace.Default()
	ctx := context.Background()
	if _, err := cli.Put(ctx, ks.Node("node-crashed"), `{"node":"node-crashed","revision":1}`); err != nil {
		t.Fatal(err)
	}
	live := startAgent(t, t.TempDir(), srv.Endpoints, func(c *agent.Config) { c.Node = "node-live" })
	statusLease(t, cli, "node-live")
	liveRec, _, _ := kv(t, cli, ks.Node("node-live"))
	disarm := devetcd.RaiseNoSpaceAlarm(t, cli) // keep-alives pass: node-live stays live
	defer disarm()
	hs := []*harness{runNode(t, srv.Endpoints, "node-crashed", nil), runNode(t, srv.Endpoints, "node-live", nil)}
	for _, h := range hs {
		awaitStatusError(t, h, "no lease for the status key")
		h.stop()
	}
	if rec, _, _ := kv(t, cli, ks.Node("node-crashed")); rec != "" {
		t.Errorf("an earlier run's record after a clean stop before the first put: %s; want it deleted", rec)
	}
	if rec, _, _ := kv(t, cli, ks.Node("node-live")); rec != liveRec {
		t.Errorf("the live agent's record after its duplicate stopped: %q; want %q", rec, liveRec)
	}
	live.stop()
}

// TestNodeRecordOfADuplicateIsLeftAtItsStop: a second agent with the same
// --node takes the status key and the record (Txn, under its lease); the
// first one's clean stop leaves that record (or the duplicate puts it
// back at once, when the first had taken it back: it watches its key). (Mutation review: not
// checking the status key's lease at the record's revision passed the
// suite: the live duplicate's record went with the first's stop.)
func TestNodeRecordOfADuplicateIsLeftAtItsStop(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	ks := keyspace.Default()
	a := runNode(t, srv.Endpoints, "node-dup3", nil)
	first := statusLease(t, cli, "node-dup3")
	runNode(t, srv.Endpoints, "node-dup3", nil)
	var rec string
	waitFor(t, "the duplicate's status key and record", func() bool {
		st, l, rev := kv(t, cli, ks.Agent("node-dup3"))
		var rrev int64
		rec, _, rrev = kv(t, cli, ks.Node("node-dup3"))
		return l != 0 && l != first && rrev == rev && rec == st
	})
	a.stop()
	// The first agent may have put the key and record back once, seeing
	// the duplicate's put (it watches its status key); its stop then
	// deletes its own, and the duplicate puts both back at once. Either
	// way the duplicate's record is what stays.
	waitFor(t, "the live duplicate's record after the first agent's stop", func() bool {
		st, l, rev := kv(t, cli, ks.Agent("node-dup3"))
		got, _, rrev := kv(t, cli, ks.Node("node-dup3"))
		return l != 0 && l != first && rrev == rev && got == st
	})
}

// TestNodeRecordTxnFailureIsNotBlamedOnTheRole: a Txn of the status key
// and the record that etcd fails for another reason than a refusal (here
// --max-txn-ops 1) is a failed put, named in status_error; it is not
// taken for a role without the record (which would stop writing the
// record, log the wrong cause, and skip the record's delete at stop).
// (Mutation review: retrying the status key alone after any failure
// passed the suite.)
func TestNodeRecordTxnFailureIsNotBlamedOnTheRole(t *testing.T) {
	t.Parallel()
	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: t.TempDir(), MaxTxnOps: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cli := devetcd.NewTestClient(t, srv)
	vals, err := fleettest.Config(t).Values()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), prefix+"epoch", "1"); err != nil {
		t.Fatal(err)
	}
	for k, v := range vals {
		if _, err := cli.Put(context.Background(), prefix+k, string(v)); err != nil {
			t.Fatal(err)
		}
	}
	var logs logbuf.Buffer
	h := runNode(t, srv.Endpoints, "node-txn", &logs)
	awaitStatusError(t, h, "too many operations in txn request")
	if strings.Contains(logs.String(), "etcd refuses the node record") {
		t.Fatalf("a failed Txn blamed on the role:\n%s", logs.String())
	}
}

// TestNodeRecordDeletedBeforeTheRevoke: a clean stop deletes the node
// record before it revokes the status key's lease (docs/agent.md), so no
// reader ever sees the record without the key: regionctl status never
// lists a node stopped on purpose LOST, even for an instant. (Mutation
// review: leaving the delete to the deferred one, after the revoke,
// passed the suite.)
func TestNodeRecordDeletedBeforeTheRevoke(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	h := startAgent(t, t.TempDir(), srv.Endpoints)
	ks := keyspace.Default()
	statusLease(t, cli, "node-1")
	_, _, from := kv(t, cli, ks.Agent("node-1"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, "/regiond/v1/", clientv3.WithPrefix(), clientv3.WithRev(from+1))
	h.stop()
	var keyGone, recGone int64
	for resp := range wch {
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypeDelete {
				continue
			}
			switch string(ev.Kv.Key) {
			case ks.Agent("node-1"):
				keyGone = ev.Kv.ModRevision
			case ks.Node("node-1"):
				recGone = ev.Kv.ModRevision
			}
		}
		if keyGone != 0 && recGone != 0 {
			break
		}
	}
	if keyGone == 0 || recGone == 0 || recGone > keyGone {
		t.Fatalf("at a clean stop: record deleted at revision %d, status key at %d; want the record first", recGone, keyGone)
	}
}

// TestStatusLeaseGrantsBackOffWhileConnected: a grant etcd refuses while
// the mirror stays connected (NOSPACE) is retried after the backoff's
// delay (an hour here), not at the first of the retry wait's connection
// checks that finds the mirror connected: a check ends the wait only for a
// connection that came back. The test counts the publisher's own checks
// (its observer), not time. (Mutation review: the wait ending at any check
// that found the mirror connected passed the suite: a refused grant was
// retried every 250 ms.)
func TestStatusLeaseGrantsBackOffWhileConnected(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	var waits waitLog
	h := runNode(t, srv.Endpoints, "node-bo", nil, waits.install, func(a *agent.Agent) { agent.SetStatusRetry(a, time.Hour, time.Hour) })
	lease := statusLease(t, cli, "node-bo")
	disarm := devetcd.RaiseNoSpaceAlarm(t, cli)
	defer disarm()
	retries := waits.count("retry")
	revoke(t, cli, lease)
	waitFor(t, "a refused grant's wait", func() bool { return waits.count("retry") > retries })
	// A check's wait is seen before the check: once a second is seen, the
	// first has been made, and any grant it led to counted.
	checks := waits.count("retry-check")
	waitFor(t, "two connection checks of the wait", func() bool { return waits.count("retry-check") >= checks+2 })
	if n := waits.count("retry") - retries; n != 1 || !h.a.Mirror().Status().Connected {
		t.Fatalf("%d refused grants after two checks that found the mirror connected (%v now), with an hour's backoff; want 1", n, h.a.Mirror().Status().Connected)
	}
}

// TestStatusLeaseRetryStartsOverAfterASession: a session granted after
// failed grants resets the backoff: the next lease lost and refused is
// retried after the initial delay (50 to 100 ms here), not the grown one,
// so the status key is back (the node live again) as soon as etcd takes
// grants. The test reads the delay the publisher chose (its observer).
// (Mutation review: dropping the reset passed the suite.)
func TestStatusLeaseRetryStartsOverAfterASession(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	var waits waitLog
	const initial = 50 * time.Millisecond
	runNode(t, srv.Endpoints, "node-rs", nil, waits.install, func(a *agent.Agent) { agent.SetStatusRetry(a, initial, 10*time.Second) })
	lease := statusLease(t, cli, "node-rs")
	disarm := devetcd.RaiseNoSpaceAlarm(t, cli)
	revoke(t, cli, lease)
	waitFor(t, "three refused grants", func() bool { return waits.count("retry") >= 3 })
	disarm()
	lease = awaitNewLease(t, cli, "node-rs", lease)
	all := waits.all("retry")
	grown := all[len(all)-1].d
	disarm = devetcd.RaiseNoSpaceAlarm(t, cli)
	defer disarm()
	revoke(t, cli, lease)
	waitFor(t, "a refused grant after the session", func() bool { return waits.count("retry") > len(all) })
	// Jittered: from [d, 2d) for a delay d.
	if d := waits.all("retry")[len(all)].d; d >= 2*initial {
		t.Fatalf("the first retry after a session waits %v (the last before it %v); want the initial delay, %v to %v: the backoff starts over", d, grown, initial, 2*initial)
	}
}

// TestLeaseLostDuringASpacingIsReported: a status lease that ends while
// the publisher waits out the spacing of changes that left the epoch as it
// is (a storm of health changes) is reported as any other loss (the
// warning, status_error, and a count toward the grpc-proxy hint). The
// lease is revoked once the publisher is in that wait (its observer).
// (Mutation review: the spacing's wait ending without reporting the loss
// passed the suite.)
func TestLeaseLostDuringASpacingIsReported(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	var logs logbuf.Buffer
	var waits waitLog
	runNode(t, srv.Endpoints, "node-sp", &logs, quietHour, waits.install)
	lease := statusLease(t, cli, "node-sp")
	// A put that says connected is the last: a change then is one alone.
	waitFor(t, "the status key connected", func() bool { st, _, _ := statusKV(t, cli, "node-sp"); return st.Connected })
	spacings := waits.count("spacing")
	// A change that leaves the epoch as it is: its put waits an hour.
	if _, err := cli.Put(context.Background(), prefix+"routes/DE", deRoute(30)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the publisher waiting out the quiet spacing", func() bool { return waits.count("spacing") > spacings })
	revoke(t, cli, lease)
	awaitNewLease(t, cli, "node-sp", lease)
	if !strings.Contains(logs.String(), "agent status: lease lost") {
		t.Fatalf("a lease ended during the spacing's wait is not reported:\n%s", logs.String())
	}
}

// TestStatusPutFailuresWarnedAgainAfterARecovery: put failures are a
// warning once per episode: after a put passes ("put again", logged once)
// the next failure is a warning again. Under NOSPACE deletes still apply
// and are changes to put; a failed put is retried at the publisher's next
// check, which the test ticks. (Mutation review: not resetting the failure
// count on success passed the suite: the second outage logged no warning,
// and every put after the first recovery logged "put again".)
func TestStatusPutFailuresWarnedAgainAfterARecovery(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	var logs logbuf.Buffer
	clock := newFakeClock()
	h := runNode(t, srv.Endpoints, "node-1", &logs, clock.install, func(a *agent.Agent) { agent.SetStatusQuietSpacing(a, time.Millisecond) })
	settleStatus(t, cli, h, clock)
	const warn = `level=WARN msg="agent status: put failed`
	const failures = "regiond_agent_status_put_failures_total"
	for i, route := range []string{"routes/AT", "routes/PL"} {
		failed := counter(t, h, failures)
		disarm := devetcd.RaiseNoSpaceAlarm(t, cli)
		d, err := cli.Delete(context.Background(), prefix+route)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the delete's put refused", func() bool { return counter(t, h, failures) > failed })
		disarm()
		// The put passes at a check; the failure's log line came before.
		waitFor(t, "the status key at the delete", func() bool {
			clock.fire()
			st, _, _ := statusKV(t, cli, "node-1")
			return st.ChangeRevision >= d.Header.Revision
		})
		if n := strings.Count(logs.String(), warn); n != i+1 {
			t.Fatalf("%d warnings of a failed put after %d outages; want %d:\n%s", n, i+1, i+1, logs.String())
		}
	}
	// More puts after the recovery log nothing more.
	rev, _ := regionctlWrite(t, cli, clientv3.OpPut(prefix+"routes/DE", deRoute(30)))
	waitFor(t, "the status key at the write", func() bool { st, _, _ := statusKV(t, cli, "node-1"); return st.Revision >= rev })
	if n := strings.Count(logs.String(), "agent status: put again"); n != 2 {
		t.Fatalf("\"put again\" logged %d times for 2 recoveries; want 2:\n%s", n, logs.String())
	}
}

// TestSnapshotErrorOfALaterChangeIsInItsFirstPut: as
// TestSnapshotErrorIsPublished, for a change that is not the first one the
// publisher waited on: each put for a change waits for the snapshot
// writer again (at most SnapshotSettleMax from that change on), so the
// first status that confirms a later change says what the files hold for
// it, and --wait-converged does not count the agent converged on a file
// it does not have, nor failed on one it has. The writer is held back by
// its own backoff after a failed write (the index made a directory); the
// publisher, by the test, at its look at the later change (its observer)
// until the writer has written it. (Mutation review: the wait's deadline
// not reset after a put passed the suite: every change more than a second
// after the first wait went out without waiting, with the files' state of
// before it.)
func TestSnapshotErrorOfALaterChangeIsInItsFirstPut(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	var waits waitLog
	h := runNode(t, srv.Endpoints, "node-1", nil, waits.install)
	idx := snapshot.IndexPath(filepath.Join(h.dir, "shm", "table.json"))
	waitFor(t, "the first snapshot index", func() bool { fi, err := os.Stat(idx); return err == nil && fi.Mode().IsRegular() })
	waitFor(t, "the status key connected", func() bool { st, _, _ := statusKV(t, cli, "node-1"); return st.Connected })
	snapshotError := func() string { var st api.Status; h.get("/v1/status", &st); return st.SnapshotError }
	failure := "write snapshot index " + idx + ": is a directory"
	if err := os.RemoveAll(idx); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(idx, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := 30
	write := func() int64 {
		w++
		rev, _ := regionctlWrite(t, cli, clientv3.OpPut(prefix+"routes/DE", deRoute(w)))
		return rev
	}
	putAt := func(rev int64) bool { st, _, _ := statusKV(t, cli, "node-1"); return st.Revision >= rev }
	// Changes (each put before the next) until the publisher has found
	// one the writer had not settled: the writer fails them, and after a
	// failure holds the next back for its backoff (a second at least).
	for waits.count("settle") == 0 {
		rev := write()
		waitFor(t, "the status key at the change", func() bool { return putAt(rev) })
	}
	// The later change comes more than SnapshotSettleMax after that wait
	// began, each until the publisher looks at one the writer has not
	// settled; it is held there.
	time.Sleep(time.Until(waits.all("settle")[0].at.Add(agent.SnapshotSettleMax + 100*time.Millisecond)))
	held, release := waits.holdNext(t, "settle")
	var look statusWait
	var rev int64
	for rev == 0 {
		r := write()
		waitFor(t, "the publisher's look at the change, or its put", func() bool {
			select {
			case look = <-held:
				rev = r
				return true
			default:
				return putAt(r)
			}
		})
	}
	if got := snapshotError(); got != failure {
		t.Fatalf("snapshot_error before the writer wrote the later change: %q, want %q", got, failure)
	}
	_, _, from := statusKV(t, cli, "node-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	puts := cli.Watch(ctx, "/regiond/v1/agents/node-1", clientv3.WithRev(from+1))
	// The writer writes it at its retry, the index's way cleared.
	if err := os.RemoveAll(idx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the writer's retry writing the later change", func() bool { return snapshotError() == "" })
	release()
	st := nextStatus(t, puts, func(st routing.AgentStatus) bool { return st.Revision >= rev })
	if st.SnapshotError != "" || look.d <= 0 {
		t.Fatalf("first put of a later change, written by the writer after the publisher looked: snapshot_error %q, want none "+
			"(the publisher's look found %v left to wait for the writer, want up to %v)", st.SnapshotError, look.d, agent.SnapshotSettleMax)
	}
}

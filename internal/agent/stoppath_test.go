package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/internal/store"
)

// TestStoppingIsLoggedFirst: "regiond agent stopping" was logged from a
// goroutine of its own, woken with the components by the stop, so a
// warning the stop caused (here the node record's delete, etcd cut off)
// could come before it and read like trouble of its own (the shutdown
// review). It is said before the components see the stop: a log handler
// that takes its time over the line (a busy journal) does not let
// anything else in before it.
func TestStoppingIsLoggedFirst(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	cli, px, dir, cfg := exampleBehindProxy(t, "node-stop")
	logs := &orderedLog{slowOn: "regiond agent stopping", delay: 300 * time.Millisecond}
	cfg.Logger = slog.New(logs)
	h := runAgent(t, dir, cfg)
	waitFor(t, "the node record", func() bool {
		r, err := cli.Get(context.Background(), keyspace.Default().Node("node-stop"))
		return err == nil && len(r.Kvs) == 1
	})
	px.Sever() // the stop's delete fails at once: a warning
	waitFor(t, "the mirror disconnected", func() bool {
		var st api.Status
		h.get("/v1/status", &st)
		return !st.Connected
	})
	from := len(logs.messages())
	h.stop()
	got := logs.messages()[from:]
	stopping := slices.IndexFunc(got, func(m string) bool { return strings.HasPrefix(m, "regiond agent stopping") })
	warned := slices.IndexFunc(got, func(m string) bool {
		return strings.HasPrefix(m, "agent status: cannot delete the node record at stop")
	})
	if stopping != 0 || warned < 0 {
		t.Fatalf("the stop's log lines %q: want \"regiond agent stopping\" first, and the delete's warning", got)
	}
}

// orderedLog is a slog.Handler that keeps the messages in the order their
// records are handled, taking delay over each message starting with
// slowOn before it keeps it.
type orderedLog struct {
	slowOn string
	delay  time.Duration
	mu     sync.Mutex
	msgs   []string
}

func (l *orderedLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *orderedLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *orderedLog) WithGroup(string) slog.Handler            { return l }

func (l *orderedLog) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, l.slowOn) {
		time.Sleep(l.delay)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *orderedLog) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// TestEarlierRunsRecordDeletedAtAStopDuringTheStatusEndpointsLogin: with
// --status-endpoints and --user, the status key's client logs in there
// before the publisher runs; a stop while that login still waits for the
// status endpoints (not reachable yet) returned with no delete (the
// shutdown review), and the record an earlier run of the node left (it
// crashed, or was cut off) stayed: regionctl status listed the node
// stopped on purpose LOST. The record goes through --endpoints, the same
// etcd, which the mirror reached.
func TestEarlierRunsRecordDeletedAtAStopDuringTheStatusEndpointsLogin(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, root := exampleWithAuth(t)
	const node = "node-sl"
	agentUserFor(t, root, node, "agent-sl")
	plantEarlierRecord(t, root, node)
	status := proxyTo(t, srv)
	status.Sever() // the status endpoints refuse connections: the login there is retried
	var logs logbuf.Buffer
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, node)
	cfg.StatusEndpoints, cfg.Username, cfg.Password = []string{status.URL()}, "agent-sl", "agent-pw"
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) // --dial-timeout 5s: a login (a bcrypt hash) takes seconds under -race
	h := runAgent(t, dir, cfg)
	waitFor(t, "the mirror connected, the status endpoints' login failed", func() bool {
		var st api.Status
		h.get("/v1/status", &st)
		return st.Connected && strings.Contains(st.StatusError, "connect to --status-endpoints")
	})
	h.stop()
	assertNoRecordNorLost(t, root, node, &logs)
}

// TestEarlierRunsRecordDeletedAtAStopWhileTheStatusEndpointsDoNotAnswer:
// without --user the status key's client is made at once, and the stop
// found it with no connection to the status endpoints: the record an
// earlier run left stayed ("could not check for a node record"), and the
// node stopped on purpose was listed LOST. It goes through --endpoints.
func TestEarlierRunsRecordDeletedAtAStopWhileTheStatusEndpointsDoNotAnswer(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, cli := exampleEtcd(t)
	const node = "node-sn"
	plantEarlierRecord(t, cli, node)
	status := proxyTo(t, srv)
	status.Sever()
	var logs logbuf.Buffer
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, node)
	cfg.StatusEndpoints, cfg.Logger = []string{status.URL()}, slog.New(slog.NewTextHandler(&logs, nil))
	h := runAgent(t, dir, cfg)
	waitFor(t, "the mirror connected, no lease on the status endpoints", func() bool {
		var st api.Status
		h.get("/v1/status", &st)
		return st.Connected && strings.Contains(st.StatusError, "no lease for the status key")
	})
	h.stop()
	assertNoRecordNorLost(t, cli, node, &logs)
}

// agentUserFor makes user (password agent-pw) with node's agent role.
func agentUserFor(t *testing.T, root *clientv3.Client, node, user string) {
	t.Helper()
	ctx := context.Background()
	role := store.NewRoles(keyspace.Default(), "").Agent(node)
	if _, err := root.RoleAdd(ctx, role.Name); err != nil {
		t.Fatal(err)
	}
	for _, g := range role.Grants {
		if _, err := root.RoleGrantPermission(ctx, role.Name, g.Key, g.End, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := root.UserAdd(ctx, user, "agent-pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, user, role.Name); err != nil {
		t.Fatal(err)
	}
}

// plantEarlierRecord puts the node record an earlier run of node left
// (it crashed: no status key), and checks that regionctl status lists
// the node LOST.
func plantEarlierRecord(t *testing.T, cli *clientv3.Client, node string) {
	t.Helper()
	ks := keyspace.Default()
	if _, err := cli.Put(context.Background(), ks.Node(node), `{"node":"`+node+`","revision":1,"epoch":1,"connected":true,"version":"earlier"}`); err != nil {
		t.Fatal(err)
	}
	if f := fleetOf(t, cli); len(f.Lost) != 1 || f.Lost[0].Node != node {
		t.Fatalf("lost %+v: want the earlier run's %s", f.Lost, node)
	}
}

// assertNoRecordNorLost fails the test if node's record is still there
// or regionctl status lists a node LOST.
func assertNoRecordNorLost(t *testing.T, cli *clientv3.Client, node string, logs *logbuf.Buffer) {
	t.Helper()
	r, err := cli.Get(context.Background(), keyspace.Default().Node(node))
	if err != nil {
		t.Fatal(err)
	}
	if f := fleetOf(t, cli); len(r.Kvs) != 0 || len(f.Lost) != 0 {
		t.Fatalf("after a clean stop: node record %v, lost %+v; want neither\n%s", r.Kvs, f.Lost, logs.String())
	}
}

// fleetOf is the fleet as regionctl status reads it.
func fleetOf(t *testing.T, cli *clientv3.Client) *store.Fleet {
	t.Helper()
	f, err := store.New(cli, keyspace.Default(), store.Options{}).Fleet(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestNodeRecordAlreadyGoneAtStopIsNotSaidLeft: a stop that finds no node
// record to delete (deleted meanwhile: regionctl agent rm, or another
// agent of the same --node at its stop) said it was "left in place" (the
// shutdown review); it says nothing above debug level. One written since
// by another agent is still said left in place, and stays.
func TestNodeRecordAlreadyGoneAtStopIsNotSaidLeft(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, cli := exampleEtcd(t)
	ctx := context.Background()
	ks := keyspace.Default()
	// stopAfter runs an agent of node until its record is there, calls
	// change, stops it and returns its log (debug level on).
	stopAfter := func(node string, change func()) string {
		var logs logbuf.Buffer
		dir := t.TempDir()
		cfg := tcpConfig(dir, srv.Endpoints, node)
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		h := runAgent(t, dir, cfg)
		waitFor(t, "the node record of "+node, func() bool {
			r, err := cli.Get(ctx, ks.Node(node))
			return err == nil && len(r.Kvs) == 1
		})
		change()
		h.stop()
		return logs.String()
	}
	const leftInPlace = "left in place"

	logs := stopAfter("node-gone", func() {
		if _, err := cli.Delete(ctx, ks.Node("node-gone")); err != nil {
			t.Fatal(err)
		}
	})
	if strings.Contains(logs, leftInPlace) || strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "level=DEBUG msg=\"agent status: no node record to delete at stop") {
		t.Errorf("a stop that found its record gone: want a debug line alone, not %q nor a warning:\n%s", leftInPlace, logs)
	}

	other := `{"node":"node-other","version":"the-other"}`
	logs = stopAfter("node-other", func() {
		if _, err := cli.Put(ctx, ks.Node("node-other"), other); err != nil {
			t.Fatal(err)
		}
	})
	if r, err := cli.Get(ctx, ks.Node("node-other")); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != other {
		t.Fatalf("another agent's record after the stop: %v (%v); want it left", r.Kvs, err)
	}
	if !strings.Contains(logs, "level=INFO msg=\"agent status: the node record was written since this run's last put") || !strings.Contains(logs, leftInPlace) {
		t.Errorf("a stop that left another's record: want it said left in place:\n%s", logs)
	}
}

// TestNodeRecordPutInFlightAtTheStopIsDeleted: a status put the stop
// abandoned in flight can be applied by etcd after the stop's delete read
// the record and before its Txn: the record then is this run's, at a
// revision the check did not know. The delete asks again once the lease is
// revoked (no put of this run lands after that): the node stopped on
// purpose is not left LOST. The test lands such a put (the status key
// under the run's lease and the record, in one Txn, as the publisher puts
// them) between the check and the Txn.
func TestNodeRecordPutInFlightAtTheStopIsDeleted(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	ks := keyspace.Default()
	var logs logbuf.Buffer
	var landed sync.Once
	var putErr error
	inFlight := func(what string, _ time.Duration) {
		if what != "delete-check" {
			return
		}
		landed.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := cli.Get(ctx, ks.Agent("node-fl"))
			if err != nil || len(st.Kvs) != 1 {
				putErr = fmt.Errorf("read the status key: %v (%d keys)", err, len(st.Kvs))
				return
			}
			rec, err := cli.Get(ctx, ks.Node("node-fl"))
			if err != nil || len(rec.Kvs) != 1 {
				putErr = fmt.Errorf("read the node record: %v (%d keys)", err, len(rec.Kvs))
				return
			}
			lease := clientv3.LeaseID(st.Kvs[0].Lease)
			_, putErr = cli.Txn(ctx).Then(
				clientv3.OpPut(ks.Agent("node-fl"), string(st.Kvs[0].Value), clientv3.WithLease(lease)),
				clientv3.OpPut(ks.Node("node-fl"), string(rec.Kvs[0].Value))).Commit()
		})
	}
	h := runNode(t, srv.Endpoints, "node-fl", &logs, func(a *agent.Agent) { agent.SetStatusObserver(a, inFlight) })
	writeAndAwaitRecord(t, cli, "node-fl")
	h.stop()
	if putErr != nil {
		t.Fatal(putErr)
	}
	if rec, _, _ := kv(t, cli, ks.Node("node-fl")); rec != "" {
		t.Fatalf("node record left after a clean stop whose put landed in flight: %s\n%s", rec, logs.String())
	}
	if strings.Contains(logs.String(), "left in place") {
		t.Fatalf("the record said left in place:\n%s", logs.String())
	}
}

// TestStoppingNotSaidDuringAFailure: a stop asked while a component's
// failure is already stopping the agent does not log "regiond agent
// stopping" (a clean stop's line) ahead of the failure Run returns (the
// diff review: it read as a clean stop, the failure's reason printed only
// at exit). The stop is asked while the failure's shutdown holds the
// publisher at its node record delete.
func TestStoppingNotSaidDuringAFailure(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	logs := &orderedLog{}
	var h *harness
	var asked sync.Once
	stopDuringTheFailure := func(what string, _ time.Duration) {
		if what != "delete-check" {
			return
		}
		asked.Do(func() {
			h.cancel()
			// Without the check, the stop's line came within
			// milliseconds of the cancel (its own goroutine).
			poll.Until(2*time.Second, func() bool {
				return slices.Contains(logs.messages(), "regiond agent stopping: revoking its status key, closing the API")
			})
		})
	}
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, "node-fail")
	cfg.Logger = slog.New(logs)
	h = runAgent(t, dir, cfg, func(a *agent.Agent) { agent.SetStatusObserver(a, stopDuringTheFailure) })
	statusLease(t, cli, "node-fail")
	if err := agent.FailAPIListener(h.a); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.done:
		if err == nil {
			t.Fatal("Run returned nil after its API's listener failed")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not stop within 20 s of its API's failure")
	}
	h.cancel = nil
	if got := logs.messages(); slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "regiond agent stopping") }) {
		t.Fatalf("a failure's shutdown logged the clean stop's line: %q", got)
	}
}

// TestStatusKeyRevokedThroughEndpointsAtAStopWhileTheStatusEndpointsDoNotAnswer:
// with --status-endpoints gone (their proxy down) at a stop, the status
// key's lease was revoked through the status client alone: the revoke gave
// up after 2 s ("cannot revoke the status key's lease at stop"), and the
// key lived out its TTL, listing the node stopped on purpose as live. The
// revoke goes through --endpoints, the same etcd, as the record's delete.
func TestStatusKeyRevokedThroughEndpointsAtAStopWhileTheStatusEndpointsDoNotAnswer(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, cli := exampleEtcd(t)
	const node = "node-sr"
	status := proxyTo(t, srv)
	var logs logbuf.Buffer
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, node)
	cfg.StatusEndpoints, cfg.Logger = []string{status.URL()}, slog.New(slog.NewTextHandler(&logs, nil))
	cfg.StatusTTL = time.Minute // the key outliving the stop is not the TTL's end
	var a *agent.Agent
	h := runAgent(t, dir, cfg, func(x *agent.Agent) { a = x })
	ks := keyspace.Default()
	waitFor(t, "the status key and the node record", func() bool {
		r, err := cli.Get(context.Background(), ks.Agent(node))
		n, err2 := cli.Get(context.Background(), ks.Node(node))
		return err == nil && err2 == nil && len(r.Kvs) == 1 && len(n.Kvs) == 1
	})
	status.Sever()
	waitFor(t, "the status client without a connection", func() bool { return !agent.StatusClientConnected(a) })
	h.stop()
	r, err := cli.Get(context.Background(), ks.Agent(node))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 0 {
		t.Fatalf("status key %s still there after a clean stop (its lease not revoked)\n%s", r.Kvs[0].Key, logs.String())
	}
	assertNoRecordNorLost(t, cli, node, &logs)
	if strings.Contains(logs.String(), "cannot revoke") {
		t.Fatalf("the stop warned of the revoke:\n%s", logs.String())
	}
}

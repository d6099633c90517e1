package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/store"
)

// TestNodeRecord: the agent keeps its last status, without a lease, as its
// node record; cut off from etcd (a silent path) until its status key's
// lease ends, it is listed lost by store.Fleet (regionctl status), as the
// record said; back, it is live again; a clean stop removes the record
// with the status key, so a node stopped on purpose is not lost.
func TestNodeRecord(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	cli, px, dir, cfg := exampleBehindProxy(t, "node-rec")
	cfg.StatusTTL = 2 * time.Second
	h := runAgent(t, dir, cfg)
	ks := keyspace.Default()
	get := func(key string) (string, int64) {
		resp, err := cli.Get(context.Background(), key)
		if err != nil || len(resp.Kvs) == 0 {
			return "", 0
		}
		return string(resp.Kvs[0].Value), resp.Kvs[0].Lease
	}
	waitFor(t, "the node record equal to the status key, without a lease", func() bool {
		status, lease := get(ks.Agent("node-rec"))
		rec, recLease := get(ks.Node("node-rec"))
		return status != "" && lease != 0 && rec == status && recLease == 0
	})
	st := store.New(cli, ks, store.Options{})
	fleet := func() *store.Fleet {
		f, err := st.Fleet(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if f := fleet(); len(f.Agents) != 1 || len(f.Lost) != 0 {
		t.Fatalf("fleet with the agent live: %d live, lost %+v", len(f.Agents), f.Lost)
	}

	px.Freeze()
	waitWithin(t, time.Minute, "the agent lost once its status key's lease ended", func() bool {
		f := fleet()
		return len(f.Agents) == 0 && len(f.Lost) == 1 && f.Lost[0].Node == "node-rec" && f.Lost[0].Revision > 0
	})
	px.Thaw()
	waitWithin(t, time.Minute, "the agent live again", func() bool { f := fleet(); return len(f.Agents) == 1 && len(f.Lost) == 0 })

	h.stop()
	if rec, _ := get(ks.Node("node-rec")); rec != "" {
		t.Fatalf("node record after a clean stop: %s", rec)
	}
	if f := fleet(); len(f.Agents) != 0 || len(f.Lost) != 0 {
		t.Fatalf("fleet after a clean stop: %d live, lost %+v; want neither", len(f.Agents), f.Lost)
	}
}

// TestNodeRecordRefusedToAnOldRole: an agent whose role was made before
// node records (read routing/, readwrite its status key alone) publishes
// its status key all the same, and says once what to run; /v1/status has
// no status_error for it.
func TestNodeRecordRefusedToAnOldRole(t *testing.T) {
	// Not t.Parallel: under a loaded machine's parallel runs its 10 s
	// status lease was starved out, or a timed-out put left the node
	// record's guard stale (the diff review).
	srv, root := exampleWithAuth(t)
	ctx := context.Background()
	ks := keyspace.Default()
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "old-agent"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "old-agent", ks.Routing(), clientv3.GetPrefixRangeEnd(ks.Routing()), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error {
			_, err := root.RoleGrantPermission(ctx, "old-agent", ks.Agent("node-old"), "", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "agent-old", "agent-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "agent-old", "old-agent"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	var logs logbuf.Buffer
	h := runAgentAs(t, srv, "node-old", "agent-old", &logs, func(a *agent.Agent) { agent.SetNodeRecordRetry(a, 100*time.Millisecond) })
	waitFor(t, "the status key put under the old role", func() bool {
		resp, err := root.Get(ctx, ks.Agent("node-old"))
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0
	})
	if resp, err := root.Get(ctx, ks.Node("node-old")); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("node record under a role without it: %v %v", resp, err)
	}
	var st api.Status
	h.get("/v1/status", &st)
	if st.StatusError != "" {
		t.Fatalf("status_error %q: the status key is published", st.StatusError)
	}
	// Logged once the status key alone went through: after the key shows.
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(logs.String(), "etcd refuses the node record") })
	if n := strings.Count(logs.String(), "etcd refuses the node record"); n != 1 || !strings.Contains(logs.String(), "regionctl auth apply --agent node-old") {
		t.Fatalf("the refusal logged %d times, want once naming what to run:\n%s", n, logs.String())
	}

	// The role fixed (what regionctl auth apply does), no restart: the
	// next checked put (a new epoch here) writes the record.
	if _, err := root.RoleGrantPermission(ctx, "old-agent", ks.Node("node-old"), "", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // past the retry delay
	if _, err := root.Put(ctx, ks.Epoch(), "2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node record once the role allows it", func() bool {
		resp, err := root.Get(ctx, ks.Node("node-old"))
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease == 0
	})
	// Logged once the put's answer is back: the key can show first.
	waitFor(t, "the record's return logged", func() bool {
		return strings.Contains(logs.String(), "the node record is written (the role allows it now)")
	})
	h.stop()
	if resp, err := root.Get(ctx, ks.Node("node-old")); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("node record after a clean stop: %v %v", resp, err)
	}
}

// TestNodeRecordNotBlamedForAWrongNode: an agent whose role was made for
// another node is refused its status key too; the log names that (is
// --node right?), not the node record.
func TestNodeRecordNotBlamedForAWrongNode(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, root := exampleWithAuth(t)
	ctx := context.Background()
	ks := keyspace.Default()
	roles := store.NewRoles(ks, "")
	role := roles.Agent("node-a")
	if _, err := root.RoleAdd(ctx, role.Name); err != nil {
		t.Fatal(err)
	}
	for _, g := range role.Grants {
		if _, err := root.RoleGrantPermission(ctx, role.Name, g.Key, g.End, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := root.UserAdd(ctx, "agent-a", "agent-pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, "agent-a", role.Name); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	h := runAgentAs(t, srv, "node-b", "agent-a", &logs)
	var st api.Status
	waitFor(t, "status_error naming --node", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return strings.Contains(st.StatusError, "is --node right?")
	})
	if strings.Contains(logs.String(), "etcd refuses the node record") {
		t.Fatalf("a role of another node blamed on the node record:\n%s", logs.String())
	}
}

// exampleWithAuth starts an etcd with the example fleet, turns
// authentication on (root alone, password root-pw) and returns it with a
// client of root, closed when the test ends.
func exampleWithAuth(t *testing.T) (*devetcd.Server, *clientv3.Client) {
	t.Helper()
	srv, cli := exampleEtcd(t)
	if err := devetcd.EnableAuth(context.Background(), cli, devetcd.Auth{RootPassword: "root-pw"}); err != nil {
		t.Fatal(err)
	}
	root, err := srv.ClientAs("root", "root-pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return srv, root
}

// runAgentAs runs an agent of node logged in as user (password agent-pw),
// logging into logs, with a 2 s status lease.
func runAgentAs(t *testing.T, srv *devetcd.Server, node, user string, logs *logbuf.Buffer, setup ...func(*agent.Agent)) *harness {
	t.Helper()
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, node)
	cfg.Username, cfg.Password, cfg.Logger = user, "agent-pw", slog.New(slog.NewTextHandler(logs, nil))
	cfg.StatusTTL = 2 * time.Second
	return runAgent(t, dir, cfg, setup...)
}

// TestNodeRecordOfAnotherAgentIsLeftAtStop: a clean stop deletes the node
// record only while it is this agent's last put: one written since by
// another agent of the same --node (put by the test here) stays (the
// drills: a duplicate's stop took the live agent's record with it).
func TestNodeRecordOfAnotherAgentIsLeftAtStop(t *testing.T) {
	srv, cli := exampleEtcd(t)
	dir := t.TempDir()
	cfg := tcpConfig(dir, srv.Endpoints, "node-dup")
	h := runAgent(t, dir, cfg)
	ks := keyspace.Default()
	record := func() string {
		resp, err := cli.Get(context.Background(), ks.Node("node-dup"))
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	waitFor(t, "the agent's node record", func() bool { return record() != "" })
	other := strings.Replace(record(), `"node":"node-dup"`, `"node":"node-dup","host":"the-other"`, 1)
	if _, err := cli.Put(context.Background(), ks.Node("node-dup"), other); err != nil {
		t.Fatal(err)
	}
	h.stop()
	if got := record(); got != other {
		t.Fatalf("node record after the stop: %q, want the other agent's %q", got, other)
	}
}

// TestNodeRecordOfATimedOutPutIsDeletedAtStop: a put of the node record
// that etcd applied while its answer was lost (the put timed out) is still
// this run's record: a clean stop deletes it (the diff review: under load
// such a put left the record at the stop, and regionctl status named the
// stopped node lost until regionctl agent rm).
func TestNodeRecordOfATimedOutPutIsDeletedAtStop(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	cli, px, dir, cfg := exampleBehindProxy(t, "node-lost-answer")
	var (
		armed    atomic.Bool
		puts     atomic.Int32
		retrying = make(chan struct{})
		release  = make(chan struct{})
	)
	hook := func(time.Time) {
		if !armed.Load() {
			return
		}
		switch puts.Add(1) {
		case 1: // the put for the epoch change: its answer is lost
			px.FreezeReplies()
		case 2: // the put that retries it: held until the agent stops
			close(retrying)
			<-release
		}
	}
	h := runAgent(t, dir, cfg, func(a *agent.Agent) { agent.SetBeforeStatusPut(a, hook) })
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	ks := keyspace.Default()
	record := func() (string, int64) {
		resp, err := cli.Get(context.Background(), ks.Node("node-lost-answer"))
		if err != nil || len(resp.Kvs) == 0 {
			return "", 0
		}
		return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
	}
	waitFor(t, "the agent's node record", func() bool { v, _ := record(); return v != "" })
	_, before := record()

	armed.Store(true)
	_, epoch := regionctlWrite(t, cli, clientv3.OpPut(prefix+"routes/DE", deRoute(30)))
	select {
	case <-retrying:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not retry the status put whose answer was lost")
	}
	v, rev := record()
	if rev == before || !strings.Contains(v, fmt.Sprintf(`"epoch":%d`, epoch)) {
		t.Fatalf("node record %q (revision %d, was %d): want the put of epoch %d applied though its answer was lost", v, rev, before, epoch)
	}
	px.Thaw()
	h.cancel() // the retry held meanwhile fails with the stop, or goes
	// out, is abandoned in flight and lands after the delete's check: the
	// delete asks again once the lease is revoked
	// (TestNodeRecordPutInFlightAtTheStopIsDeleted lands one every time).
	letGo()
	h.stop()
	if v, _ := record(); v != "" {
		t.Fatalf("node record after a clean stop: %q, want it deleted", v)
	}
}

// TestNodeRecordDeletedAtAStopDuringALostLeasesRevoke: the status key's
// lease is lost on a silent path, the publisher revokes it (up to 2 s
// while etcd does not answer), and the stop comes during that revoke,
// etcd answering again meanwhile: the record goes (the shutdown review:
// run's loop ended on its condition with no delete, and regionctl status
// listed the node stopped on purpose LOST).
func TestNodeRecordDeletedAtAStopDuringALostLeasesRevoke(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	cli, px, dir, cfg := exampleBehindProxy(t, "node-rv")
	cfg.StatusTTL = 2 * time.Second
	var logs logbuf.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h := runAgent(t, dir, cfg)
	ks := keyspace.Default()
	ctx := context.Background()
	waitFor(t, "the node record", func() bool {
		r, err := cli.Get(ctx, ks.Node("node-rv"))
		return err == nil && len(r.Kvs) == 1
	})
	px.Freeze()
	waitWithin(t, time.Minute, "the lease lost", func() bool { return strings.Contains(logs.String(), "lease lost") })
	h.cancel() // the publisher revokes the lost lease on the frozen path now
	px.Thaw()
	h.stop()
	f, err := store.New(cli, ks, store.Options{}).Fleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := cli.Get(ctx, ks.Node("node-rv")); err != nil || len(r.Kvs) != 0 || len(f.Lost) != 0 {
		t.Fatalf("after a clean stop during the lost lease's revoke: node record %v (%v), lost %+v; want none\n%s", r.Kvs, err, f.Lost, logs.String())
	}
}

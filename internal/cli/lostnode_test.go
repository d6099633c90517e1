package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// putNodeRecord writes node's record as an agent does (its status, no
// lease).
func (e *tenv) putNodeRecord(st routing.AgentStatus) {
	e.t.Helper()
	e.putStatusAt(e.ks.Node(st.Node), st)
}

// TestLostNode: a node whose record is there and whose status key is not
// (its agent's lease ended with no clean stop: cut off from etcd, crashed)
// is listed LOST by status, as its record said, and counts as not
// converged: status --max-lag 0 and --wait-converged exit 5 naming it
// (the on-call review's agent that vanished from every view while it
// served an old table, with exit 0). A live agent's record is not lost;
// agent rm refuses a live node and forgets a lost one; status is clean
// after.
func TestLostNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	lease := grantLease(t)
	rev, _ := e.fingerprint()
	now := time.Now().UTC().Format(time.RFC3339)
	e.putAgentStatus(routing.AgentStatus{Node: "n1", Revision: rev, Connected: true, Version: "test", SyncedAt: now}, lease)
	e.putNodeRecord(routing.AgentStatus{Node: "n1", Revision: rev, Connected: true, Version: "test", SyncedAt: now})
	e.putNodeRecord(routing.AgentStatus{Node: "n3", Revision: rev - 1, Connected: true, Version: "test", SyncedAt: now})

	r := e.must(ExitOK, "status")
	if !strings.Contains(r.stdout, "1 live agent(s): 1 converged, 0 not; 1 lost (") || !rowWith(r.stdout, "n3", "LOST") || rowWith(r.stdout, "n1", "LOST") {
		t.Fatalf("status with n3 lost:\n%s", r)
	}
	var fleet struct {
		Agents []struct{ Node string }
		Lost   []struct {
			Node     string
			Revision int64
		}
	}
	mustJSON(t, e.must(ExitOK, "status", "-o", "json").stdout, &fleet)
	if len(fleet.Agents) != 1 || len(fleet.Lost) != 1 || fleet.Lost[0].Node != "n3" || fleet.Lost[0].Revision != rev-1 {
		t.Fatalf("status -o json: %+v", fleet)
	}
	r = e.must(ExitNotConverged, "status", "--max-lag", "0")
	if !strings.Contains(r.stderr, "1 node(s) lost: ") || !strings.Contains(r.stderr, "n3@") || !strings.Contains(r.stderr, "regionctl agent rm NODE") {
		t.Fatalf("status --max-lag 0 with n3 lost: %s", r)
	}
	// The wait: n1 confirms, n3 does not, and is named.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.agentSim(ctx, 50*time.Millisecond, lease, "n1")
	r = e.must(ExitNotConverged, "pool", "drain", "eu-north", "--wait-converged=2s")
	if !strings.Contains(r.stderr, "1 node(s) lost: ") || !strings.Contains(r.stderr, "n3@") {
		t.Fatalf("--wait-converged with n3 lost: %s", r)
	}

	// n3's agent comes back during a wait (its first put follows the
	// write's commit, after the wait listed it lost): it confirms, and
	// the wait ends converged, without agent rm.
	ctx3, stop3 := context.WithCancel(context.Background())
	lease3 := grantLease(t)
	e.agentSim(ctx3, 300*time.Millisecond, lease3, "n3")
	if r := e.must(ExitOK, "pool", "undrain", "eu-north", "--wait-converged=10s"); !strings.Contains(r.stdout, "converged: every live agent (2)") {
		t.Fatalf("--wait-converged with n3 back: %s", r)
	}
	stop3()
	if _, err := testClient.Revoke(context.Background(), lease3); err != nil { // n3's key ends, its record stays: lost again
		t.Fatal(err)
	}
	// Lost, but as of the newest change: status --max-lag 0 passes, as
	// --wait-converged would (it serves what the fleet serves); the
	// table still says LOST.
	b, _ := json.Marshal(routing.AgentStatus{Node: "n3", Revision: e.newest(), Epoch: e.epoch(), Connected: true, Version: "test", SyncedAt: now})
	if _, err := testClient.Put(context.Background(), e.ks.Node("n3"), string(b)); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "status", "--max-lag", "0"); !rowWith(r.stdout, "n3", "LOST") {
		t.Fatalf("status --max-lag 0 with n3 lost at the newest change: %s", r)
	}

	for _, bad := range []string{"", "a/b", "n 3"} {
		if r := e.run("agent", "rm", bad); r.code != ExitUsage || !strings.Contains(r.stderr, "a node name is not empty") {
			t.Fatalf("agent rm %q: %s; want a usage error", bad, r)
		}
	}
	if r := e.run("agent", "rm", "n1"); r.code != ExitRefused || !strings.Contains(r.stderr, "its agent is live") {
		t.Fatalf("agent rm of a live node: %s; want refused", r)
	}
	if r := e.must(ExitOK, "agent", "rm", "n3"); !strings.Contains(r.stdout, "forgot node n3 (its record said revision") {
		t.Fatalf("agent rm n3: %s", r)
	}
	if r := e.run("agent", "rm", "n3"); r.code != ExitRefused || !strings.Contains(r.stderr, "no node record") {
		t.Fatalf("agent rm n3 again: %s; want refused, no record", r)
	}
	if v := e.get(e.ks.Node("n1")); v == "" {
		t.Fatal("agent rm n3 touched n1's record")
	}
	// A mistyped node names the nodes with a record near it.
	e.putNodeRecord(routing.AgentStatus{Node: "edge-fra-7", Revision: rev, Connected: true, Version: "test", SyncedAt: now})
	if r := e.run("agent", "rm", "edge-fra-1"); r.code != ExitRefused || !strings.Contains(r.stderr, "no node record") ||
		!strings.Contains(r.stderr, "did you mean edge-fra-7?") {
		t.Fatalf("agent rm of a mistyped node: %s; want refused, naming edge-fra-7", r)
	}
	e.must(ExitOK, "agent", "rm", "edge-fra-7")
	r = e.must(ExitOK, "status", "--max-lag", "0")
	if strings.Contains(r.stdout, "LOST") || strings.Contains(r.stdout, " lost (") || strings.Contains(r.stdout, "n3") {
		t.Fatalf("status after agent rm n3:\n%s", r)
	}
	e.must(ExitOK, "pool", "drain", "eu-north", "--wait-converged=10s")
}

// newest is the revision of the newest key under routing/.
func (e *tenv) newest() int64 {
	e.t.Helper()
	var rev int64
	resp, err := testClient.Get(context.Background(), e.ks.Routing(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		rev = max(rev, kv.ModRevision)
	}
	return rev
}

// rowWith reports whether a line of out starts with the column first and
// holds s.
func rowWith(out, first, s string) bool {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first && strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// TestAgentRmSeveral: agent rm takes several nodes (a rack taken out of
// the fleet: one call, not one per node); each is forgotten or refused
// on its own, and any refusal exits 1 naming each.
func TestAgentRmSeveral(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	lease := grantLease(t)
	rev, _ := e.fingerprint()
	now := time.Now().UTC().Format(time.RFC3339)
	for _, n := range []string{"r1", "r2", "r3"} {
		e.putNodeRecord(routing.AgentStatus{Node: n, Revision: rev, Connected: true, Version: "test", SyncedAt: now})
	}
	e.putAgentStatus(routing.AgentStatus{Node: "r3", Revision: rev, Connected: true, Version: "test", SyncedAt: now}, lease)
	if r := e.run("agent", "rm"); r.code != ExitUsage || !strings.Contains(r.stderr, "takes one or more node names") {
		t.Fatalf("agent rm with no node: %s; want a usage error", r)
	}
	if r := e.run("agent", "rm", "r1", "a/b"); r.code != ExitUsage || e.get(e.ks.Node("r1")) == "" {
		t.Fatalf("agent rm r1 a/b: %s; want a usage error before anything is forgotten", r)
	}
	r := e.run("agent", "rm", "r1", "r2", "r3", "r9", "r1")
	if r.code != ExitRefused || strings.Count(r.stdout, "forgot node ") != 2 || !strings.Contains(r.stdout, "forgot node r1 ") || !strings.Contains(r.stdout, "forgot node r2 ") ||
		!strings.Contains(r.stderr, e.ks.Node("r3")+": ") || !strings.Contains(r.stderr, "its agent is live") ||
		!strings.Contains(r.stderr, e.ks.Node("r9")+": ") || !strings.Contains(r.stderr, "no node record") || strings.Contains(r.stderr, e.ks.Node("r1")) {
		t.Fatalf("agent rm r1 r2 r3 r9 r1: %s; want r1 and r2 forgotten, r3 (live) and r9 (no record) refused, exit 1", r)
	}
	if e.get(e.ks.Node("r1")) != "" || e.get(e.ks.Node("r2")) != "" || e.get(e.ks.Node("r3")) == "" {
		t.Fatal("agent rm r1 r2 r3 r9: want r1 and r2's records gone, r3's kept")
	}
}

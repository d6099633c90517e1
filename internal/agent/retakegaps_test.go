package agent_test

import (
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
)

// TestRetakeFailedPutIsRetried: the first agent's put back of its status
// key after a duplicate's clean stop fails (etcd refuses it: the NOSPACE
// alarm); once etcd takes puts again, the key is put back at the next
// check, not at the refresh a minute later. (The second read of the
// status key's watch: the failed put back was dropped.)
func TestRetakeFailedPutIsRetried(t *testing.T) {
	t.Parallel()
	srv, cli := exampleEtcd(t)
	ks := keyspace.Default()
	a := runNode(t, srv.Endpoints, "node-rt", nil)
	first := statusLease(t, cli, "node-rt")
	b := runNode(t, srv.Endpoints, "node-rt", nil)
	waitFor(t, "both conflicts", func() bool {
		return counter(t, a, "regiond_agent_node_conflicts_total") >= 1 && counter(t, b, "regiond_agent_node_conflicts_total") >= 1
	})
	// Each put back the other's start once: the second's, after the
	// first's, leaves the key under its lease.
	waitFor(t, "the key under the second agent's lease", func() bool {
		_, l, _ := kv(t, cli, ks.Agent("node-rt"))
		return l != first && l != 0
	})
	failed := counter(t, a, "regiond_agent_status_put_failures_total")
	disarm := devetcd.RaiseNoSpaceAlarm(t, cli)
	b.stop() // its revoke deletes the key (a revoke passes the alarm)
	waitFor(t, "the first agent's failed put back", func() bool {
		return counter(t, a, "regiond_agent_status_put_failures_total") > failed
	})
	disarm()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, l, _ := kv(t, cli, ks.Agent("node-rt")); l == first {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("status key not put back within 10 s of the alarm's disarm (statusCheck is 1 s): the failed put back waits for the refresh, a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

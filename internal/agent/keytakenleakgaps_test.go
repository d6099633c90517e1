package agent_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// etcdWatchers is the embedded etcds' watcher count (their mvcc metrics
// are on the process's default registry).
func etcdWatchers(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_debugging_mvcc_watcher_total" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no etcd_debugging_mvcc_watcher_total")
	return 0
}

// TestGapStatusKeyWatchEndsWithItsSession guards publish's cancel of
// its status key's watch (keyTaken) when a session ends: an agent whose
// lease is lost again and again (behind etcd's grpc-proxy, every few
// seconds under writes: docs/operations.md) makes one watch a session,
// and without the cancel each stayed open in etcd until the agent
// stopped. (Mutation review: dropping the cancel passed the suite.)
// Not t.Parallel: the watcher count is the process's.
func TestGapStatusKeyWatchEndsWithItsSession(t *testing.T) {
	srv, cli := exampleEtcd(t)
	runNode(t, srv.Endpoints, "node-wl", nil)
	lease := statusLease(t, cli, "node-wl")
	waitFor(t, "the agent's watches", func() bool { return etcdWatchers(t) >= 2 }) // the mirror's, the status key's
	before := etcdWatchers(t)
	const losses = 4
	for range losses {
		if _, err := cli.Revoke(context.Background(), lease); err != nil {
			t.Fatal(err)
		}
		lease = awaitNewLease(t, cli, "node-wl", lease)
	}
	waitFor(t, "the ended sessions' watches gone", func() bool { return etcdWatchers(t) <= before+1 })
}

package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestGapKeyTakenSignals guards keyTaken's contract (publish.go): a put
// under a lease of this run's earlier sessions (one etcd applied after
// its answer was lost) is not another agent's, so no signal and no
// checked put that counts a false conflict in
// regiond_agent_node_conflicts_total; a put under another lease signals
// once a session only (two agents with the same --node do not take the
// key from each other at every put); a delete of a key under this
// session's lease is not signalled (its end is sess.Done), one under
// another lease is, every time. (Mutation review: taking only this
// session's lease for this run's, signalling every foreign put, or every
// delete, each passed the suite.)
func TestGapKeyTakenSignals(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	grant := func() clientv3.LeaseID {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	earlier, lease, other, third := grant(), grant(), grant(), grant()
	const key = "/regiond/v1/agents/node-kt"
	put := func(l clientv3.LeaseID) {
		t.Helper()
		if _, err := cli.Put(ctx, key, `{"node":"node-kt"}`, clientv3.WithLease(l)); err != nil {
			t.Fatal(err)
		}
	}
	del := func() {
		t.Helper()
		if _, err := cli.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	p := &publisher{cli: cli, key: key, log: slog.New(slog.DiscardHandler)}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	taken := p.keyTaken(wctx, lease, map[clientv3.LeaseID]bool{earlier: true, lease: true})
	signalled := func(within time.Duration) bool {
		select {
		case <-taken:
			return true
		case <-time.After(within):
			return false
		}
	}
	// The watch is made in a goroutine: a delete of the key while under
	// the earlier session's lease signals once it is there.
	for i := 0; ; i++ {
		put(earlier)
		del()
		if signalled(200 * time.Millisecond) {
			break
		}
		if i == 25 {
			t.Fatal("no signal for deletes of the key under an earlier session's lease")
		}
	}
	time.Sleep(100 * time.Millisecond)
	signalled(0) // drain

	put(lease)
	put(earlier)
	if signalled(300 * time.Millisecond) {
		t.Fatal("signalled for puts under this session's and an earlier session's lease: not another agent's")
	}
	put(other)
	if !signalled(2 * time.Second) {
		t.Fatal("no signal for a put under another agent's lease")
	}
	put(third)
	if signalled(300 * time.Millisecond) {
		t.Fatal("a second put under another lease signalled: once a session")
	}
	put(lease)
	del()
	if signalled(300 * time.Millisecond) {
		t.Fatal("signalled for the delete of the key under this session's own lease")
	}
	put(other)
	del()
	if !signalled(2 * time.Second) {
		t.Fatal("no signal for the delete of the key under another lease")
	}
}

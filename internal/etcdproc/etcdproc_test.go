package etcdproc_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/poll"
)

// get reads key from the one member cli talks to, without asking the
// leader (a serializable read): what that member itself has applied.
func get(t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// TestPartitionCutsBothWays checks the topology: a partitioned member gets
// no raft message at all (it loses its leader, which it would not if either
// direction still carried traffic), the others go on without it, and after
// Heal it catches up.
func TestPartitionCutsBothWays(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	c := etcdproc.Start(t, etcdproc.Config{Members: 3})
	c.MoveLeader(t, 0)
	w := c.Client(t, 0)
	lone := c.Client(t, 2)
	if _, err := w.Put(context.Background(), "k", "v1"); err != nil {
		t.Fatal(err)
	}
	poll.Must(t, 15*time.Second, "m2 to apply v1", func() bool { return get(t, lone, "k") == "v1" })

	c.Partition(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.Put(ctx, "k", "v2"); err != nil {
		t.Fatalf("write through the majority: %v", err)
	}
	poll.Must(t, 15*time.Second, "m2 to lose its leader", func() bool {
		st, err := c.MemberStatus(context.Background(), 2)
		return err == nil && st.Leader == 0
	})
	if got := get(t, lone, "k"); got != "v1" {
		t.Fatalf("partitioned m2 has k=%q, want v1", got)
	}
	if l := c.Leader(t); l == 2 {
		t.Fatal("the partitioned member is leader")
	}

	c.Heal(2)
	poll.Must(t, 15*time.Second, "m2 to catch up", func() bool { return get(t, lone, "k") == "v2" })
	poll.Must(t, 15*time.Second, "m2 to know the leader again", func() bool {
		st, err := c.MemberStatus(context.Background(), 2)
		return err == nil && st.Leader != 0
	})
}

// TestKillLeaderAndRestart checks the crash fault: the killed leader's
// process is gone, the other two elect a leader and take writes, and the
// restarted member rejoins from its data directory and catches up.
func TestKillLeaderAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	c := etcdproc.Start(t, etcdproc.Config{Members: 3})
	killed := c.KillLeader(t)
	if c.Members[killed].Running() {
		t.Fatalf("%s still runs after Kill", c.Members[killed].Name)
	}
	if l := c.Leader(t); l == killed {
		t.Fatalf("the killed member %d is leader", killed)
	}
	other := (killed + 1) % 3
	w := c.Client(t, other)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.Put(ctx, "k", "after-kill"); err != nil {
		t.Fatalf("write with the leader dead: %v", err)
	}
	c.Restart(killed, 30*time.Second)
	back := c.Client(t, killed)
	poll.Must(t, 15*time.Second, "the restarted member to catch up", func() bool { return get(t, back, "k") == "after-kill" })
}

package faultsuite

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/gobuild"
)

// TestHeartbeatKeyGoesAcrossLeaderKill: an origin's heartbeat
// (regionctl heartbeat) dies with SIGKILL and the etcd leader is killed
// right after it. etcd resets every lease's TTL when a new leader takes
// over, so the health key must disappear no sooner than TTL and no later
// than 2×TTL after the origin died — never linger for good, never go early.
func TestHeartbeatKeyGoesAcrossLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-member etcd cluster and regionctl")
	}
	const ttl = 4 * time.Second
	c := etcdproc.Start(t, etcdproc.Config{Members: 3, Args: []string{"--unsafe-no-fsync"}})
	cli := c.Client(t)
	key := "/lease/routing/health/eu-a/i1"
	ctl := gobuild.Binary(t, "./cmd/regionctl")
	var out bytes.Buffer
	hb := exec.Command(ctl, "--endpoints="+strings.Join(c.Endpoints(), ","), "--prefix=/lease",
		"heartbeat", "eu-a", "--instance=i1", "--addr=10.0.0.1:443", "--ttl="+ttl.String())
	hb.Stdout, hb.Stderr = &out, &out
	hb.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := hb.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hb.Process.Kill(); hb.Wait() })
	rev := waitKey(t, cli, key, true)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wch := cli.Watch(ctx, key, clientv3.WithRev(rev+1))
	hb.Process.Signal(syscall.SIGKILL)
	died := time.Now()
	killed := c.KillLeader(t)
	t.Logf("heartbeat killed; leader m%d killed %v later", killed, time.Since(died).Round(time.Millisecond))
	var gone time.Duration
	for wr := range wch {
		if err := wr.Err(); err != nil {
			t.Fatalf("watch %s: %v", key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				gone = time.Since(died)
			}
		}
		if gone > 0 {
			break
		}
	}
	c.Restart(killed, 30*time.Second)
	if gone == 0 {
		t.Fatalf("the health key of a dead origin still exists 30s later\nregionctl output:\n%s", out.String())
	}
	t.Logf("health key gone %v after its origin died (TTL %v)", gone.Round(time.Millisecond), ttl)
	if gone < ttl || gone > 2*ttl {
		t.Fatalf("health key gone %v after its origin died; want within TTL..2×TTL (%v..%v)", gone, ttl, 2*ttl)
	}
}

// TestAgentStatusKeyComesBack: the agent's status key is bound to its
// lease; when etcd loses that lease (revoked here, after a leader kill),
// the key goes and the agent grants a new lease and puts it again.
func TestAgentStatusKeyComesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-member etcd cluster and an agent process")
	}
	c := etcdproc.Start(t, etcdproc.Config{Members: 3, Args: []string{"--unsafe-no-fsync"}})
	cli := c.Client(t)
	if _, err := cli.Put(context.Background(), "/lease/routing/epoch", "1"); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, gobuild.Binary(t, "./cmd/regiond", "-tags", "nodev"), "node-1", c.Endpoints(), "/lease")
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	key := "/lease/agents/node-1"
	waitKey(t, cli, key, true)
	killed := c.KillLeader(t)
	c.Restart(killed, 30*time.Second)
	lease := leaseOf(t, cli, key)
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(lease)); err != nil {
		t.Fatalf("revoke the agent's lease: %v", err)
	}
	waitKey(t, cli, key, false)
	waitKey(t, cli, key, true)
	if now := leaseOf(t, cli, key); now == lease || now == 0 {
		t.Fatalf("status key back under lease %x, was %x", now, lease)
	}
}

// waitKey waits (up to 30s) until key exists (or, with !exists, is gone)
// and returns the revision at which it saw it so.
func waitKey(t *testing.T, cli *clientv3.Client, key string, exists bool) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := cli.Get(ctx, key)
		cancel()
		if err == nil && (len(resp.Kvs) > 0) == exists {
			return resp.Header.Revision
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: exists=%v not reached after 30s (err %v)", key, exists, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leaseOf(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("get %s: %v", key, err)
	}
	return resp.Kvs[0].Lease
}

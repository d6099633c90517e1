package faultsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/gobuild"
	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
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
	t.Parallel() // mostly waiting out lease TTLs: beside TestFleetFaults
	prebuild(false, true)
	const ttl = 4 * time.Second
	c := etcdproc.Start(t, etcdproc.Config{Members: 3, Args: []string{"--unsafe-no-fsync"}})
	cli := c.Client(t)
	key := "/lease/routing/health/eu-a/i1"
	// The heartbeat exits 1 for a pool that is not stored.
	if _, err := cli.Put(context.Background(), "/lease/routing/pools/eu-a", `{"host":"edge-a.example.net:443","residency":"eu","status":"active","health_check":true}`); err != nil {
		t.Fatal(err)
	}
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
	gone := untilDeleted(t, wch, key, died)
	c.Restart(killed, 30*time.Second)
	if gone == 0 {
		t.Fatalf("the health key of a dead origin still exists 30s later\nregionctl output:\n%s", out.String())
	}
	t.Logf("health key gone %v after its origin died (TTL %v)", gone.Round(time.Millisecond), ttl)
	if gone < ttl || gone > 2*ttl {
		t.Fatalf("health key gone %v after its origin died; want within TTL..2×TTL (%v..%v)", gone, ttl, 2*ttl)
	}
}

// TestAgentStatusKeyComesBack: the agent's status key is bound to a lease
// of the agent's, and etcd really loses that lease: the agent's every
// connection to etcd is cut, the leader is killed, and the cut lasts until
// etcd has expired the lease and deleted the key (nobody revokes it). Once
// the connection is back, the agent grants a new lease and puts its status
// key again under it, connected and reporting the revision of the change
// written while it was cut off.
func TestAgentStatusKeyComesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-member etcd cluster and an agent process")
	}
	t.Parallel() // mostly waiting out lease TTLs: beside TestFleetFaults
	prebuild(true, false)
	// regiond has no flag for the status lease's TTL: the agent process
	// runs with the default, 10s.
	ttl := agent.DefaultConfig().StatusTTL
	c := etcdproc.Start(t, etcdproc.Config{Members: 3, Args: []string{"--unsafe-no-fsync"}})
	cli := c.Client(t)
	if _, err := cli.Put(context.Background(), "/lease/routing/epoch", "1"); err != nil {
		t.Fatal(err)
	}
	// The agent reaches every member through a TCP proxy of its own, to be
	// cut off from etcd while etcd runs.
	var eps []string
	var links []*tcpproxy.Proxy
	for _, m := range c.Members {
		p, err := tcpproxy.New(strings.TrimPrefix(m.ClientURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		eps, links = append(eps, p.URL()), append(links, p)
	}
	a := newAgent(t, gobuild.Binary(t, "./cmd/regiond", "-tags", "nodev"), "node-1", eps, "/lease")
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the agent's log:\n%s", a.logTail(40))
		}
	})
	key := "/lease/agents/node-1"
	rev := waitKey(t, cli, key, true)
	old := leaseOf(t, cli, key)

	ctx, cancel := context.WithTimeout(context.Background(), 3*ttl)
	defer cancel()
	wch := cli.Watch(ctx, key, clientv3.WithRev(rev+1))
	for _, p := range links {
		p.Sever()
	}
	cut := time.Now()
	killed := c.KillLeader(t)
	leader := c.Leader(t)
	t.Logf("agent cut off from etcd; leader m%d killed %v later, m%d leads", killed, time.Since(cut).Round(time.Millisecond), leader)
	// A change the agent misses while cut off: the status key it puts
	// when it is back must report it. The put is retried while the
	// cluster settles after the election (putting the same value again is
	// harmless: the revision that counts is the last one).
	pool := mustJSON(routing.Pool{Host: "eu-a.example.net:443", Region: "eu-a", Residency: "eu", Status: "active"})
	var missed int64
	for missed == 0 {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		put, err := cli.Put(pctx, "/lease/routing/pools/eu-a", pool)
		pcancel()
		switch {
		case err == nil:
			missed = put.Header.Revision
		case ctx.Err() != nil:
			t.Fatalf("put a change while the agent is cut off: %v", err)
		default:
			time.Sleep(100 * time.Millisecond)
		}
	}
	gone := untilDeleted(t, wch, key, cut)
	if gone == 0 {
		t.Fatalf("the status key of an agent cut off from etcd still exists %v later (lease TTL %v)", 3*ttl, ttl)
	}
	if lr, err := cli.TimeToLive(context.Background(), clientv3.LeaseID(old)); err != nil || lr.TTL != -1 {
		t.Fatalf("status key gone, but its lease %x is not: TimeToLive %+v, %v", old, lr, err)
	}
	t.Logf("status key gone %v after the cut, its lease expired (TTL %v)", gone.Round(time.Millisecond), ttl)

	c.Restart(killed, 30*time.Second)
	for _, p := range links {
		if err := p.Restore(); err != nil {
			t.Fatalf("restore the agent's connections: %v", err)
		}
	}
	restored := time.Now()
	// The agent's reconnection waits out gRPC's backoff after a long cut
	// (up to ~10s by now), then its first put may precede the catching
	// up: wait for a status that reports the missed change.
	st, lease := waitStatus(t, cli, key, 60*time.Second, func(st routing.AgentStatus, lease int64) bool {
		return lease != 0 && lease != old && st.Connected && st.Revision >= missed
	})
	t.Logf("status key back %v after the connection: lease %x (was %x), revision %d (missed change %d)",
		time.Since(restored).Round(time.Millisecond), lease, old, st.Revision, missed)
	lr, err := cli.TimeToLive(context.Background(), clientv3.LeaseID(lease))
	if err != nil || lr.TTL <= 0 || lr.GrantedTTL != int64(ttl/time.Second) {
		t.Fatalf("status key's new lease %x: TimeToLive %+v, %v; want alive, granted %v", lease, lr, err, ttl)
	}
}

// waitStatus waits (up to timeout) until key holds an agent status for
// which ok holds, and returns it and the key's lease.
func waitStatus(t *testing.T, cli *clientv3.Client, key string, timeout time.Duration,
	ok func(st routing.AgentStatus, lease int64) bool) (routing.AgentStatus, int64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := "no key"
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := cli.Get(ctx, key)
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case len(resp.Kvs) > 0:
			var st routing.AgentStatus
			kv := resp.Kvs[0]
			if err := json.Unmarshal(kv.Value, &st); err != nil {
				t.Fatalf("%s: %v: %q", key, err, kv.Value)
			}
			if ok(st, kv.Lease) {
				return st, kv.Lease
			}
			last = fmt.Sprintf("%s under lease %x", kv.Value, kv.Lease)
		default:
			last = "no key"
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the status wanted not reached after %v; last seen: %s", key, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
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

// untilDeleted reads wch (a watch on key) until key is deleted and returns
// how long after since that was, or 0 if the watch ends first (its
// context's deadline).
func untilDeleted(t *testing.T, wch clientv3.WatchChan, key string, since time.Time) time.Duration {
	t.Helper()
	for wr := range wch {
		if err := wr.Err(); err != nil {
			t.Fatalf("watch %s: %v", key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return time.Since(since)
			}
		}
	}
	return 0
}

// TestBoostEndsAcrossLeaderElections: etcd renews every lease to its full
// TTL when a member becomes leader (lease checkpoints are off by default),
// so a 5s boost whose cluster keeps electing leaders keeps its key. The
// boost's expires_at ends it anyway: an agent process stops applying it
// by its clock while the key is still in etcd. Without expires_at honoured
// the agent would follow the key and keep the boost until the elections
// stop (the loop's bound).
func TestBoostEndsAcrossLeaderElections(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-member etcd cluster, regionctl and an agent process")
	}
	t.Parallel() // mostly waiting out lease TTLs: beside TestFleetFaults
	prebuild(true, true)
	c := etcdproc.Start(t, etcdproc.Config{Members: 3, Args: []string{"--unsafe-no-fsync"}})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for key, val := range map[string]string{
		"/lease/routing/pools/eu-a":      mustJSON(routing.Pool{Host: "eu-a.example.net:443", Residency: "eu", Status: "active"}),
		"/lease/routing/pools/eu-b":      mustJSON(routing.Pool{Host: "eu-b.example.net:443", Residency: "eu", Status: "active"}),
		"/lease/routing/routes/_default": mustJSON(routing.Route{Targets: []routing.Target{{Pool: "eu-a", Weight: 100}}}),
		"/lease/routing/epoch":           "1",
	} {
		if _, err := cli.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	a := newAgent(t, gobuild.Binary(t, "./cmd/regiond", "-tags", "nodev"), "node-1", c.Endpoints(), "/lease")
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the agent's log:\n%s", a.logTail(40))
		}
	})
	if err := a.waitUp(ctx); err != nil {
		t.Fatal(err)
	}
	pool := func() string {
		code, body, err := a.get(ctx, "/v1/resolve?country=PL&key=v")
		var d routing.Decision
		if err != nil || code != 200 || json.Unmarshal(body, &d) != nil {
			return ""
		}
		return d.Pool
	}
	waitPool := func(want string) {
		for pool() != want {
			if ctx.Err() != nil {
				t.Fatalf("PL never resolved to %s", want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPool("eu-a")

	ctl := gobuild.Binary(t, "./cmd/regionctl")
	out, err := exec.Command(ctl, "--endpoints="+strings.Join(c.Endpoints(), ","), "--prefix=/lease",
		"boost", "_default", "--target=eu-b=100", "--ttl=5s", "--id=b").CombinedOutput()
	if err != nil {
		t.Fatalf("regionctl boost: %v\n%s", err, out)
	}
	key := "/lease/routing/overrides/b"
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the boost's key: %v %v", resp, err)
	}
	var ov routing.Override
	if err := json.Unmarshal(resp.Kvs[0].Value, &ov); err != nil || ov.Expiry().IsZero() {
		t.Fatalf("the boost's value %s: %v; want an expires_at", resp.Kvs[0].Value, err)
	}
	waitPool("eu-b")

	// Elections, one every ~700ms, renew the boost's lease past its
	// expires_at, until the agent stops applying it (bounded).
	bound := ov.Expiry().Add(15 * time.Second)
	moves := 0
	for to := 0; pool() == "eu-b"; to = (to + 1) % len(c.Members) {
		if time.Now().After(bound) {
			t.Fatalf("the boost is still applied 15s after its expires_at %s (%d leader moves)", ov.ExpiresAt, moves)
		}
		if l := c.Leader(t); l != to {
			c.MoveLeader(t, to)
			moves++
		}
		time.Sleep(700 * time.Millisecond)
	}
	ended := time.Now()
	g, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) == 0 {
		t.Fatalf("the boost's key went with its lease before the agent's clock ended it (%d leader moves): the elections did not renew it", moves)
	}
	if ended.Before(ov.Expiry()) {
		t.Fatalf("the agent ended the boost at %s, before its expires_at %s", ended.Format(time.RFC3339Nano), ov.ExpiresAt)
	}
	if p := pool(); p != "eu-a" {
		t.Fatalf("PL resolves to %q after the boost ended, want eu-a", p)
	}
	t.Logf("boost ended by expires_at %s, %v later, its key still in etcd after %d leader moves",
		ov.ExpiresAt, ended.Sub(ov.Expiry()).Round(time.Millisecond), moves)
}

package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/routing"
)

// TestQuorumLossServesTheLastTable: a 3-member etcd loses 2 members (the
// agent has all three endpoints; the one left takes connections and
// answers nothing: it has no leader). The agent says so (connected false,
// etcd_error naming the lost leader) and serves its last table: decisions at the old revision, synced_at
// frozen. With the members back, it follows etcd again, with a change
// made once quorum returned. Its status key, whose lease the agent gave
// up during the outage, is put again once etcd answers, not once a retry
// delay grown meanwhile runs out (an hour here: the drills saw live
// agents LOST for up to a minute after quorum returned).
func TestQuorumLossServesTheLastTable(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	c := etcdproc.Start(t, etcdproc.Config{Members: 3})
	cli := c.Client(t)
	rev := loadExample(t, cli)
	dir := t.TempDir()
	cfg := tcpConfig(dir, c.Endpoints(), "node-1")
	cfg.StatusTTL = 2 * time.Second
	h := runAgent(t, dir, cfg, func(a *agent.Agent) { agent.SetStatusRetry(a, time.Hour, time.Hour) })
	var st api.Status
	waitWithin(t, 30*time.Second, "connected at the example's revision", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return st.Connected && st.Revision >= rev
	})
	_, before := h.resolve("DE", "k")

	c.Kill(1)
	c.Kill(2)
	waitWithin(t, time.Minute, "connected false with quorum lost", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return !st.Connected
	})
	t.Logf("status with quorum lost: connected %v, revision %d, synced_at %s, etcd_error %q", st.Connected, st.Revision, st.SyncedAt, st.EtcdError)
	if !strings.Contains(st.EtcdError, "has no leader") {
		t.Errorf("etcd_error with quorum lost: %q; want it to say the member answering has no leader", st.EtcdError)
	}
	frozen := st.SyncedAt
	time.Sleep(2 * time.Second) // long enough for a progress notification or a probe to move synced_at, were etcd answering
	st = api.Status{}
	h.get("/v1/status", &st)
	if st.Connected || st.SyncedAt != frozen {
		t.Errorf("with quorum lost: connected %v, synced_at %s (was %s); want false, frozen", st.Connected, st.SyncedAt, frozen)
	}
	if code, d := h.resolve("DE", "k"); code != 200 || d.Pool != before.Pool || d.Revision != before.Revision {
		t.Errorf("DE with quorum lost: %d %+v; want the last table's %s at revision %d", code, d, before.Pool, before.Revision)
	}

	// The agent gave up its status lease, and its grant of a new one
	// failed: it waits to try again.
	waitWithin(t, time.Minute, "a failed grant of the status key's next lease", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return strings.Contains(st.StatusError, "no lease for the status key")
	})
	c.Restart(1, time.Minute)
	c.Restart(2, time.Minute)
	put, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	waitWithin(t, time.Minute, "the change made after quorum returned", func() bool {
		code, d := h.resolve("DE", "k")
		return code == 200 && d.Pool == "eu-north" && d.Revision >= put.Header.Revision
	})
	waitWithin(t, 30*time.Second, "connected again", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return st.Connected
	})
	waitWithin(t, 30*time.Second, "the status key put again at the change's revision", func() bool {
		resp, err := cli.Get(context.Background(), "/regiond/v1/agents/node-1")
		if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
			return false
		}
		var as routing.AgentStatus
		return json.Unmarshal(resp.Kvs[0].Value, &as) == nil && as.Revision >= put.Header.Revision
	})
}

package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
)

// TestStatusSaysTheWatchIsRefused: with etcd auth on, the agent's role
// loses its read of the prefix (and its watch is made again, through a
// cut connection). /v1/status says why in etcd_error, naming the prefix,
// while the last good table keeps answering; once the read is granted
// back the agent catches up and etcd_error is gone.
func TestStatusSaysTheWatchIsRefused(t *testing.T) {
	e := devetcd.NewTestAuthBehindProxy(t, "/regiond/v1/")
	a, root := e.Auth, e.Root
	loadExample(t, root)
	dir := t.TempDir()
	cfg := offlineConfig(dir)
	// The default --dial-timeout: a login (bcrypt, through the proxy) on
	// a loaded machine can take over a second.
	cfg.Endpoints, cfg.StatusTTL = []string{e.Proxy.URL()}, 2*time.Second
	cfg.Username, cfg.Password = a.User, a.Password
	h := runAgent(t, dir, cfg)
	var st api.Status
	status := func() api.Status { st = api.Status{}; h.get("/v1/status", &st); return st }
	waitFor(t, "connected", func() bool { st := status(); return st.Connected && st.EtcdError == "" })

	e.SetAccess(t, false)
	waitFor(t, "etcd_error naming the refusal", func() bool {
		st := status()
		return strings.Contains(st.EtcdError, "permission denied") && strings.Contains(st.EtcdError, a.Prefix+"routing/")
	})
	if c, d := h.resolve("PL", "k"); c != 200 || d.Pool == "" {
		t.Fatalf("resolve while etcd refuses the watch: %d %+v, want the last good table", c, d)
	}

	e.SetAccess(t, true)
	p, err := root.Put(context.Background(), prefix+"pools/back", `{"host":"back.example.net","residency":"eu","status":"active"}`)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for st = status(); !st.Connected || st.EtcdError != "" || st.Revision < p.Header.Revision; st = status() {
		if time.Now().After(deadline) {
			t.Fatalf("status %+v 30s after the read was granted back; want connected at revision %d or later, no etcd_error", st, p.Header.Revision)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

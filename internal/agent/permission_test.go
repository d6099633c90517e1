package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// TestStatusSaysTheWatchIsRefused: with etcd auth on, the agent's role
// loses its read of the prefix (and its watch is made again, through a
// cut connection). /v1/status says why in etcd_error, naming the prefix,
// while the last good table keeps answering; once the read is granted
// back the agent catches up and etcd_error is gone.
func TestStatusSaysTheWatchIsRefused(t *testing.T) {
	srv := devetcd.NewTest(t)
	a := devetcd.EnableTestAuth(t, srv, "/regiond/v1/")
	root, err := srv.ClientAs("root", devetcd.TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	loadExample(t, root)
	proxy, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	dir := t.TempDir()
	cfg := offlineConfig(dir)
	cfg.Endpoints, cfg.DialTimeout, cfg.StatusTTL = []string{proxy.URL()}, time.Second, 2*time.Second
	cfg.Username, cfg.Password = a.User, a.Password
	h := runAgent(t, dir, cfg)
	var st api.Status
	status := func() api.Status { st = api.Status{}; h.get("/v1/status", &st); return st }
	waitFor(t, "connected", func() bool { st := status(); return st.Connected && st.EtcdError == "" })

	ctx := context.Background()
	role, end := a.User+"-rw", clientv3.GetPrefixRangeEnd(a.Prefix)
	if _, err := root.RoleRevokePermission(ctx, role, a.Prefix, end); err != nil {
		t.Fatal(err)
	}
	proxy.Sever()
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "etcd_error naming the refusal", func() bool {
		st := status()
		return strings.Contains(st.EtcdError, "permission denied") && strings.Contains(st.EtcdError, a.Prefix+"routing/")
	})
	if c, d := h.resolve("PL", "k"); c != 200 || d.Pool == "" {
		t.Fatalf("resolve while etcd refuses the watch: %d %+v, want the last good table", c, d)
	}

	if _, err := root.RoleGrantPermission(ctx, role, a.Prefix, end, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	p, err := root.Put(ctx, prefix+"pools/back", `{"host":"back.example.net","residency":"eu","status":"active"}`)
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

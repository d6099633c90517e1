package agent_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

// TestStatusSaysTheWatchIsRefused: with etcd auth on, the agent's role
// loses its read of the prefix (and its watch is made again, through a
// cut connection). /v1/status says why in etcd_error, naming the prefix,
// while the last good table keeps answering; once the read is granted
// back the agent catches up and etcd_error is gone.
func TestStatusSaysTheWatchIsRefused(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
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

// TestStatusPutFailuresAreLoggedOnce: with etcd auth on, the agent's role
// loses its write of the agent's status key while its read of the prefix
// stays. A change's status put then fails at every check: the first
// failure is one warning, the rest debug lines, all counted in
// regiond_agent_status_put_failures_total; once the write is granted
// back the put succeeds, is logged once, and the key holds the change.
func TestStatusPutFailuresAreLoggedOnce(t *testing.T) {
	// Not t.Parallel: under a loaded machine's parallel runs its 10 s
	// status lease was starved out, or a timed-out put left the node
	// record's guard stale (the diff review).
	srv := devetcd.NewTest(t)
	a := devetcd.EnableTestAuth(t, srv, "/regiond/v1/")
	root, err := srv.ClientAs("root", devetcd.TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	loadExample(t, root)
	dir := t.TempDir()
	var logs logbuf.Buffer
	cfg := offlineConfig(dir)
	cfg.Endpoints, cfg.Username, cfg.Password = srv.Endpoints, a.User, a.Password
	// etcd refuses the lease's keep-alives too while the role may not
	// write the key: with the default 10 s TTL, three failed puts under a
	// loaded CI outlasted the lease, and status_error named the lease's
	// end, not the put. A minute outlasts the refusal.
	cfg.StatusTTL = time.Minute
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := runAgent(t, dir, cfg)
	key := "/regiond/v1/agents/" + cfg.Node
	statusRev := func() int64 {
		r, err := root.Get(context.Background(), key)
		if err != nil || len(r.Kvs) == 0 {
			return 0
		}
		var st routing.AgentStatus
		if err := json.Unmarshal(r.Kvs[0].Value, &st); err != nil {
			t.Fatal(err)
		}
		return st.Revision
	}
	waitFor(t, "the status key", func() bool { return statusRev() > 0 })

	// Read only, on the whole prefix: the watch goes on, the put fails.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	role, end := a.User+"-rw", clientv3.GetPrefixRangeEnd(a.Prefix)
	if _, err := root.RoleRevokePermission(ctx, role, a.Prefix, end); err != nil {
		t.Fatal(err)
	}
	if _, err := root.RoleGrantPermission(ctx, role, a.Prefix, end, clientv3.PermissionType(clientv3.PermRead)); err != nil {
		t.Fatal(err)
	}
	p, err := root.Put(ctx, prefix+"pools/extra", `{"host":"extra.example.net","residency":"eu","status":"active"}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three failed puts", func() bool { return counter(t, h, "regiond_agent_status_put_failures_total") >= 3 })
	var st api.Status
	if h.get("/v1/status", &st); !strings.Contains(st.StatusError, "put "+key+": ") || !strings.Contains(st.StatusError, "permission denied") {
		t.Fatalf("/v1/status while the status key is refused: status_error %q; want the put and why", st.StatusError)
	}
	if _, err := root.RoleGrantPermission(ctx, role, a.Prefix, end, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the status key at the change", func() bool { return statusRev() >= p.Header.Revision })
	waitFor(t, "status_error cleared once the status key is put", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return st.StatusError == ""
	})
	waitFor(t, "the put logged again", func() bool { return strings.Contains(logs.String(), `"msg":"agent status: put again"`) })

	warn, debug := 0, 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(l, `"msg":"agent status: put failed`) {
			continue
		}
		if !strings.Contains(l, "permission denied") {
			t.Errorf("a failed put's log does not say why: %s", l)
		}
		switch {
		case strings.Contains(l, `"level":"WARN"`):
			warn++
		case strings.Contains(l, `"level":"DEBUG"`):
			debug++
		}
	}
	if warn != 1 || debug < 2 {
		t.Fatalf("failed puts logged: %d warnings, %d debug lines; want 1 warning, then debug lines:\n%s", warn, debug, logs.String())
	}
}

// TestAuthTurnedOnUnderAnAgentIsCounted: etcd auth turned on under a
// running agent without credentials: its open watch goes on, but its
// status key's lease is refused ("user name is empty") once the old one
// ends. That counts in regiond_agent_status_put_failures_total (the alert
// RegiondStatusNotPublished), as a failed put does.
func TestAuthTurnedOnUnderAnAgentIsCounted(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, _ := exampleEtcd(t)
	cfg := offlineConfig(t.TempDir())
	cfg.Endpoints, cfg.StatusTTL = srv.Endpoints, 2*time.Second
	h := runAgent(t, t.TempDir(), cfg)
	waitFor(t, "connected", func() bool { var st api.Status; h.get("/v1/status", &st); return st.Connected })
	devetcd.EnableTestAuth(t, srv, "/regiond/v1/")
	deadline := time.Now().Add(30 * time.Second)
	for counter(t, h, "regiond_agent_status_put_failures_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no status put failure counted 30s after auth was turned on under the agent")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNoSpaceAlarmIsShownInStatus: under etcd's NOSPACE alarm the agent
// serves on, but its status key cannot be put (a delete still applies and
// is to be reported); /v1/status names why, with the way out of the alarm,
// as status_error (the agent used to vanish from regionctl status with
// only a log line to say why), and drops it once a put succeeds.
func TestNoSpaceAlarmIsShownInStatus(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	srv, cli := exampleEtcd(t)
	h := startAgent(t, t.TempDir(), srv.Endpoints)
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	ctx := context.Background()
	disarm := devetcd.RaiseNoSpaceAlarm(t, cli)
	del, err := cli.Delete(ctx, prefix+"routes/AT") // deletes pass the alarm
	if err != nil {
		t.Fatal(err)
	}
	delRev := del.Header.Revision
	var st api.Status
	waitFor(t, "status_error", func() bool { h.get("/v1/status", &st); return st.StatusError != "" })
	if !strings.Contains(st.StatusError, "database space exceeded") || !strings.Contains(st.StatusError, "NOSPACE alarm is raised") ||
		!strings.Contains(st.StatusError, "etcdctl alarm disarm") {
		t.Fatalf("/v1/status under NOSPACE: status_error %q; want the refusal and the way out", st.StatusError)
	}
	// The delete applies under the alarm: AT falls to the default route.
	var d routing.Decision
	waitFor(t, "AT by _default", func() bool { var code int; code, d = h.resolve("AT", "k"); return code == 200 && d.Revision >= delRev })
	if d.Route != "_default" || d.Pool == "" {
		t.Fatalf("resolve AT under NOSPACE, its route deleted at revision %d: %+v; want served by _default", delRev, d)
	}
	disarm()
	waitFor(t, "status_error gone", func() bool { st = api.Status{}; h.get("/v1/status", &st); return st.StatusError == "" })
	// Once a put succeeds the status key reports the delete.
	waitFor(t, "the status key at the delete", func() bool {
		resp, err := cli.Get(ctx, "/regiond/v1/agents/node-1")
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		var as struct {
			ChangeRevision int64 `json:"change_revision"`
		}
		return json.Unmarshal(resp.Kvs[0].Value, &as) == nil && as.ChangeRevision >= delRev
	})
}

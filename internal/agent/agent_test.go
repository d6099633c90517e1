package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/routing"
)

const prefix = "/regiond/v1/routing/"

type harness struct {
	t        *testing.T
	dir      string
	a        *agent.Agent
	cancel   context.CancelFunc
	done     chan error
	http     *http.Client
	unixHTTP *http.Client
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startAgent runs an agent against endpoints with its files in dir, its
// configuration changed by each of with.
func startAgent(t *testing.T, dir string, endpoints []string, with ...func(*agent.Config)) *harness {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.Node = "node-1"
	cfg.Socket = filepath.Join(dir, "run", "regiond.sock")
	cfg.Listen = "127.0.0.1:0"
	cfg.Snapshot = filepath.Join(dir, "shm", "table.json")
	cfg.DialTimeout = time.Second
	cfg.StatusTTL = 2 * time.Second
	cfg.Logger = quietLogger()
	for _, f := range with {
		f(&cfg)
	}
	return runAgent(t, dir, cfg)
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("agent Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		h.t.Error("agent did not stop within 15s")
	}
}

// get fetches a path of the TCP API and decodes the JSON body into v.
func (h *harness) get(path string, v any) int {
	h.t.Helper()
	resp, err := h.http.Get("http://" + h.a.Addr() + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			h.t.Fatalf("GET %s: decode: %v", path, err)
		}
	}
	return resp.StatusCode
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 30*time.Second, what, cond)
}

// waitWithin polls cond every 25 ms until it holds, failing the test after d
// (a hang guard, not a timing assertion).
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Must(t, d, what, cond)
}

func (h *harness) resolve(cc, key string) (int, routing.Decision) {
	var d routing.Decision
	code := h.get(fmt.Sprintf("/v1/resolve?country=%s&key=%s", cc, key), &d)
	return code, d
}

func (h *harness) snapshot() *routing.Table {
	b, err := os.ReadFile(filepath.Join(h.dir, "shm", "table.json"))
	if err != nil {
		return nil
	}
	t, _, err := routing.LoadTableJSON(b)
	if err != nil {
		h.t.Fatalf("snapshot file does not load: %v", err)
	}
	return t
}

// startExampleAgent runs etcd with the example fleet and an agent (its
// configuration changed by each of with) that has served its first
// decision.
func startExampleAgent(t *testing.T, with ...func(*agent.Config)) (*harness, *clientv3.Client) {
	t.Helper()
	srv, cli := exampleEtcd(t)
	h := startAgent(t, t.TempDir(), srv.Endpoints, with...)
	waitFor(t, "first table", func() bool { c, _ := h.resolve("DE", "k"); return c == 200 })
	return h, cli
}

// exampleEtcd starts an embedded etcd holding the example fleet and
// returns it with a client of it.
func exampleEtcd(t *testing.T) (*devetcd.Server, *clientv3.Client) {
	t.Helper()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	return srv, cli
}

func loadExample(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	return fleettest.Load(t, cli, prefix)
}

func TestChangesReachAPIAndSnapshot(t *testing.T) {
	h, cli := startExampleAgent(t)

	// seen: the API and the snapshot file both serve a decision for cc at
	// rev or later from the route and pool (any eu pool when pool is "").
	seenRoute := func(rev int64, cc, route, pool string) func() bool {
		ok := func(d routing.Decision) bool {
			return d.Revision >= rev && d.Route == route && (d.Pool == pool || pool == "" && strings.HasPrefix(d.Pool, "eu-"))
		}
		return func() bool {
			c, d := h.resolve(cc, "k")
			snap := h.snapshot()
			if c != 200 || !ok(d) || snap == nil {
				return false
			}
			sd, err := snap.Resolve(cc, "k", time.Now())
			return err == nil && ok(sd) && sd.Pool == d.Pool
		}
	}
	seen := func(rev int64, cc, pool string) func() bool { return seenRoute(rev, cc, cc, pool) }
	// A put.
	p, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "put visible in API and snapshot", seen(p.Header.Revision, "DE", "eu-north"))
	// A delete: DE falls back to _default, and only to its eu pools.
	d, err := cli.Delete(context.Background(), prefix+"routes/DE")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "delete visible", seenRoute(d.Header.Revision, "DE", routing.DefaultRoute, ""))
	// A multi-key Txn.
	tx, err := cli.Txn(context.Background()).Then(
		clientv3.OpPut(prefix+"routes/AT", `{"targets":[{"pool":"eu-west","weight":100}]}`),
		clientv3.OpPut(prefix+"routes/CZ", `{"targets":[{"pool":"eu-west","weight":100}]}`),
	).Commit()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "txn visible", func() bool {
		return seen(tx.Header.Revision, "AT", "eu-west")() && seen(tx.Header.Revision, "CZ", "eu-west")()
	})
	// The unix socket serves the same API, and is mode 0660.
	resp, err := h.unixHTTP.Get("http://regiond/v1/resolve?country=AT&key=k")
	if err != nil {
		t.Fatal(err)
	}
	var ud routing.Decision
	json.NewDecoder(resp.Body).Decode(&ud)
	resp.Body.Close()
	if ud.Pool != "eu-west" {
		t.Fatalf("unix socket resolve AT -> %q, want eu-west", ud.Pool)
	}
	fi, err := os.Stat(filepath.Join(h.dir, "run", "regiond.sock"))
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode = %v (%v), want 0660", fi.Mode().Perm(), err)
	}
	fi, err = os.Stat(filepath.Join(h.dir, "shm", "table.json"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("snapshot mode = %v (%v), want 0644", fi.Mode().Perm(), err)
	}
}

func TestInvalidValueShowsInStatusAndMetrics(t *testing.T) {
	srv, cli := exampleEtcd(t)
	h := startAgent(t, t.TempDir(), srv.Endpoints)
	waitFor(t, "first table", func() bool { _, d := h.resolve("NL", "k"); return d.Pool == "eu-west" })
	if _, err := cli.Put(context.Background(), prefix+"pools/eu-west", `{"host":"","residency":"EU","status":"sleeping"}`); err != nil {
		t.Fatal(err)
	}
	var st api.Status
	waitFor(t, "skipped key in status", func() bool { h.get("/v1/status", &st); return len(st.Skipped) == 1 })
	if st.Skipped[0].Key != "pools/eu-west" || !strings.Contains(st.Skipped[0].Error, "status: must be active, draining or down") {
		t.Fatalf("skipped = %+v", st.Skipped)
	}
	// The last good value keeps serving.
	if _, d := h.resolve("NL", "k"); d.Pool != "eu-west" || d.Host != "edge-ams-1.example.net:443" {
		t.Fatalf("NL -> %+v, want the last good eu-west", d)
	}
	if got := gauge(t, h, "regiond_watch_skipped_keys"); got != 1 {
		t.Fatalf("regiond_watch_skipped_keys = %v, want 1", got)
	}
	if got := gauge(t, h, "regiond_watch_skipped_keys_served_alike"); got != 0 {
		t.Fatalf("regiond_watch_skipped_keys_served_alike = %v, want 0 (a pool is served from its last good value)", got)
	}
	// A health key with a bad value is served alike by every agent (a
	// live instance whatever its value): counted, and counted alike.
	if _, err := cli.Put(context.Background(), prefix+"health/eu-west/ams-1", `not json`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two skipped keys", func() bool { return gauge(t, h, "regiond_watch_skipped_keys") == 2 })
	if got := gauge(t, h, "regiond_watch_skipped_keys_served_alike"); got != 1 {
		t.Fatalf("regiond_watch_skipped_keys_served_alike = %v, want 1 (the health key)", got)
	}
	if problems, err := testutil.GatherAndLint(h.a.Registry()); err != nil || len(problems) > 0 {
		t.Fatalf("metrics lint: %v %v", problems, err)
	}
}

// counter returns the value of an unlabelled counter of the agent's registry.
func counter(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// gauge returns the value of a gauge of the agent's registry.
func gauge(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func TestStatusKeyPublishedAndRevoked(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	rev := loadExample(t, cli)
	h := startAgent(t, t.TempDir(), srv.Endpoints)
	key := "/regiond/v1/agents/node-1"
	var st routing.AgentStatus
	waitFor(t, "agent status key", func() bool {
		resp, err := cli.Get(context.Background(), key)
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		json.Unmarshal(resp.Kvs[0].Value, &st)
		return st.Revision >= rev && st.Connected && resp.Kvs[0].Lease != 0
	})
	if st.Node != "node-1" || st.Epoch != 1 {
		t.Fatalf("status = %+v", st)
	}
	h.stop()
	resp, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatal("agent status key still present after a clean shutdown (lease not revoked)")
	}
}

func TestRefusesNonGetAndForeignHost(t *testing.T) {
	srv, _ := exampleEtcd(t)
	h := startAgent(t, t.TempDir(), srv.Endpoints)
	resp, err := h.http.Post("http://"+h.a.Addr()+"/v1/resolve?country=PL", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST = %d, want 405", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", "http://"+h.a.Addr()+"/v1/status", nil)
	req.Host = "attacker.example.com"
	resp, err = h.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign Host = %d, want 403", resp.StatusCode)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// TestNoRouteCountriesGauge: regiond_table_no_route_countries counts the
// countries the served table gives no eligible pool (their viewers get
// 503): none for the example fleet; with eu-central and eu-west drained,
// as many as resolve NoRoute. regiond_table_pools_out counts the drained
// pools: 0, then 2.
func TestNoRouteCountriesGauge(t *testing.T) {
	h, cli := startExampleAgent(t)
	if g := gauge(t, h, "regiond_table_no_route_countries"); g != 0 {
		t.Fatalf("no_route_countries %v for the example fleet, want 0", g)
	}
	if g := gauge(t, h, "regiond_table_pools_out"); g != 0 {
		t.Fatalf("pools_out %v for the example fleet, want 0", g)
	}
	for _, id := range []string{"eu-central", "eu-west"} {
		if _, err := cli.Put(context.Background(), prefix+"pools/"+id, `{"host":"`+id+`.example.net:443","residency":"eu","status":"draining"}`); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both drains served", func() bool {
		tb := h.a.Mirror().Table()
		a, _ := tb.Pool("eu-central")
		b, _ := tb.Pool("eu-west")
		return a.Status == routing.StatusDraining && b.Status == routing.StatusDraining
	})
	if g := gauge(t, h, "regiond_table_pools_out"); g != 2 {
		t.Fatalf("pools_out %v with eu-central and eu-west drained, want 2", g)
	}
	want := 0
	for _, cc := range append(append([]string(nil), routing.Countries()...), routing.Unknown) {
		if code, _ := h.resolve(cc, "k"); code == http.StatusServiceUnavailable {
			want++
		}
	}
	if want == 0 {
		t.Fatal("no country without a route with eu-central and eu-west drained: the test needs some")
	}
	if g := gauge(t, h, "regiond_table_no_route_countries"); int(g) != want {
		t.Fatalf("no_route_countries %v, want %d (the countries /v1/resolve answers 503)", g, want)
	}
}

// TestBoostsWithoutEligibleTargetGauge: regiond_table_boosts_without_eligible_target
// is 0 for a boost that serves, 1 for a boost of DE (class eu) to us-east
// alone, which residency forbids: DE's viewers stay on its own chain.
func TestBoostsWithoutEligibleTargetGauge(t *testing.T) {
	h, cli := startExampleAgent(t)
	put := func(id, pool string) {
		t.Helper()
		if _, err := cli.Put(context.Background(), prefix+"overrides/"+id, `{"route":"DE","targets":[{"pool":"`+pool+`","weight":100}]}`); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "boost "+id+" served", func() bool { return h.a.Mirror().Table().Overrides()[id] != nil })
	}
	put("good", "eu-west")
	if g := gauge(t, h, "regiond_table_boosts_without_eligible_target"); g != 0 {
		t.Fatalf("boosts_without_eligible_target %v for a boost of DE to eu-west, want 0", g)
	}
	put("us", "us-east")
	if code, d := h.resolve("DE", "k"); code != http.StatusOK || !strings.HasPrefix(d.Pool, "eu-") || d.FallbackDepth == 0 {
		t.Fatalf("DE under a boost to us-east: %d %+v, want an EU pool down the fallback chain", code, d)
	}
	if g := gauge(t, h, "regiond_table_boosts_without_eligible_target"); g != 1 {
		t.Fatalf("boosts_without_eligible_target %v with DE boosted to us-east, want 1", g)
	}
}

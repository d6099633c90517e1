package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/ui"
	"github.com/regiond/regiond/routing"
)

// exampleTable compiles the example fleet in memory at revision 7, with
// the extra routing values of extra (key relative to routing/) put over
// it, its health clock started an hour ago with a one-second grace.
func exampleTable(t *testing.T, extra map[string]string) *routing.Table {
	t.Helper()
	vals, err := fleettest.Config(t).Values()
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{routing.EpochKey: "3"}
	for k, v := range vals {
		all[k] = string(v)
	}
	for k, v := range extra {
		all[k] = v
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var kvs []routing.KV
	for _, k := range keys {
		kvs = append(kvs, routing.KV{Key: k, Value: []byte(all[k]), ModRevision: 7})
	}
	now := time.Now()
	return routing.Compile(7, kvs, nil, routing.CompileOptions{Now: now, Start: now.Add(-time.Hour), Grace: time.Second})
}

// serve answers a GET of path from h.
func serve(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil))
	return rec
}

// TestGapsSecurityHeaders protects the headers every answer of the page
// carries besides its CSP's origin rules: nosniff (a JSON answer holding
// a pool's or reason's markup is never sniffed as HTML), no-store (an
// upgraded agent's page is not served from a cache, and no answer is
// kept), no-referrer, and a CSP that forbids framing and inline script.
func TestGapsSecurityHeaders(t *testing.T) {
	tb := exampleTable(t, nil)
	h := ui.New(ui.Config{Table: func() *routing.Table { return tb }})
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/api/pools", "/ui/api/nope"} {
		hd := serve(h, path).Header()
		for k, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"} {
			if got := hd.Get(k); got != want {
				t.Errorf("GET %s: %s %q, want %q", path, k, got, want)
			}
		}
		csp := hd.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self';") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q; want frame-ancestors 'none' and script from the agent only", path, csp)
		}
	}
}

// TestGapsUnknownAPIEndpoint protects the JSON 404 of a path under
// /ui/api/ that is no endpoint: it names the endpoints there are (the
// file server's plain-text 404 would not, and would not be JSON).
func TestGapsUnknownAPIEndpoint(t *testing.T) {
	h := ui.New(ui.Config{})
	rec := serve(h, "/ui/api/nodes")
	var body struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusNotFound ||
		rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(body.Error, "api/node, api/boosts, api/fleet, api/pools, api/whatif") {
		t.Errorf("GET /ui/api/nodes: %d %q %s (%v); want a JSON 404 naming the endpoints", rec.Code, rec.Header().Get("Content-Type"), rec.Body, err)
	}
}

// TestGapsWithoutEtcdClient protects the page's endpoints while the agent
// has no etcd client (it serves its snapshot file): the boosts are listed
// with the time their expires_at leaves and an error saying why the
// leases' is unknown, and the fleet is a JSON 503 saying why, not a
// panic on the nil client.
func TestGapsWithoutEtcdClient(t *testing.T) {
	end := time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)
	tb := exampleTable(t, map[string]string{
		routing.OverrideKey("kr-end"):  `{"route":"KR","targets":[{"pool":"kr-music","weight":100}],"expires_at":"` + end + `"}`,
		routing.OverrideKey("kr-none"): `{"route":"KR","attrs":{"a":"b"}}`,
	})
	if len(tb.Overrides()) != 2 {
		t.Fatalf("the table's overrides %v, want kr-end and kr-none", tb.Overrides())
	}
	h := ui.New(ui.Config{Table: func() *routing.Table { return tb }, Client: func() *clientv3.Client { return nil }})
	rec := serve(h, "/ui/api/boosts")
	var boosts struct {
		Boosts []struct {
			ID, Lease string
			TTL       *int64 `json:"ttl_seconds"`
		}
		Error string
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &boosts); err != nil || rec.Code != 200 || len(boosts.Boosts) != 2 {
		t.Fatalf("boosts without an etcd client: %d %s (%v)", rec.Code, rec.Body, err)
	}
	if !strings.Contains(boosts.Error, "no etcd client") {
		t.Errorf("boosts error %q; want it to say the agent has no etcd client", boosts.Error)
	}
	if b := boosts.Boosts[0]; b.ID != "kr-end" || b.TTL == nil || *b.TTL < 590 || *b.TTL > 600 || b.Lease != "" {
		t.Errorf("kr-end: %+v; want the 10 minutes of its expires_at, no lease", b)
	}
	if b := boosts.Boosts[1]; b.ID != "kr-none" || b.TTL != nil {
		t.Errorf("kr-none: %+v; want no time left (no lease known, no expires_at)", b)
	}
	rec = serve(h, "/ui/api/fleet")
	var fleet struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &fleet); err != nil || rec.Code != http.StatusServiceUnavailable || !strings.Contains(fleet.Error, "no etcd client") {
		t.Errorf("fleet without an etcd client: %d %s (%v); want a JSON 503 saying so", rec.Code, rec.Body, err)
	}
}

// TestGapsPoolsUnhealthyDrainedAndRevision protects what /ui/api/pools
// says of a pool beyond TestPoolsEndpoint's healthy ones: a pool with
// health_check and no live health key past its grace is unhealthy, a
// drained one is draining, and the answer names the table's revision.
func TestGapsPoolsUnhealthyDrainedAndRevision(t *testing.T) {
	tb := exampleTable(t, map[string]string{
		routing.PoolKey("hc-empty"):   `{"host":"edge-hc.example.net:443","residency":"eu","health_check":true}`,
		routing.PoolKey("eu-central"): `{"host":"edge-fra.example.net:443","residency":"eu","status":"draining"}`,
	})
	h := ui.New(ui.Config{Table: func() *routing.Table { return tb }})
	rec := serve(h, "/ui/api/pools")
	var body struct {
		Revision int64
		Pools    []struct {
			ID, Status string
			Healthy    bool
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
		t.Fatalf("pools: %d %s (%v)", rec.Code, rec.Body, err)
	}
	if body.Revision != 7 {
		t.Errorf("pools at revision %d, the table's 7", body.Revision)
	}
	got := map[string]string{}
	for _, p := range body.Pools {
		got[p.ID] = p.Status + map[bool]string{true: " healthy", false: " unhealthy"}[p.Healthy]
	}
	for id, want := range map[string]string{"hc-empty": "active unhealthy", "eu-central": "draining healthy", "eu-west": "active healthy"} {
		if got[id] != want {
			t.Errorf("pool %s: %q, want %q", id, got[id], want)
		}
	}
}

// TestGapsWhatIfNamesTableRevisionAndEpoch protects the revision and
// epoch a what-if answer names: the table's it resolved (the page's
// summary says "table rN").
func TestGapsWhatIfNamesTableRevisionAndEpoch(t *testing.T) {
	tb := exampleTable(t, nil)
	h := ui.New(ui.Config{Table: func() *routing.Table { return tb }})
	rec := serve(h, "/ui/api/whatif?down=eu-west")
	var body struct{ Revision, Epoch int64 }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
		t.Fatalf("whatif: %d %s (%v)", rec.Code, rec.Body, err)
	}
	if body.Revision != 7 || body.Epoch != 3 || tb.Epoch() != 3 {
		t.Errorf("whatif names revision %d epoch %d; the table's are %d and %d (want 7 and 3)", body.Revision, body.Epoch, tb.Revision(), tb.Epoch())
	}
}

// TestGapsNodeChangeRevisionNotRevision protects /ui/api/node's
// table_change_revision: the revision of the table's newest change, not
// the revision progress notifications move it to (with that, the page
// would mark a snapshot file holding the table as behind it).
func TestGapsNodeChangeRevisionNotRevision(t *testing.T) {
	n := startNode(t, func(cfg *agent.Config, _ *devetcd.Server) { cfg.ProgressInterval = 100 * time.Millisecond })
	// A write outside routing/ moves etcd's revision, not the table.
	resp, err := devetcd.NewTestClient(t, n.etcd).Put(context.Background(), "/elsewhere/key", "x")
	if err != nil {
		t.Fatal(err)
	}
	tb := n.waitTable(t, func(tb *routing.Table) bool { return tb.Revision() >= resp.Header.Revision })
	if tb.ChangeRevision() >= tb.Revision() {
		t.Fatalf("the table's change revision %d, revision %d: want the progress notification to have moved the revision only", tb.ChangeRevision(), tb.Revision())
	}
	var body struct {
		TableChangeRevision int64 `json:"table_change_revision"`
	}
	n.getJSON(t, "/ui/api/node", &body)
	if body.TableChangeRevision != tb.ChangeRevision() {
		t.Errorf("table_change_revision %d, want the table's change revision %d (its revision is %d)", body.TableChangeRevision, tb.ChangeRevision(), tb.Revision())
	}
}

// TestGapsBoostWithoutLease protects a boost stored without a lease
// (etcdctl put, or regionctl with no --ttl where allowed): no lease and
// no time left are given for it, and no error, while a leased one beside
// it gets its lease's (the page showed lease 0 "expiring" otherwise).
func TestGapsBoostWithoutLease(t *testing.T) {
	n := startNode(t, nil)
	cli := devetcd.NewTestClient(t, n.etcd)
	ctx := context.Background()
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, root+"routing/overrides/a-leased", `{"route":"KR","targets":[{"pool":"kr-music","weight":100}]}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, root+"routing/overrides/b-bare", `{"route":"JP","targets":[{"pool":"kr-music","weight":100}]}`); err != nil {
		t.Fatal(err)
	}
	n.waitTable(t, func(tb *routing.Table) bool { return len(tb.Overrides()) == 2 })
	var got struct {
		Boosts []struct {
			ID, Lease string
			TTL       *int64 `json:"ttl_seconds"`
		}
		Error string
	}
	n.getJSON(t, "/ui/api/boosts", &got)
	if len(got.Boosts) != 2 || got.Error != "" {
		t.Fatalf("boosts: %+v", got)
	}
	if b := got.Boosts[0]; b.ID != "a-leased" || b.Lease == "" || b.TTL == nil || *b.TTL < 590 {
		t.Errorf("the leased boost %+v; want its lease and about 600 s left", b)
	}
	if b := got.Boosts[1]; b.ID != "b-bare" || b.Lease != "" || b.TTL != nil {
		t.Errorf("the boost without a lease %+v; want no lease and no time left", b)
	}
}

// TestGapsWhatIfHintElevenPools protects the bound of the unknown pool's
// hint: past ten pools it names the first ten and how many more (here,
// eleven pools: ten and "1 more"), not all of them.
func TestGapsWhatIfHintElevenPools(t *testing.T) {
	var kvs []routing.KV
	var ids []string
	for i := range 11 {
		id := fmt.Sprintf("p%02d", i)
		ids = append(ids, id)
		kvs = append(kvs, routing.KV{Key: routing.PoolKey(id), Value: []byte(`{"host":"edge-` + id + `.example.net:443","residency":"eu"}`), ModRevision: 2})
	}
	tb := routing.Compile(2, kvs, nil, routing.CompileOptions{Now: time.Now()})
	h := ui.New(ui.Config{Table: func() *routing.Table { return tb }})
	rec := serve(h, "/ui/api/whatif?down=zzzzzz")
	var body struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`down: no such pool "zzzzzz" (pools: %s and 1 more; regionctl get pools lists them)`, strings.Join(ids[:10], ", "))
	if rec.Code != 400 || body.Error != want {
		t.Errorf("whatif?down=zzzzzz on 11 pools: %d %q, want 400 %q", rec.Code, body.Error, want)
	}
}

// TestGapsWhatIfPoolIDCase protects the exact match of ?down='s ids: a
// pool id in other case names no pool (ids are lower case), and is
// refused with a hint, not resolved with nothing down.
func TestGapsWhatIfPoolIDCase(t *testing.T) {
	tb := exampleTable(t, nil)
	h := ui.New(ui.Config{Table: func() *routing.Table { return tb }})
	rec := serve(h, "/ui/api/whatif?down=EU-WEST")
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `no such pool \"EU-WEST\"; did you mean eu-west`) || !strings.Contains(rec.Body.String(), `"code":"bad_param"`) {
		t.Errorf("whatif?down=EU-WEST: %d %s; want 400 with did you mean eu-west?", rec.Code, rec.Body)
	}
}

// TestGapsFleetEtcdGone protects the fleet endpoint's answer when etcd
// cannot be read for another reason than a refusal (here, nothing
// listens at its endpoint): a 502 saying the fleet could not be read, not
// a 200, nor a 403 "denied".
func TestGapsFleetEtcdGone(t *testing.T) {
	cli := devetcd.NewGoneClient(t)
	h := ui.New(ui.Config{Client: func() *clientv3.Client { return cli }, RequestTimeout: 300 * time.Millisecond})
	rec := serve(h, "/ui/api/fleet")
	var body struct {
		Denied bool
		Error  string
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusBadGateway || body.Denied || !strings.HasPrefix(body.Error, "read the fleet: ") {
		t.Errorf("fleet with etcd gone: %d %s (%v); want a 502 saying the fleet could not be read", rec.Code, rec.Body, err)
	}
}

// TestGapsBoostsSortedByID protects the order of /ui/api/boosts: by id,
// whatever the order of the table's map (twelve boosts, so that a map's
// order passes for sorted by chance once in a great many runs).
func TestGapsBoostsSortedByID(t *testing.T) {
	extra := map[string]string{}
	for i := range 12 {
		extra[routing.OverrideKey(fmt.Sprintf("b%02d", i))] = `{"route":"KR","attrs":{"n":"` + fmt.Sprint(i) + `"}}`
	}
	tb := exampleTable(t, extra)
	h := ui.New(ui.Config{Table: func() *routing.Table { return tb }})
	var body struct{ Boosts []struct{ ID string } }
	if err := json.Unmarshal(serve(h, "/ui/api/boosts").Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range body.Boosts {
		ids = append(ids, b.ID)
	}
	if len(ids) != 12 || !sort.StringsAreSorted(ids) {
		t.Errorf("boosts in the order %v, want the 12 sorted by id", ids)
	}
}

package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/routing"
)

const root = "/regiond/v1/"

// node is an agent serving the example fleet from an embedded etcd.
type node struct {
	etcd *devetcd.Server
	a    *agent.Agent
	http *http.Client
}

// startNode runs etcd with the example fleet and an agent (configured
// further by edit, if not nil) until the test ends, and waits for its
// first table.
func startNode(t *testing.T, edit func(*agent.Config, *devetcd.Server)) *node {
	t.Helper()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	fleettest.Load(t, cli, root+"routing/")
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Node = srv.Endpoints, "ui-test"
	cfg.Socket, cfg.Listen = filepath.Join(dir, "run", "regiond.sock"), "127.0.0.1:0"
	cfg.Snapshot = filepath.Join(dir, "shm", "table.json")
	cfg.Version = "v9.8.7-test"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if edit != nil {
		edit(&cfg, srv)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("agent did not stop within 15s")
		}
	})
	n := &node{etcd: srv, a: a, http: &http.Client{Timeout: 30 * time.Second}}
	n.waitTable(t, func(tb *routing.Table) bool { return !tb.Stale() })
	if cfg.Snapshot != "" {
		n.wait(t, "the snapshot file", func() bool { _, err := os.Stat(cfg.Snapshot); return err == nil })
	}
	return n
}

func (n *node) url(path string) string { return "http://" + n.a.Addr() + path }

// table returns the table the agent serves.
func (n *node) table(t *testing.T) *routing.Table {
	t.Helper()
	m := n.a.Mirror()
	if m == nil || m.Table() == nil {
		t.Fatal("the agent has no table")
	}
	return m.Table()
}

// wait polls cond (bounded) until it holds.
func (n *node) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 800; i++ {
		if cond() {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// waitTable waits until the served table satisfies cond, and returns it.
func (n *node) waitTable(t *testing.T, cond func(*routing.Table) bool) *routing.Table {
	t.Helper()
	var tb *routing.Table
	n.wait(t, "the table", func() bool {
		if m := n.a.Mirror(); m != nil {
			tb = m.Table()
		}
		return tb != nil && cond(tb)
	})
	return tb
}

// get returns the status, headers and body of a request.
func (n *node) get(t *testing.T, method, path, host string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, n.url(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := n.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// The page is served from the binary under the API's rules, and names no
// other origin: everything it loads comes from the agent.
func TestPageServedSelfContained(t *testing.T) {
	n := startNode(t, nil)
	code, hdr, body := n.get(t, http.MethodGet, "/ui/", "")
	if code != 200 || !bytes.Contains(body, []byte(`<script src="app.js"></script>`)) {
		t.Fatalf("GET /ui/: %d\n%s", code, body)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy %q does not keep the page to its origin", csp)
	}
	for _, p := range []string{"/ui/app.js", "/ui/style.css"} {
		if code, _, b := n.get(t, http.MethodGet, p, ""); code != 200 || len(b) < 500 {
			t.Errorf("GET %s: %d, %d bytes", p, code, len(b))
		}
	}
	if code, _, _ := n.get(t, http.MethodPost, "/ui/api/whatif?down=eu-central", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("POST to the page: %d, want 405 (the API is read-only)", code)
	}
	if code, _, _ := n.get(t, http.MethodGet, "/ui/", "regiond.example.com"); code != http.StatusForbidden {
		t.Errorf("GET /ui/ with Host regiond.example.com: %d, want 403 (loopback names only)", code)
	}
	// No URL of another origin in any asset: no CDN, no font, no map tiles.
	urlRE := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(os.DirFS("assets"), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join("assets", p))
		if m := urlRE.Find(b); m != nil {
			t.Errorf("assets/%s names another origin: %s", p, m)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The embedded map names countries only by codes the resolver knows.
func TestMapCountryCodes(t *testing.T) {
	b, err := os.ReadFile("assets/world/world-110m.json")
	if err != nil {
		t.Fatal(err)
	}
	var topo struct {
		Objects struct {
			Countries struct {
				Geometries []struct{ ID, Type string }
			}
		}
	}
	if err := json.Unmarshal(b, &topo); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range topo.Objects.Countries.Geometries {
		if g.ID != "" && (!routing.IsCountry(g.ID) || seen[g.ID]) {
			t.Errorf("map shape %q: not an ISO 3166-1 alpha-2 code of routing, or twice", g.ID)
		}
		seen[g.ID] = true
	}
	for _, cc := range []string{"DE", "PL", "US", "BR", "JP", "KR", "IN", "AU", "FR", "GB"} {
		if !seen[cc] {
			t.Errorf("map has no shape for %s", cc)
		}
	}
	if len(seen) < 170 {
		t.Errorf("map has %d countries, want the 170-odd of Natural Earth's 1:110m", len(seen))
	}
}

// The map's pool colours are told apart: every pair of the palette, the
// no-route red and the no-entry grey are at least ΔE 25 apart in CIELAB
// (CIE76; 2.3 is a just noticeable difference, ~10 reads as another colour
// side by side, and the map puts small countries side by side).
func TestPaletteColorsDiffer(t *testing.T) {
	b, err := os.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	pal := regexp.MustCompile(`(?s)const palette = \[(.*?)\];`).FindSubmatch(b)
	fixed := regexp.MustCompile(`const noRouteColor = '(#[0-9a-f]{6})', noEntryColor = '(#[0-9a-f]{6})'`).FindSubmatch(b)
	if pal == nil || fixed == nil {
		t.Fatal("app.js: no palette, noRouteColor or noEntryColor found")
	}
	colors := regexp.MustCompile(`'(#[0-9a-f]{6})'`).FindAllStringSubmatch(string(pal[1]), -1)
	if len(colors) < 10 {
		t.Fatalf("palette of %d colours, want at least 10 (pools beyond it share colours)", len(colors))
	}
	all := []string{string(fixed[1]), string(fixed[2])}
	for _, c := range colors {
		all = append(all, c[1])
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			if d := deltaE(a, b); d < 25 {
				t.Errorf("colours %s and %s are ΔE %.1f apart, want at least 25", a, b, d)
			}
		}
	}
}

// deltaE is the CIE76 colour difference of two sRGB colours #rrggbb: the
// distance of their CIELAB coordinates (D65 white).
func deltaE(a, b string) float64 {
	x, y := cielab(a), cielab(b)
	return math.Sqrt((x[0]-y[0])*(x[0]-y[0]) + (x[1]-y[1])*(x[1]-y[1]) + (x[2]-y[2])*(x[2]-y[2]))
}

// cielab is the CIELAB L*, a*, b* of an sRGB colour #rrggbb.
func cielab(hex string) [3]float64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	if err != nil {
		panic(err)
	}
	var c [3]float64
	for i, shift := range []uint{16, 8, 0} {
		x := float64(v>>shift&255) / 255
		if x <= 0.04045 {
			c[i] = x / 12.92
		} else {
			c[i] = math.Pow((x+0.055)/1.055, 2.4)
		}
	}
	f := func(t float64) float64 {
		if t > 216.0/24389 {
			return math.Cbrt(t)
		}
		return (24389.0/27*t + 16) / 116
	}
	fx := f((0.4124*c[0] + 0.3576*c[1] + 0.1805*c[2]) / 0.95047)
	fy := f(0.2126*c[0] + 0.7152*c[1] + 0.0722*c[2])
	fz := f((0.0193*c[0] + 0.1192*c[1] + 0.9505*c[2]) / 1.08883)
	return [3]float64{116*fy - 16, 500 * (fx - fy), 200 * (fy - fz)}
}

// The node endpoint names this agent and reads the snapshot file's
// header, and gives the revision of the table's newest change, which the
// page compares the file's with.
func TestNodeEndpoint(t *testing.T) {
	n := startNode(t, nil)
	var body struct {
		Node, Version string
		Snapshot      struct {
			Path, Error string
			Revision    int64
			WrittenAt   string `json:"written_at"`
		}
		TableChangeRevision int64 `json:"table_change_revision"`
	}
	n.getJSON(t, "/ui/api/node", &body)
	at, err := time.Parse(time.RFC3339Nano, body.Snapshot.WrittenAt)
	if body.Node != "ui-test" || body.Version != "v9.8.7-test" || err != nil || time.Since(at) > time.Hour || body.Snapshot.Revision == 0 {
		t.Fatalf("node: %+v (written_at: %v)", body, err)
	}
	if want := n.table(t).ChangeRevision(); body.TableChangeRevision != want || want == 0 {
		t.Errorf("node: table_change_revision %d, the table's ChangeRevision %d", body.TableChangeRevision, want)
	}
}

// The what-if endpoint answers as regionctl resolve --down does (a table
// compiled from etcd's keys with CompileOptions.Down), and refuses pools
// that do not exist.
func TestWhatIf(t *testing.T) {
	n := startNode(t, nil)
	var got struct {
		Down      []string
		Effective map[string]*routing.Effective
		Changed   []string
		NoRoute   []string `json:"no_route"`
	}
	n.getJSON(t, "/ui/api/whatif?down=eu-central&down=eu-west,eu-central", &got)
	cli := devetcd.NewTestClient(t, n.etcd)
	resp, err := cli.Get(context.Background(), root+"routing/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var kvs []routing.KV
	for _, kv := range resp.Kvs {
		kvs = append(kvs, routing.KV{Key: strings.TrimPrefix(string(kv.Key), root+"routing/"), Value: kv.Value, ModRevision: kv.ModRevision})
	}
	want := routing.Compile(resp.Header.Revision, kvs, nil, routing.CompileOptions{Down: []string{"eu-central", "eu-west"}})
	if strings.Join(got.Down, ",") != "eu-central,eu-west" {
		t.Errorf("down %v, want the two pools once each", got.Down)
	}
	var noRoute []string
	for _, cc := range append(routing.Countries(), routing.Unknown) {
		w := want.Effective(cc)
		a, _ := json.Marshal(got.Effective[cc])
		b, _ := json.Marshal(w)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: what-if %s, Compile with Down %s", cc, a, b)
		}
		if len(w.Candidates) == 0 {
			noRoute = append(noRoute, cc)
		}
	}
	if strings.Join(got.NoRoute, ",") != strings.Join(noRoute, ",") || len(noRoute) == 0 {
		t.Errorf("no_route %v, want %v (the EU countries with both EU pools down)", got.NoRoute, noRoute)
	}
	if len(got.Changed) == 0 || !contains(got.Changed, "DE") || contains(got.Changed, "JP") {
		t.Errorf("changed %v: want DE, not JP", got.Changed)
	}
	for q, want := range map[string]string{"down=nope": `no such pool \"nope\"`, "down=": "down names no pool", "": "down names no pool"} {
		code, _, b := n.get(t, http.MethodGet, "/ui/api/whatif?"+q, "")
		if code != 400 || !strings.Contains(string(b), want) {
			t.Errorf("whatif?%s: %d %s, want 400 naming %q", q, code, b, want)
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// The boosts endpoint gives each live boost's lease and time left, which
// the table does not hold: the lease's, or less when the boost's
// expires_at comes first (a lease an election renewed).
func TestBoostsTimeLeft(t *testing.T) {
	n := startNode(t, nil)
	regionctl(t, n, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--reason", "comeback week")
	// A boost whose lease outlives its expires_at by 50 minutes.
	cli := devetcd.NewTestClient(t, n.etcd)
	lease, err := cli.Grant(context.Background(), 3600)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)
	if _, err := cli.Put(context.Background(), root+"routing/overrides/jp", `{"route":"JP","targets":[{"pool":"kr-music","weight":100}],"expires_at":"`+end+`"}`,
		clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	tb := n.waitTable(t, func(tb *routing.Table) bool { return len(tb.Overrides()) == 2 })
	var got struct {
		Revision int64
		Boosts   []struct {
			ID, Route, Reason, Lease string
			ExpiresAt                string `json:"expires_at"`
			TTL                      *int64 `json:"ttl_seconds"`
			Granted                  int64  `json:"granted_ttl_seconds"`
		}
		Error string
	}
	n.getJSON(t, "/ui/api/boosts", &got)
	if len(got.Boosts) != 2 || got.Error != "" || got.Revision < tb.Revision() {
		t.Fatalf("boosts: %+v", got)
	}
	b, jp := got.Boosts[0], got.Boosts[1] // by id: KR-… before jp
	if _, ok := tb.Overrides()[b.ID]; !ok || b.Route != "KR" || b.Reason != "comeback week" || b.Lease == "" || b.ExpiresAt == "" {
		t.Errorf("boost %+v does not match the table's %v", b, tb.Overrides())
	}
	if b.TTL == nil || *b.TTL <= 3500 || *b.TTL > 3600 || b.Granted != 3600 {
		t.Errorf("boost time left %v of %d s, want just under an hour of 3600", b.TTL, b.Granted)
	}
	if jp.ID != "jp" || jp.ExpiresAt != end || jp.TTL == nil || *jp.TTL > 600 || *jp.TTL < 500 || jp.Granted != 3600 {
		t.Errorf("boost %+v (time left %v): want its expires_at's 10 minutes, not its lease's hour", jp, jp.TTL)
	}
}

// Under a least-privilege role (read on routing/, write on agents/), the
// agent may not read agents/: the fleet endpoint says so, and the rest of
// the page works.
func TestFleetDeniedUnderLeastPrivilege(t *testing.T) {
	n := startNode(t, func(cfg *agent.Config, srv *devetcd.Server) {
		leastPrivilege(t, srv)
		cfg.Username, cfg.Password = "agent", "agent-secret"
	})
	code, _, b := n.get(t, http.MethodGet, "/ui/api/fleet", "")
	var body struct {
		Denied bool
		Error  string
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusForbidden || !body.Denied || !strings.Contains(body.Error, root+"agents/") || !strings.Contains(body.Error, "for user agent ") {
		t.Fatalf("fleet under least privilege: %d %s; want 403, denied, naming the user agent and %sagents/", code, b, root)
	}
	if code, _, b := n.get(t, http.MethodGet, "/ui/api/whatif?down=eu-central", ""); code != 200 {
		t.Errorf("what-if under least privilege: %d %s", code, b)
	}
}

// leastPrivilege turns on auth with user agent allowed to read routing/
// and write agents/ only (and root for the test's own writes).
func leastPrivilege(t *testing.T, srv *devetcd.Server) {
	t.Helper()
	cli := devetcd.NewTestClient(t, srv)
	ctx := context.Background()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-secret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "agent"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "agent", root+"routing/", clientv3.GetPrefixRangeEnd(root+"routing/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "agent", root+"agents/", clientv3.GetPrefixRangeEnd(root+"agents/"), clientv3.PermissionType(clientv3.PermWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "agent", "agent-secret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "agent", "agent"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("least-privilege auth, step %d: %v", i, err)
		}
	}
}

// The page's JSON escapes DEL and the C1 controls as the API's does
// (\u009b, not the raw character), so a boost's reason or attrs holding
// one does not reach the terminal of whoever curls /ui/api/ (they were
// written raw: the page's endpoints skipped the API's escaper).
func TestPageJSONEscapesControls(t *testing.T) {
	n := startNode(t, nil)
	if _, err := devetcd.NewTestClient(t, n.etcd).Put(context.Background(), root+"routing/overrides/pl-ctl",
		"{\"route\":\"PL\",\"targets\":[{\"pool\":\"eu-west\",\"weight\":100}],\"attrs\":{\"flag.c1\":\"\u009b31m\"},\"reason\":\"csi \u009b2J del \x7f\"}"); err != nil {
		t.Fatal(err)
	}
	n.waitTable(t, func(tb *routing.Table) bool { return len(tb.Overrides()) == 1 })
	for _, path := range []string{"/ui/api/boosts", "/ui/api/whatif?down=eu-central"} {
		code, _, b := n.get(t, http.MethodGet, path, "")
		if code != 200 || !bytes.Contains(b, []byte(`\u009b31m`)) {
			t.Errorf("GET %s: %d, want the C1 control escaped as \\u009b: %.300s", path, code, b)
		}
		if i := bytes.IndexFunc(b, func(r rune) bool { return r == 0x7f || r >= 0x80 && r <= 0x9f }); i >= 0 {
			t.Errorf("GET %s writes a raw control character at byte %d: %q", path, i, b[max(0, i-20):min(len(b), i+20)])
		}
	}
	if _, _, b := n.get(t, http.MethodGet, "/ui/api/boosts", ""); !bytes.Contains(b, []byte(`csi \u009b2J del \u007f`)) {
		t.Errorf("boosts: the reason's controls not escaped as \\u009b and \\u007f: %s", b)
	}
}

// A what-if naming no pool answers as regionctl does: the pools near the
// name, else the first ten and how many more, not every pool of the
// table (2,013 pools made a 16 KB answer).
func TestWhatIfUnknownPoolHint(t *testing.T) {
	n := startNode(t, nil)
	cli := devetcd.NewTestClient(t, n.etcd)
	var last int64
	for i := range 40 {
		resp, err := cli.Put(context.Background(), fmt.Sprintf("%srouting/pools/zz-extra-%02d", root, i),
			fmt.Sprintf(`{"host":"edge-extra-%02d.example.net:443","residency":"eu"}`, i))
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}
	tb := n.waitTable(t, func(tb *routing.Table) bool { return tb.Revision() >= last }) // every pool in
	var body struct{ Error string }
	code, _, b := n.get(t, http.MethodGet, "/ui/api/whatif?down=nope", "")
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	ids := tb.PoolIDs()
	want := fmt.Sprintf(`down: no such pool "nope" (pools: %s and %d more; regionctl get pools lists them)`, strings.Join(ids[:10], ", "), len(ids)-10)
	if code != 400 || body.Error != want {
		t.Errorf("whatif?down=nope: %d %q, want 400 %q", code, body.Error, want)
	}
	code, _, b = n.get(t, http.MethodGet, "/ui/api/whatif?down=EU-Westt", "")
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	if want := `down: no such pool "EU-Westt"; did you mean eu-west?`; code != 400 || body.Error != want {
		t.Errorf("whatif?down=EU-Westt: %d %q, want 400 %q", code, body.Error, want)
	}
}

// The pools endpoint lists every pool of the table with its status,
// health and the count of its live health keys, which the table JSON
// does not give.
func TestPoolsEndpoint(t *testing.T) {
	n := startNode(t, nil)
	cli := devetcd.NewTestClient(t, n.etcd)
	puts := map[string]string{
		"pools/hc-pool":    `{"host":"edge-hc-1.example.net:443","residency":"eu","health_check":true}`,
		"health/hc-pool/a": `{"addr":"10.0.0.1:443"}`,
		"health/hc-pool/b": `{"addr":"10.0.0.2:443"}`,
	}
	for k, v := range puts {
		if _, err := cli.Put(context.Background(), root+"routing/"+k, v); err != nil {
			t.Fatal(err)
		}
	}
	tb := n.waitTable(t, func(tb *routing.Table) bool { p, ok := tb.Pool("hc-pool"); return ok && p.Instances == 2 })
	var body struct {
		Revision int64
		Pools    []struct {
			ID, Status, Host string
			HealthCheck      bool `json:"health_check"`
			Healthy          bool
			Instances        int
		}
	}
	n.getJSON(t, "/ui/api/pools", &body)
	var ids []string
	for _, p := range body.Pools {
		ids = append(ids, p.ID)
		if p.ID == "hc-pool" && (p.Status != "active" || !p.HealthCheck || !p.Healthy || p.Instances != 2 || p.Host != "edge-hc-1.example.net:443") {
			t.Errorf("hc-pool: %+v; want active, health_check, healthy, 2 live instances", p)
		}
		if p.ID == "eu-west" && (p.HealthCheck || p.Instances != 0 || !p.Healthy) {
			t.Errorf("eu-west: %+v; want no health_check, healthy, no instances", p)
		}
	}
	if strings.Join(ids, ",") != strings.Join(tb.PoolIDs(), ",") || body.Revision < tb.Revision() {
		t.Errorf("pools %v at revision %d; the table's %v at %d", ids, body.Revision, tb.PoolIDs(), tb.Revision())
	}
}

package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// These tests close gaps the mutation review of internal/api found: each
// fails with a small change of api.go or etag.go that every other test of
// the package let pass. They need no etcd: the API over a fixed source.

// fixedSource is a Source whose table and status the test sets; its
// swaps wake no one (Changed is nil).
type fixedSource struct {
	t       atomic.Pointer[routing.Table]
	st      atomic.Pointer[watch.Status]
	etcdErr string
}

func (f *fixedSource) Table() *routing.Table     { return f.t.Load() }
func (f *fixedSource) Status() watch.Status      { return *f.st.Load() }
func (f *fixedSource) Changed() <-chan struct{}  { return nil }
func (f *fixedSource) EtcdError() string         { return f.etcdErr }
func (f *fixedSource) StatusError() string       { return "" }
func (f *fixedSource) SnapshotError() string     { return "" }
func (f *fixedSource) setStatus(st watch.Status) { f.st.Store(&st) }

// exampleKVs is examples/routing.yaml as key/values at revision 1, plus
// extra (key, value, …).
func exampleKVs(t *testing.T, extra ...string) []routing.KV {
	t.Helper()
	vals, err := fleettest.Config(t).Values()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		vals[extra[i]] = []byte(extra[i+1])
	}
	kvs := make([]routing.KV, 0, len(vals))
	for k, v := range vals {
		kvs = append(kvs, routing.KV{Key: k, Value: v, ModRevision: 1})
	}
	return kvs
}

// fixedAPI serves the API (loopback TCP rules) over a fixed source holding
// tbl, synced now and connected.
func fixedAPI(t *testing.T, cfg Config, tbl *routing.Table) (*fixedSource, *Server, string) {
	t.Helper()
	src := &fixedSource{}
	src.t.Store(tbl)
	st := watch.Status{Connected: true, SyncedAt: time.Now(), Synced: true}
	if tbl != nil {
		st.Revision, st.Epoch = tbl.Revision(), tbl.Epoch()
	}
	src.setStatus(st)
	reg := prometheus.NewRegistry()
	cfg.Node, cfg.Registerer, cfg.Gatherer, cfg.Logger = "node-1", reg, reg, quiet()
	s := New(cfg, src)
	ts := httptest.NewServer(s.Handler(true))
	t.Cleanup(ts.Close)
	return src, s, ts.URL
}

// fetch sends method url (headers hv: name, value, …) and reads the answer.
func fetch(t *testing.T, method, url string, hv ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hv); i += 2 {
		req.Header.Set(hv[i], hv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

// TestResolveKeepsTheKeyAndTheReasons: the key makes the pick sticky
// (the API's decision is the table's for that key, request after
// request), explain=true explains as explain=1 does, and a NoRoute lists
// its reasons (docs/resolution.md, Decision; docs/agent.md).
func TestResolveKeepsTheKeyAndTheReasons(t *testing.T) {
	tbl := routing.Compile(7, exampleKVs(t), nil, routing.CompileOptions{Now: time.Now()})
	_, s, url := fixedAPI(t, Config{}, tbl)

	// PL is eu-central 70, eu-west 30: a dropped key would pick at random.
	for i := 0; i < 24; i++ {
		key := fmt.Sprintf("viewer-%d", i)
		want, err := tbl.Resolve("PL", key, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			a := fetch(t, "GET", url+"/v1/resolve?country=PL&key="+key)
			var d routing.Decision
			a.decode(t, &d)
			if a.code != 200 || d.Pool != want.Pool {
				t.Fatalf("PL key %s: %s; want the sticky pick %s every time", key, a, want.Pool)
			}
		}
	}

	for _, v := range []string{"1", "true"} {
		a := fetch(t, "GET", url+"/v1/resolve?country=PL&key=k&explain="+v)
		var body map[string]json.RawMessage
		a.decode(t, &body)
		if _, ok := body["routes"]; a.code != 200 || !ok {
			t.Errorf("explain=%s: %s; want 200 and the Explanation", v, a)
		}
	}

	// The unknown country (class eu) served by _default passes us-east
	// over: a degraded decision, counted as such.
	if a := fetch(t, "GET", url+"/v1/resolve?country=XX&key=k"); a.code != 200 || !strings.Contains(string(a.body), `"residency-blocked:us-east"`) {
		t.Fatalf("XX: %s; want 200 degraded residency-blocked:us-east", a)
	}
	if n := testutil.ToFloat64(s.resolves.WithLabelValues("degraded")); n != 1 {
		t.Errorf("resolves_total{outcome=degraded} = %v after one degraded decision; want 1", n)
	}

	// Every EU pool drained: DE gets NoRoute, with the reasons.
	drained := routing.Compile(8, exampleKVs(t,
		"pools/eu-central", `{"host":"edge-fra-1.example.net:443","residency":"eu","status":"draining"}`,
		"pools/eu-west", `{"host":"edge-ams-1.example.net:443","residency":"eu","status":"draining"}`,
		"pools/eu-north", `{"host":"edge-sto-1.example.net:443","residency":"eu","status":"draining"}`,
	), nil, routing.CompileOptions{Now: time.Now()})
	_, _, url = fixedAPI(t, Config{}, drained)
	want, err := drained.Resolve("DE", "k", time.Now())
	if err != routing.ErrNoRoute || len(want.Degraded) == 0 {
		t.Fatalf("DE with the EU pools drained: %+v, %v; want NoRoute with reasons", want, err)
	}
	a := fetch(t, "GET", url+"/v1/resolve?country=DE&key=k")
	var nr errorBody
	a.decode(t, &nr)
	if a.code != 503 || nr.Code != CodeNoRoute || strings.Join(nr.Reasons, " ") != strings.Join(want.Degraded, " ") {
		t.Fatalf("DE with the EU pools drained: %s; want 503 no_route with reasons %q", a, want.Degraded)
	}
}

// TestBadWaitsAndRevisionsAreRefused: docs/agent.md's bad_param values of
// the blocking query: a negative min_revision, a wait above 5m
// (wait=10m, the docs' own example) or below 0. And wait=0s does not
// wait, so it takes no place among the waiting: with the cap's places
// taken it is still answered (timeout), not refused with 429.
func TestBadWaitsAndRevisionsAreRefused(t *testing.T) {
	tbl := routing.Compile(7, exampleKVs(t), nil, routing.CompileOptions{Now: time.Now()})
	_, s, url := fixedAPI(t, Config{MaxWaiting: 2}, tbl) // over TCP: 1
	for _, q := range []string{"min_revision=-1", "min_revision=1&wait=10m", "min_revision=1&wait=5m1s", "min_revision=1&wait=-1s"} {
		for _, p := range []string{"/v1/resolve?country=PL&", "/v1/table?"} {
			a := fetch(t, "GET", url+p+q)
			var e errorBody
			a.decode(t, &e)
			if a.code != 400 || e.Code != CodeBadParam {
				t.Errorf("GET %s%s: %s; want 400 bad_param", p, q, a)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/table?min_revision=999999&wait=1m", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitWaiting(t, s, 1)
	a := fetch(t, "GET", url+"/v1/resolve?country=PL&min_revision=999999&wait=0s")
	if a.code != 200 || a.hd.Get(HeaderWait) != WaitTimeout {
		t.Errorf("wait=0s with the cap's place taken: %s %s %q; want 200, timeout", a, HeaderWait, a.hd.Get(HeaderWait))
	}
	cancel()
	<-done
}

// snapshotCopy is tbl as the agent reads it back from its snapshot file
// at start: the same table, stale (not confirmed against etcd).
func snapshotCopy(t *testing.T, tbl *routing.Table) *routing.Table {
	t.Helper()
	b, err := tbl.JSON(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	loaded, _, err := routing.LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return loaded
}

// TestReadinessAndStatus: /readyz is 200 only for a table confirmed
// against etcd within --max-stale that has pools, and says which of
// those it is not; /v1/status reports stale_seconds -1 and synced_at ""
// when never synced, skipped as [] (not null), stale, and the watch's
// refusal in etcd_error (docs/agent.md).
func TestReadinessAndStatus(t *testing.T) {
	tbl := routing.Compile(7, exampleKVs(t), nil, routing.CompileOptions{Now: time.Now()})
	src, _, url := fixedAPI(t, Config{MaxStale: time.Minute}, tbl)
	ready := func() (int, string) {
		a := fetch(t, "GET", url+"/readyz")
		return a.code, string(a.body)
	}
	if code, body := ready(); code != 200 {
		t.Fatalf("/readyz synced now: %d %q; want 200", code, body)
	}
	src.setStatus(watch.Status{Revision: 7, Synced: true, SyncedAt: time.Now().Add(-2 * time.Minute)})
	if code, body := ready(); code != 503 || !strings.Contains(body, "older than --max-stale") {
		t.Errorf("/readyz confirmed 2m ago, --max-stale 1m: %d %q; want 503 naming --max-stale", code, body)
	}
	src.setStatus(watch.Status{Revision: 7}) // a snapshot's table, never confirmed
	if code, body := ready(); code != 503 {
		t.Errorf("/readyz never confirmed: %d %q; want 503", code, body)
	}
	var st Status
	a := fetch(t, "GET", url+"/v1/status")
	a.decode(t, &st)
	if st.StaleSeconds != -1 || st.SyncedAt != "" || !strings.Contains(string(a.body), `"skipped":[]`) {
		t.Errorf("/v1/status never confirmed: %s; want stale_seconds -1, synced_at \"\", skipped []", a)
	}
	// The snapshot file's table, stale, with the watch refused.
	src.t.Store(snapshotCopy(t, tbl))
	src.setStatus(watch.Status{Revision: 7, Refused: "etcd refuses user agent the prefix"})
	a = fetch(t, "GET", url+"/v1/status")
	st = Status{}
	a.decode(t, &st)
	if !st.Stale || st.EtcdError != "etcd refuses user agent the prefix" {
		t.Errorf("/v1/status of a snapshot's table, the watch refused: %s; want stale and the refusal in etcd_error", a)
	}
	// Synced, but no pools: not ready, and saying so.
	empty := routing.Compile(9, nil, nil, routing.CompileOptions{Now: time.Now()})
	src.t.Store(empty)
	src.setStatus(watch.Status{Revision: 9, Synced: true, SyncedAt: time.Now()})
	if code, body := ready(); code != 503 || !strings.Contains(body, "has no pools") {
		t.Errorf("/readyz synced without pools: %d %q; want 503 saying there are no pools", code, body)
	}
	// Stale and with pools: not the no-pools message.
	src.t.Store(tbl)
	src.setStatus(watch.Status{Revision: 7, Synced: true, SyncedAt: time.Now().Add(-2 * time.Minute)})
	if code, body := ready(); code != 503 || strings.Contains(body, "no pools") {
		t.Errorf("/readyz stale with pools: %d %q; want 503 about --max-stale, not about pools", code, body)
	}
}

// TestHTTPRules: HEAD is served as GET is; a chunked body is refused as an
// announced one is (400 body_not_allowed); every answer carries
// Cache-Control: no-store; a handler mounted on a subtree (the status
// page's /ui/) is reached at its own path, which is clean.
func TestHTTPRules(t *testing.T) {
	tbl := routing.Compile(7, exampleKVs(t), nil, routing.CompileOptions{Now: time.Now()})
	src := &fixedSource{}
	src.t.Store(tbl)
	src.setStatus(watch.Status{Connected: true, Synced: true, SyncedAt: time.Now()})
	s := New(Config{Node: "node-1", Logger: quiet()}, src)
	s.Handle("/ui/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "status page") }))
	ts := httptest.NewServer(s.Handler(true))
	t.Cleanup(ts.Close)

	for _, p := range []string{"/v1/resolve?country=PL&key=k", "/v1/table", "/v1/status", "/healthz"} {
		if a := fetch(t, "HEAD", ts.URL+p); a.code != 200 || a.hd.Get("Cache-Control") != "no-store" {
			t.Errorf("HEAD %s: HTTP %d Cache-Control %q; want 200, no-store", p, a.code, a.hd.Get("Cache-Control"))
		}
		if a := fetch(t, "GET", ts.URL+p); a.code != 200 || a.hd.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: HTTP %d Cache-Control %q; want 200, no-store", p, a.code, a.hd.Get("Cache-Control"))
		}
	}
	if a := fetch(t, "GET", ts.URL+"/ui/"); a.code != 200 || string(a.body) != "status page" {
		t.Errorf("GET /ui/: %s; want the handler mounted there", a)
	}

	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	raw, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(raw), "HTTP/1.1 400 ") || !strings.Contains(string(raw), `"code":"body_not_allowed"`) {
		t.Errorf("a chunked body: %q; want 400 body_not_allowed", raw)
	}
}

// TestETagIsOfTheTableServedNow: the ETag names the answers served at
// now: a boost that reached its expires_at changes it at once, before the
// mirror swaps in the table rebuilt without it (here it never does), and
// a /v1/table waiting on If-None-Match wakes for it by the clock alone
// (tableFor: "this does not depend on" the swap). And two tables that
// differ in their epoch alone (regionctl apply of the same config) have
// different ETags: a Decision carries its epoch.
func TestETagIsOfTheTableServedNow(t *testing.T) {
	expires := time.Now().Add(5 * time.Second).UTC().Format(time.RFC3339Nano)
	tbl := routing.Compile(7, exampleKVs(t, "overrides/pl-west",
		`{"route":"PL","targets":[{"pool":"eu-west","weight":100}],"attrs":{"banner":"boost"},"expires_at":"`+expires+`"}`),
		nil, routing.CompileOptions{Now: time.Now()})
	_, _, url := fixedAPI(t, Config{}, tbl)
	before := fetch(t, "GET", url+"/v1/resolve?country=PL&key=k")
	if before.code != 200 || !strings.Contains(string(before.body), `"banner":"boost"`) {
		t.Fatalf("PL under the boost: %s (a slow machine?)", before)
	}
	tag := before.hd.Get("ETag")
	changed := fetch(t, "GET", url+"/v1/table?wait=30s", "If-None-Match", tag)
	if changed.code != 200 || changed.hd.Get(HeaderWait) != WaitMet || changed.hd.Get("ETag") == tag {
		t.Errorf("/v1/table waiting on the boost's ETag: HTTP %d %s %q ETag %q; want 200, met, a new ETag at the boost's end",
			changed.code, HeaderWait, changed.hd.Get(HeaderWait), changed.hd.Get("ETag"))
	}
	after := fetch(t, "GET", url+"/v1/resolve?country=PL&key=k")
	if strings.Contains(string(after.body), `"banner":"boost"`) || after.hd.Get("ETag") == tag {
		t.Errorf("PL after the boost's end: %s ETag %q; want no banner and an ETag other than %q", after, after.hd.Get("ETag"), tag)
	}

	now := time.Now()
	e1 := routing.Compile(7, exampleKVs(t, "epoch", "1"), nil, routing.CompileOptions{Now: now})
	e2 := routing.Compile(7, exampleKVs(t, "epoch", "2"), nil, routing.CompileOptions{Now: now})
	if t1, t2 := (&etagCache{}).of(e1, now).tag, (&etagCache{}).of(e2, now).tag; t1 == t2 {
		t.Errorf("tables of epochs 1 and 2, the same content otherwise: both ETag %s; want different ETags", t1)
	}
}

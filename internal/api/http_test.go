package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/stallclient"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

const prefix = "/regiond/v1/routing/"

// mirrorSource is the API's Source over a mirror, as the agent's is
// once it has reached etcd.
type mirrorSource struct{ *watch.Mirror }

func (mirrorSource) EtcdError() string     { return "" }
func (mirrorSource) StatusError() string   { return "" }
func (mirrorSource) SnapshotError() string { return "" }

// apiHarness is the real handler (loopback TCP rules) over a mirror of a
// real etcd holding the example fleet.
type apiHarness struct {
	t   *testing.T
	s   *Server
	m   *watch.Mirror
	cli *clientv3.Client
	url string
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startAPI starts etcd with the example fleet, a mirror of it (run
// unless noRun: a mirror never run serves no table) and the API over it.
func startAPI(t *testing.T, cfg Config, noRun bool) *apiHarness {
	t.Helper()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	fleettest.Load(t, cli, prefix)
	m, err := watch.New(watch.Config{Client: cli, Prefix: prefix, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if !noRun {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		if err := m.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	cfg.Node, cfg.Registerer, cfg.Gatherer, cfg.Logger = "node-1", reg, reg, quiet()
	s := New(cfg, mirrorSource{m})
	ts := httptest.NewUnstartedServer(s.Handler(true))
	ts.Config.WriteTimeout = s.WriteTimeout() // as the agent's servers do
	ts.Start()
	t.Cleanup(ts.Close)
	return &apiHarness{t: t, s: s, m: m, cli: cli, url: ts.URL}
}

// answer is an HTTP answer read whole.
type answer struct {
	code int
	hd   http.Header
	body []byte
}

func (a answer) String() string {
	return fmt.Sprintf("HTTP %d %s", a.code, strings.TrimSpace(string(a.body)))
}

// decode decodes the body into v, failing the test if it is not JSON.
func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("%s: not JSON: %v", a, err)
	}
}

// get sends GET path (with its raw query, as given) with the headers hv
// (name, value, …).
func (h *apiHarness) get(path string, hv ...string) answer {
	h.t.Helper()
	return h.do(context.Background(), "GET", path, hv...)
}

func (h *apiHarness) do(ctx context.Context, method, path string, hv ...string) answer {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, h.url, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	setRawPath(req, path)
	for i := 0; i+1 < len(hv); i += 2 {
		req.Header.Set(hv[i], hv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

// setRawPath makes req ask for path (with its raw query) exactly as
// given, not cleaned; one beginning with // in absolute form, so that it
// is not taken for a host.
func setRawPath(req *http.Request, path string) {
	p, q, _ := strings.Cut(path, "?")
	if strings.HasPrefix(p, "//") {
		p = "//" + req.URL.Host + p
	}
	req.URL.Opaque, req.URL.RawQuery = p, q
}

// put writes a key under the routing prefix and returns its revision.
func (h *apiHarness) put(key, val string) int64 {
	h.t.Helper()
	r, err := h.cli.Put(context.Background(), prefix+key, val)
	if err != nil {
		h.t.Fatal(err)
	}
	return r.Header.Revision
}

// waitServed waits until the mirror's table is current at rev.
func (h *apiHarness) waitServed(rev int64) {
	h.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); h.m.Table().Revision() < rev; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatalf("the table did not reach revision %d", rev)
		}
	}
}

// TestETagFollowsTheContentNotTheRevision: a boost reaching its
// expires_at changes the answers with no etcd event, so at the same
// revision and epoch: the ETag of /v1/resolve and /v1/table changes, and
// a /v1/table waiting with If-None-Match and wait= answers the new table
// then (a client caching by revision would have missed it). A value put
// again as it was moves the revision and leaves the ETag. A matching
// If-None-Match is a 304 (at once without wait=, at the end of a wait
// with it), one that does not match a 200.
func TestETagFollowsTheContentNotTheRevision(t *testing.T) {
	h := startAPI(t, Config{}, false)

	// The boost ends by the agents' clocks a few seconds from now: long
	// enough to see it served first, with a margin for a slow machine.
	expires := time.Now().Add(4 * time.Second).UTC().Format(time.RFC3339Nano)
	rev := h.put("overrides/pl-west", `{"route":"PL","targets":[{"pool":"eu-west","weight":100}],"attrs":{"banner":"boost"},"expires_at":"`+expires+`"}`)
	h.waitServed(rev)
	before := h.get("/v1/resolve?country=PL&key=k")
	var d routing.Decision
	before.decode(t, &d)
	if before.code != 200 || d.Pool != "eu-west" || d.Attrs["banner"] != "boost" {
		t.Fatalf("PL under the boost: %s; want eu-west with the boost's banner (the boost expired already? a slow machine)", before)
	}
	tag := before.hd.Get("ETag")
	if !regexp.MustCompile(`^W/"[0-9a-f]{16}"$`).MatchString(tag) {
		t.Fatalf("ETag %q, want W/\"<16 hex digits>\"", tag)
	}
	if got := before.hd.Get(HeaderRevision); got != fmt.Sprint(d.Revision) {
		t.Fatalf("%s %q, want the decision's revision %d", HeaderRevision, got, d.Revision)
	}
	epoch := d.Epoch

	tbl := h.get("/v1/table")
	if tbl.code != 200 || tbl.hd.Get("ETag") != tag {
		t.Fatalf("/v1/table: HTTP %d ETag %q, want 200 and the resolve's ETag %q", tbl.code, tbl.hd.Get("ETag"), tag)
	}
	// A matching If-None-Match (also among others, also strong, also *):
	// 304, no body, the headers of the table.
	for _, inm := range []string{tag, `"nope", ` + tag, strings.TrimPrefix(tag, "W/"), "*"} {
		nm := h.get("/v1/table", "If-None-Match", inm)
		if nm.code != http.StatusNotModified || len(nm.body) != 0 || nm.hd.Get("ETag") != tag || nm.hd.Get(HeaderRevision) != fmt.Sprint(d.Revision) {
			t.Fatalf("If-None-Match %s: HTTP %d %q ETag %q revision %q; want 304 with the ETag and revision", inm, nm.code, nm.body, nm.hd.Get("ETag"), nm.hd.Get(HeaderRevision))
		}
		if nm.hd.Get(HeaderWait) != "" {
			t.Fatalf("If-None-Match without wait=: %s %q, want none", HeaderWait, nm.hd.Get(HeaderWait))
		}
	}
	if other := h.get("/v1/table", "If-None-Match", `W/"0000000000000000"`); other.code != 200 || other.hd.Get("ETag") != tag {
		t.Fatalf("If-None-Match of another table: HTTP %d ETag %q; want 200 and %q", other.code, other.hd.Get("ETag"), tag)
	}

	// Waiting for a change: the boost's end, by the clock alone.
	changed := h.get("/v1/table?wait=2m", "If-None-Match", tag)
	var body struct {
		Revision  int64                      `json:"revision"`
		Epoch     int64                      `json:"epoch"`
		Overrides map[string]json.RawMessage `json:"overrides"`
	}
	changed.decode(t, &body)
	newTag := changed.hd.Get("ETag")
	if changed.code != 200 || changed.hd.Get(HeaderWait) != WaitMet || newTag == tag || newTag == "" {
		t.Fatalf("If-None-Match %s, wait=2m: HTTP %d %s %q ETag %q; want 200, met, a new ETag", tag, changed.code, HeaderWait, changed.hd.Get(HeaderWait), newTag)
	}
	if _, ok := body.Overrides["pl-west"]; ok || body.Revision != d.Revision || body.Epoch != epoch {
		t.Fatalf("the changed table: revision %d epoch %d overrides %v; want the boost gone at the same revision %d and epoch %d",
			body.Revision, body.Epoch, body.Overrides, d.Revision, epoch)
	}
	after := h.get("/v1/resolve?country=PL&key=k")
	var d2 routing.Decision
	after.decode(t, &d2)
	if d2.Attrs["banner"] != "" || d2.Revision != d.Revision || d2.Epoch != epoch || after.hd.Get("ETag") != newTag {
		t.Fatalf("PL after the boost: %s ETag %q; want no banner, revision %d, epoch %d, ETag %q", after, after.hd.Get("ETag"), d.Revision, epoch, newTag)
	}

	// Nothing changes: the wait ends with 304.
	same := h.get("/v1/table?wait=100ms", "If-None-Match", newTag)
	if same.code != http.StatusNotModified || same.hd.Get(HeaderWait) != WaitTimeout || same.hd.Get("ETag") != newTag {
		t.Fatalf("If-None-Match of the current table, wait=100ms: HTTP %d %s %q; want 304, timeout", same.code, HeaderWait, same.hd.Get(HeaderWait))
	}

	// A value put again as it was: the revision moves, the ETag does not.
	gr, err := h.cli.Get(context.Background(), prefix+"pools/eu-central")
	if err != nil || len(gr.Kvs) != 1 {
		t.Fatalf("get pools/eu-central: %v %v", gr, err)
	}
	rev2 := h.put("pools/eu-central", string(gr.Kvs[0].Value))
	h.waitServed(rev2)
	again := h.get("/v1/resolve?country=PL&key=k")
	if again.hd.Get(HeaderRevision) != fmt.Sprint(rev2) || again.hd.Get("ETag") != newTag {
		t.Fatalf("after a put of the same value: revision %q ETag %q; want %d and the unchanged %q", again.hd.Get(HeaderRevision), again.hd.Get("ETag"), rev2, newTag)
	}
	// A change etcd sends ends a wait too.
	done := make(chan answer, 1)
	go func() { done <- h.do(context.Background(), "GET", "/v1/table?wait=2m", "If-None-Match", newTag) }()
	waitWaiting(t, h.s, 1)
	h.put("pools/eu-north", `{"host":"eu-north.example.net:443","residency":"eu","status":"draining"}`)
	if a := <-done; a.code != 200 || a.hd.Get("ETag") == newTag || a.hd.Get(HeaderWait) != WaitMet {
		t.Fatalf("a wait across a drain: HTTP %d ETag %q %s %q; want 200, a new ETag, met", a.code, a.hd.Get("ETag"), HeaderWait, a.hd.Get(HeaderWait))
	}
}

// waitWaiting waits until n blocking queries wait (a hang guard).
func waitWaiting(t *testing.T, s *Server, n int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.Waiting() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d blocking queries waiting, want %d", s.Waiting(), n)
		}
	}
}

// TestAnswersSayTheirTable: /v1/resolve (a decision, a NoRoute, an
// explain) and /v1/table carry the table's revision and when it was last
// confirmed current against etcd (the table JSON's synced_at).
func TestAnswersSayTheirTable(t *testing.T) {
	h := startAPI(t, Config{}, false)
	tbl := h.get("/v1/table")
	var body struct {
		Revision int64  `json:"revision"`
		SyncedAt string `json:"synced_at"`
	}
	tbl.decode(t, &body)
	if tbl.hd.Get(HeaderRevision) != fmt.Sprint(body.Revision) || tbl.hd.Get(HeaderSyncedAt) != body.SyncedAt || body.SyncedAt == "" {
		t.Fatalf("/v1/table: %s %q %s %q; want the body's revision %d and synced_at %q",
			HeaderRevision, tbl.hd.Get(HeaderRevision), HeaderSyncedAt, tbl.hd.Get(HeaderSyncedAt), body.Revision, body.SyncedAt)
	}
	for _, p := range []string{"/v1/resolve?country=PL&key=k", "/v1/resolve?country=PL&explain=1"} {
		a := h.get(p)
		if _, err := time.Parse(time.RFC3339Nano, a.hd.Get(HeaderSyncedAt)); err != nil || a.hd.Get(HeaderRevision) != fmt.Sprint(h.m.Table().Revision()) {
			t.Errorf("GET %s: %s %q, %s %q; want the table's revision and an RFC 3339 time", p, HeaderRevision, a.hd.Get(HeaderRevision), HeaderSyncedAt, a.hd.Get(HeaderSyncedAt))
		}
	}
	// A blocking query says whether its condition was met.
	for _, tc := range []struct{ query, want string }{
		{fmt.Sprintf("min_revision=%d", body.Revision), WaitMet},
		{fmt.Sprintf("min_revision=%d&wait=50ms", body.Revision+1000), WaitTimeout},
		{fmt.Sprintf("min_revision=%d&wait=0s", body.Revision+1000), WaitTimeout},
		{"", ""},
	} {
		for _, p := range []string{"/v1/resolve?country=PL&", "/v1/table?"} {
			a := h.get(p + tc.query)
			if a.code != 200 || a.hd.Get(HeaderWait) != tc.want {
				t.Errorf("GET %s%s: HTTP %d %s %q, want 200 and %q", p, tc.query, a.code, HeaderWait, a.hd.Get(HeaderWait), tc.want)
			}
		}
	}
}

// TestErrorsCarryACode: every JSON error names its cause in "code",
// through the real handler; the no-table 503 sends Retry-After.
func TestErrorsCarryACode(t *testing.T) {
	h := startAPI(t, Config{MaxWaiting: 2}, false)
	for _, tc := range []struct {
		method, path string
		hv           []string
		status       int
		code, msg    string
	}{
		{"GET", "/v1/resolv", nil, 404, CodeNotFound, "no such endpoint /v1/resolv"},
		{"GET", "//v1/resolve?country=PL", nil, 404, CodeNotFound, `path "//v1/resolve" is not clean (an empty, . or .. segment); ask for /v1/resolve`},
		{"GET", "/v1/./table", nil, 404, CodeNotFound, "ask for /v1/table"},
		{"GET", "/v1/status/..", nil, 404, CodeNotFound, "ask for /v1"},
		{"POST", "/v1/resolve?country=PL", nil, 405, CodeMethodNotAllowed, "read-only (GET, HEAD)"},
		{"GET", "/v1/status", []string{"Host", "attacker.example"}, 403, CodeForbiddenHost, `host "attacker.example" is not a loopback name`},
		{"GET", "/v1/resolve?key=50%off", nil, 400, CodeMalformedQuery, "malformed query"},
		{"GET", "/v1/resolve?contry=PL", nil, 400, CodeUnknownParam, `unknown parameter "contry"`},
		{"GET", "/v1/resolve?country=PL&country=DE", nil, 400, CodeRepeatedParam, `given 2 times`},
		{"GET", "/v1/resolve?explain=yes", nil, 400, CodeBadParam, "explain=yes"},
		{"GET", "/v1/resolve?min_revision=abc", nil, 400, CodeBadParam, "min_revision"},
		{"GET", "/v1/resolve?min_revision=", nil, 400, CodeBadParam, `min_revision ""`},
		{"GET", "/v1/table?min_revision=1&wait=", nil, 400, CodeBadParam, `wait ""`},
		{"GET", "/v1/resolve?min_revision=1&wait=forever", nil, 400, CodeBadParam, "wait"},
		{"GET", "/v1/resolve?wait=5s", nil, 400, CodeBadParam, "wait needs min_revision"},
		{"GET", "/v1/table?wait=5s", nil, 400, CodeBadParam, "wait needs min_revision or If-None-Match"},
		// If-None-Match does not make /v1/resolve wait.
		{"GET", "/v1/resolve?wait=5s", []string{"If-None-Match", "*"}, 400, CodeBadParam, "wait needs min_revision"},
		// "*" matches every table: a wait on it could only time out.
		{"GET", "/v1/table?wait=5s", []string{"If-None-Match", "*"}, 400, CodeBadParam, "If-None-Match: * with wait"},
	} {
		req, err := http.NewRequest(tc.method, h.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		setRawPath(req, tc.path)
		for i := 0; i+1 < len(tc.hv); i += 2 {
			if tc.hv[i] == "Host" {
				req.Host = tc.hv[i+1]
			} else {
				req.Header.Set(tc.hv[i], tc.hv[i+1])
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e errorBody
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil ||
			e.Code != tc.code || !strings.Contains(e.Error, tc.msg) {
			t.Errorf("%s %s: HTTP %d %q %s; want %d, code %q, naming %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status, tc.code, tc.msg)
		}
	}

	// An empty Host (HTTP/1.0 sends none) is quoted, not a double space.
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /v1/status HTTP/1.0\r\n\r\n")
	raw, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(raw), "HTTP/1.0 403 ") || !strings.Contains(string(raw), `{"error":"host \"\" is not a loopback name; use 127.0.0.1 or localhost","code":"forbidden_host"}`) {
		t.Errorf("a request without Host: %q; want 403 quoting the empty host", raw)
	}

	// A body: 400 body_not_allowed.
	c, err = net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc")
	raw, _ = io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(raw), "HTTP/1.1 400 ") || !strings.Contains(string(raw), `"code":"body_not_allowed"`) {
		t.Errorf("a request with a body: %q; want 400 body_not_allowed", raw)
	}

	// The cap of blocking queries (over TCP, half of 2): 429 too_many_waiting.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/v1/resolve?min_revision=999999999&wait=2m", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitWaiting(t, h.s, 1)
	a := h.get("/v1/table?min_revision=999999999&wait=2m")
	var e errorBody
	a.decode(t, &e)
	if a.code != http.StatusTooManyRequests || e.Code != CodeTooManyWaiting || a.hd.Get("Retry-After") != "5" {
		t.Errorf("a blocking query over the cap: %s Retry-After %q; want 429 too_many_waiting", a, a.hd.Get("Retry-After"))
	}
	cancel()
	<-done

	// NoRoute, plain and explained: code no_route, the table's revision
	// and epoch in both.
	for _, id := range []string{"eu-central", "eu-west", "eu-north"} {
		h.waitServed(h.put("pools/"+id, `{"host":"`+id+`.example.net:443","residency":"eu","status":"draining"}`))
	}
	var nr errorBody
	plain := h.get("/v1/resolve?country=DE&key=k")
	plain.decode(t, &nr)
	if plain.code != 503 || nr.Code != CodeNoRoute || nr.Country != "DE" || nr.Revision == 0 || nr.Epoch == nil || plain.hd.Get("ETag") == "" {
		t.Fatalf("DE with the EU pools drained: %s ETag %q; want 503 no_route with revision, epoch and an ETag", plain, plain.hd.Get("ETag"))
	}
	var ex struct {
		Error    string `json:"error"`
		Code     string `json:"code"`
		NoRoute  bool   `json:"no_route"`
		Country  string `json:"country"`
		Revision *int64 `json:"revision"`
		Epoch    *int64 `json:"epoch"`
		Routes   []any  `json:"routes"`
	}
	explained := h.get("/v1/resolve?country=DE&key=k&explain=1")
	explained.decode(t, &ex)
	if explained.code != 503 || ex.Code != CodeNoRoute || ex.Error != "no eligible pool" || !ex.NoRoute || ex.Country != "DE" || len(ex.Routes) == 0 ||
		ex.Revision == nil || *ex.Revision != nr.Revision || ex.Epoch == nil || *ex.Epoch != *nr.Epoch {
		t.Fatalf("DE explained: %s; want 503 no_route with the NoRoute's revision %d and epoch %d", explained, nr.Revision, *nr.Epoch)
	}
	var routed struct {
		Revision *int64 `json:"revision"`
		Epoch    *int64 `json:"epoch"`
		Code     string `json:"code"`
	}
	ok := h.get("/v1/resolve?country=US&key=k&explain=1")
	ok.decode(t, &routed)
	if ok.code != 200 || routed.Revision == nil || *routed.Revision != nr.Revision || routed.Epoch == nil || routed.Code != "" {
		t.Fatalf("US explained: %s; want 200 with revision %d and epoch, no code", ok, nr.Revision)
	}
}

// TestEmptyExplainIsThePlainDecision: explain= (empty), explain=0 and
// explain=false answer the plain Decision, as docs/agent.md says (a front
// door building ?explain=$var with $var empty gets a decision, not a 400).
func TestEmptyExplainIsThePlainDecision(t *testing.T) {
	h := startAPI(t, Config{}, false)
	for _, v := range []string{"", "0", "false"} {
		a := h.get("/v1/resolve?country=PL&key=k&explain=" + v)
		var body map[string]json.RawMessage
		a.decode(t, &body)
		if _, explained := body["routes"]; a.code != 200 || explained || body["pool"] == nil {
			t.Errorf("explain=%s: %s; want 200 and the plain Decision (a pool, no routes)", v, a)
		}
	}
	a := h.get("/v1/resolve?country=PL&key=k&explain=1")
	var body map[string]json.RawMessage
	a.decode(t, &body)
	if _, explained := body["routes"]; a.code != 200 || !explained {
		t.Errorf("explain=1: %s; want 200 and the Explanation (its routes)", a)
	}
}

// TestNoTableIsRetriable: before any table, /v1/resolve and /v1/table are
// 503 no_table with Retry-After; a blocking query whose wait ends without
// a table is that 503 too, saying timeout.
func TestNoTableIsRetriable(t *testing.T) {
	h := startAPI(t, Config{}, true)
	for _, p := range []string{"/v1/resolve?country=PL", "/v1/table", "/v1/resolve?country=PL&min_revision=1&wait=50ms", "/v1/table?min_revision=1&wait=0s"} {
		a := h.get(p)
		var e errorBody
		a.decode(t, &e)
		wantWait := ""
		if strings.Contains(p, "min_revision") {
			wantWait = WaitTimeout
		}
		if a.code != 503 || e.Code != CodeNoTable || a.hd.Get("Retry-After") != "1" || a.hd.Get(HeaderWait) != wantWait || a.hd.Get("ETag") != "" {
			t.Errorf("GET %s: %s Retry-After %q %s %q; want 503 no_table, Retry-After 1, wait %q", p, a, a.hd.Get("Retry-After"), HeaderWait, a.hd.Get(HeaderWait), wantWait)
		}
	}
}

// TestTableWithoutPoolsIsNoTable: a table without pools (every pool
// deleted around regionctl, a wrong --prefix) would answer each viewer
// NoRoute, which a front door must take as "unavailable"; it is no
// decision (the snapshot files keep the last table with pools), so
// /v1/resolve, explain too, answers 503 no_table with Retry-After and
// says why, counted as no_table. Once a pool is back, decisions are.
func TestTableWithoutPoolsIsNoTable(t *testing.T) {
	h := startAPI(t, Config{}, false)
	ctx := context.Background()
	pools, err := h.cli.Get(ctx, prefix+"pools/", clientv3.WithPrefix())
	if err != nil || len(pools.Kvs) == 0 {
		t.Fatalf("the example's pools: %v (%d)", err, len(pools.Kvs))
	}
	del, err := h.cli.Delete(ctx, prefix+"pools/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	h.waitServed(del.Header.Revision)
	for _, p := range []string{"/v1/resolve?country=PL&key=k", "/v1/resolve?country=PL&key=k&explain=1"} {
		a := h.get(p)
		var e errorBody
		a.decode(t, &e)
		if a.code != 503 || e.Code != CodeNoTable || !strings.Contains(e.Error, "no pools") || a.hd.Get("Retry-After") != "1" ||
			e.Revision != del.Header.Revision || e.Epoch == nil {
			t.Errorf("GET %s with no pools: %s; want 503 no_table saying the table has no pools, naming its revision %d and epoch, Retry-After 1", p, a, del.Header.Revision)
		}
	}
	if n := testutil.ToFloat64(h.s.resolves.WithLabelValues("no_table")); n != 1 {
		t.Errorf("resolves_total{outcome=no_table} = %v; want 1 (the decision, not the explain)", n)
	}
	if n := testutil.ToFloat64(h.s.resolves.WithLabelValues("no_route")); n != 0 {
		t.Errorf("resolves_total{outcome=no_route} = %v; want 0", n)
	}
	ops := make([]clientv3.Op, 0, len(pools.Kvs))
	for _, kv := range pools.Kvs {
		ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value)))
	}
	back, err := h.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	h.waitServed(back.Header.Revision)
	if a := h.get("/v1/resolve?country=PL&key=k"); a.code != 200 {
		t.Fatalf("PL with the pools back: %s; want 200", a)
	}
}

// TestCountryFallsBackAndUnknownIsCounted: an empty country= falls back to
// CF-IPCountry as an absent one does; a decision for the unknown country
// is counted by cause (no country, or one not recognized), an explain
// not.
func TestCountryFallsBackAndUnknownIsCounted(t *testing.T) {
	h := startAPI(t, Config{}, false)
	count := func(cause string) float64 { return testutil.ToFloat64(h.s.unknownCountry.WithLabelValues(cause)) }
	for _, tc := range []struct {
		query, header, want string
		missing, unrec      float64
	}{
		{"country=&key=abc", "DE", "DE", 0, 0},
		{"key=abc", "DE", "DE", 0, 0},
		{"country=PL&key=abc", "DE", "PL", 0, 0},
		{"country=&key=abc", "", routing.Unknown, 1, 0},
		{"key=abc", "", routing.Unknown, 1, 0},
		{"country=ZZ&key=abc", "DE", routing.Unknown, 0, 1},
		{"key=abc", "T1", routing.Unknown, 0, 1},
		{"country=Poland&key=abc", "", routing.Unknown, 0, 1},
		{"country=ZZ&key=abc&explain=1", "", routing.Unknown, 0, 0},
	} {
		m0, u0 := count(causeMissing), count(causeUnrecognized)
		a := h.get("/v1/resolve?"+tc.query, "CF-IPCountry", tc.header)
		var got struct{ Country string }
		a.decode(t, &got)
		if a.code != 200 || got.Country != tc.want {
			t.Errorf("?%s with CF-IPCountry %q: %s; want 200 for %s", tc.query, tc.header, a, tc.want)
		}
		if dm, du := count(causeMissing)-m0, count(causeUnrecognized)-u0; dm != tc.missing || du != tc.unrec {
			t.Errorf("?%s with CF-IPCountry %q: unknown_country missing +%v unrecognized +%v; want +%v +%v", tc.query, tc.header, dm, du, tc.missing, tc.unrec)
		}
	}
	mfs, err := h.s.cfg.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "regiond_api_resolves_unknown_country_total" && len(mf.GetMetric()) == 2
	}
	if !found {
		t.Fatal("regiond_api_resolves_unknown_country_total{cause} not on /metrics with its two causes")
	}
}

// TestErrorCodesAreDocumented: docs/agent.md's table of error codes lists
// every code the API sends, and no other.
func TestErrorCodesAreDocumented(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "docs", "agent.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "### Errors")
	if i < 0 {
		t.Fatal("docs/agent.md has no ### Errors section")
	}
	section := doc[i:]
	if j := strings.Index(section[4:], "\n#"); j >= 0 {
		section = section[:j+4]
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	for _, c := range errorCodes {
		if !documented[c] {
			t.Errorf("code %q is not in docs/agent.md's error table", c)
		}
		delete(documented, c)
	}
	for c := range documented {
		t.Errorf("docs/agent.md documents code %q, which the API does not send", c)
	}
}

// TestJSONEscapesC1Controls: DEL and the C1 controls, which
// encoding/json writes raw, reach the API's JSON only escaped: a key an
// origin named with U+009B (a terminal's CSI) no longer drives the
// terminal of whoever curls /v1/status.
func TestJSONEscapesC1Controls(t *testing.T) {
	h := startAPI(t, Config{}, false)
	key := "health/eu-central/x\u009b2J"
	resp, err := h.cli.Put(context.Background(), prefix+key, `{"addr":`)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.m.Table().Revision() < resp.Header.Revision && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	a := h.get("/v1/status")
	var st struct {
		SkippedKeys []routing.Skipped `json:"skipped"`
	}
	a.decode(t, &st)
	if len(st.SkippedKeys) == 0 || st.SkippedKeys[0].Key != key {
		t.Fatalf("/v1/status skipped %+v, want %q\n%s", st.SkippedKeys, key, a.body)
	}
	if bytes.ContainsAny(a.body, "\u009b\u007f") || !bytes.Contains(a.body, []byte(`x\u009b2J`)) {
		t.Fatalf("/v1/status: the key's U+009B raw, or not escaped:\n%s", a.body)
	}
}

// TestClientThatStopsReadingIsClosed: a client pipelining requests whose
// answers it never reads has its connection closed once an answer has
// waited WriteTimeout to be written (it held the connection, and a
// goroutine, for good: the soak review). Its earlier answers are still
// read in full; a blocking query's answer, written after its wait, is not
// cut by the deadline of its request.
func TestClientThatStopsReadingIsClosed(t *testing.T) {
	h := startAPI(t, Config{WriteTimeout: 300 * time.Millisecond}, false)
	addr := strings.TrimPrefix(h.url, "http://")

	// A blocking query that waits longer than the timeout is answered.
	rev := h.m.Table().Revision()
	resp, err := http.Get(fmt.Sprintf("%s/v1/table?min_revision=%d&wait=1500ms", h.url, rev+1))
	if err != nil {
		t.Fatalf("a blocking query waiting past WriteTimeout: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Fatalf("a blocking query waiting past WriteTimeout: HTTP %d, %d bytes, %v", resp.StatusCode, len(body), err)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = 4000 // answers of ~len(body) each: far past the socket buffers
	read, err := stallclient.Pipeline(c, "GET /v1/table HTTP/1.1\r\nHost: localhost\r\n\r\n", sent, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if read == sent {
		t.Fatalf("all %d answers written to a client that read none for 2 s: its connection was not closed", sent)
	}
	t.Logf("%d of %d answers (%d bytes each) written before the close", read, sent, len(body))
}

// deafSource is a mirror's source whose table is the test's to swap, and
// whose swaps wake no one: a table swapped in as a blocking query's timer
// fires.
type deafSource struct {
	mirrorSource
	t atomic.Pointer[routing.Table]
}

func (d *deafSource) Table() *routing.Table    { return d.t.Load() }
func (d *deafSource) Changed() <-chan struct{} { return nil }

// TestWaitMetAtTheDeadline: a blocking query whose deadline comes as the
// table it waits for is swapped in (unheard by it) answers that table as
// met, not as a timeout (the concurrency review: the answer was the new
// table labelled timeout).
func TestWaitMetAtTheDeadline(t *testing.T) {
	h := startAPI(t, Config{}, false)
	src := &deafSource{mirrorSource: mirrorSource{h.m}}
	old := h.m.Table()
	src.t.Store(old)
	s := New(Config{Node: "node-1", Logger: quiet()}, src)
	ts := httptest.NewServer(s.Handler(true))
	t.Cleanup(ts.Close)
	// The table it will wait for, made first: the swap is then the test's
	// alone, instant, once the query waits.
	if _, err := h.cli.Put(context.Background(), prefix+"routes/MT", `{"targets":[{"pool":"eu-central","weight":100}]}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for h.m.Table().Revision() <= old.Revision() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	next := h.m.Table()
	type result struct {
		wait, rev string
		err       error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("%s/v1/table?min_revision=%d&wait=5s", ts.URL, old.Revision()+1))
		if err != nil {
			got <- result{err: err}
			return
		}
		resp.Body.Close()
		got <- result{wait: resp.Header.Get(HeaderWait), rev: resp.Header.Get("X-Regiond-Revision")}
	}()
	for s.Waiting() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	src.t.Store(next) // unheard: the query finds it only at its deadline
	r := <-got
	if r.err != nil || r.wait != WaitMet || r.rev != fmt.Sprint(next.Revision()) {
		t.Fatalf("a blocking query for revision %d, the table swapped in unheard while it waited: %s %q, revision %s (%v); want met and revision %d",
			old.Revision()+1, HeaderWait, r.wait, r.rev, r.err, next.Revision())
	}
}

package agent_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// rawGet sends GET with the query exactly as given (no re-encoding), as a
// PHP or shell front door that builds the URL by hand would, and returns
// the status, headers and body.
func (h *harness) rawGet(path, rawQuery string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequest("GET", "http://"+h.a.Addr()+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.URL.RawQuery = rawQuery
	resp, err := h.http.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestMalformedQueriesAreRefused: a query the agent cannot parse, a
// parameter an endpoint does not take and one given twice are a 400 naming
// it, never answered as if the parameter were absent: a dropped key made
// the sticky pick random per request, a dropped country sent the viewer
// to _unknown's pools, a dropped min_revision did not wait.
func TestMalformedQueriesAreRefused(t *testing.T) {
	h, _ := startExampleAgent(t)

	pools := map[string]int{}
	for i := 0; i < 20; i++ {
		code, _, b := h.rawGet("/v1/resolve", "country=PL&key=50%off")
		var d routing.Decision
		json.Unmarshal(b, &d)
		pools[fmt.Sprintf("%d %s", code, d.Pool)]++
	}
	if len(pools) != 1 || pools["400 "] != 20 {
		t.Errorf("key=50%%off (a raw %%): 20 requests answered %v; want 400 each", pools)
	}

	for _, tc := range []struct{ path, query, want string }{
		{"/v1/resolve", "country=PL&key=%zz", `invalid URL escape "%zz"`},
		{"/v1/resolve", "country=P%L&key=abc", `invalid URL escape "%L"`},
		{"/v1/resolve", "country=PL;key=abc", "semicolon"},
		{"/v1/resolve", "country=PL&min_revision=1%", `invalid URL escape "%"`},
		{"/v1/resolve", "contry=PL", `unknown parameter "contry": /v1/resolve takes country, key, explain, min_revision, wait`},
		{"/v1/resolve", "country=PL&country=DE", `parameter "country" given 2 times`},
		{"/v1/table", "country=PL", `unknown parameter "country": /v1/table takes min_revision, wait`},
		{"/v1/table", "min_revision=1%", "invalid URL escape"},
		{"/v1/status", "verbose=1", `unknown parameter "verbose": /v1/status takes no parameters`},
	} {
		code, hd, b := h.rawGet(tc.path, tc.query)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, tc.want) ||
			!strings.HasPrefix(hd.Get("Content-Type"), "application/json") {
			t.Errorf("GET %s?%s = %d %s; want 400 naming %q", tc.path, tc.query, code, strings.TrimSpace(string(b)), tc.want)
		}
	}

	// What front doors send still answers; percent-encoded values decode.
	for _, q := range []string{"country=PL&key=50%25off", "country=PL&key=a+b&explain=0", "key=k", ""} {
		if code, _, b := h.rawGet("/v1/resolve", q); code != http.StatusOK {
			t.Errorf("GET /v1/resolve?%s = %d %s; want 200", q, code, b)
		}
	}
	for _, p := range []string{"/v1/table", "/v1/status", "/healthz", "/readyz", "/metrics"} {
		if code, _, b := h.rawGet(p, ""); code != http.StatusOK {
			t.Errorf("GET %s = %d %.200s; want 200", p, code, b)
		}
	}
}

// TestAPIErrorsAreJSON: an unknown path is a JSON 404 naming what the agent
// serves (it was the mux's text/plain "404 page not found", which a front
// door decoding the error body could not read); the 405 names both
// methods; /ui still leads to the status page.
func TestAPIErrorsAreJSON(t *testing.T) {
	h, _ := startExampleAgent(t)
	for _, p := range []string{"/v1/resolv", "/v1/resolve/", "/v1/tables", "/v2/resolve", "/"} {
		code, hd, b := h.rawGet(p, "country=PL")
		var e struct{ Error string }
		if code != http.StatusNotFound || !strings.HasPrefix(hd.Get("Content-Type"), "application/json") || json.Unmarshal(b, &e) != nil ||
			!strings.Contains(e.Error, "no such endpoint "+p+"; this agent serves /v1/resolve, /v1/table, /v1/status, /healthz, /readyz, /metrics, /ui/") {
			t.Errorf("GET %s = %d %q %s; want a JSON 404 naming the endpoints", p, code, hd.Get("Content-Type"), strings.TrimSpace(string(b)))
		}
	}
	resp, err := h.http.Post("http://"+h.a.Addr()+"/v1/resolve?country=PL", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(b), "read-only (GET, HEAD)") {
		t.Errorf("POST = %d %s; want 405 naming GET and HEAD", resp.StatusCode, b)
	}
	if code, _, b := h.rawGet("/ui", ""); code != http.StatusOK || !strings.Contains(string(b), "<html") {
		t.Errorf("GET /ui (redirected to /ui/) = %d %.200s; want the status page", code, b)
	}
}

// TestAnnouncedBodyDoesNotHoldTheConnection: a request announcing a body
// it never sends (GET or POST, with a length or chunked) is answered at
// once and its connection closed: the server used to wait for the body
// after the answer, so a local user could hold every connection of the
// TCP listener (and the socket's) for as long as they liked. The
// connection ends within the read's 10 s bound (it was held for good).
func TestAnnouncedBodyDoesNotHoldTheConnection(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	h, _ := startExampleAgent(t)
	for _, tc := range []struct{ req, status string }{
		{"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 200000\r\n\r\n", "HTTP/1.1 400 "},
		{"GET /v1/resolve?country=PL HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 400 "},
		{"POST /v1/resolve?country=PL HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 200000\r\n\r\n", "HTTP/1.1 405 "},
	} {
		c, err := net.Dial("tcp", h.a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, tc.req); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c) // up to the server's close
		c.Close()
		if err != nil {
			t.Errorf("%q: the connection was not closed after the answer (%v); read %q", tc.req, err, got)
			continue
		}
		if !strings.HasPrefix(string(got), tc.status) || !strings.Contains(string(got), "read-only (GET, HEAD)") {
			t.Errorf("%q: answered %q; want %s… naming GET and HEAD", tc.req, got, tc.status)
		}
	}
	// The listener still answers.
	if code, _, b := h.rawGet("/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz after = %d %s", code, b)
	}
}

// TestLiveAnswersAreNotCached: decisions, the table and the status are
// live; every API answer carries Cache-Control: no-store, so no cache
// between a front door (or a browser) and the agent keeps one.
func TestLiveAnswersAreNotCached(t *testing.T) {
	h, _ := startExampleAgent(t)
	for _, p := range []string{"/v1/resolve?country=PL&key=k", "/v1/resolve?country=PL&explain=1", "/v1/table", "/v1/status",
		"/v1/resolve?contry=PL", "/readyz", "/nowhere"} {
		path, query, _ := strings.Cut(p, "?")
		_, hd, _ := h.rawGet(path, query)
		if hd.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: Cache-Control %q; want no-store", p, hd.Get("Cache-Control"))
		}
	}
}

// TestResolvesCountDecisionsNotExplains: regiond_api_resolves_total
// counts the decisions answered (HEAD included: it is one, without its
// body) and not an explain, which is an operator's diagnostic, not a
// viewer's decision.
func TestResolvesCountDecisionsNotExplains(t *testing.T) {
	h, _ := startExampleAgent(t)
	total := func() float64 {
		t.Helper()
		mfs, err := h.a.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, mf := range mfs {
			if mf.GetName() == "regiond_api_resolves_total" {
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	before := total()
	for _, q := range []string{"country=PL&key=k", "country=PL&key=k&explain=0", "country=PL&key=k&explain=1", "country=ZZ&explain=true"} {
		if code, _, b := h.rawGet("/v1/resolve", q); code != http.StatusOK {
			t.Fatalf("GET /v1/resolve?%s = %d %s; want 200", q, code, b)
		}
	}
	resp, err := h.http.Head("http://" + h.a.Addr() + "/v1/resolve?country=PL&key=k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := total() - before; got != 3 {
		t.Fatalf("resolves_total grew by %v for two decisions, a HEAD and two explains; want 3", got)
	}
}

package php_test

// Tests of the front door's answers under a real php-fpm behind a real
// nginx (the example configurations, internal/phpfront): what a CDN may
// cache, what a viewer is told.

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/phpfront"
	"github.com/regiond/regiond/internal/snapindex"
	snap "github.com/regiond/regiond/internal/snapshot"
	"github.com/regiond/regiond/routing"
)

// writeSnapshotAt replaces the snapshot at path and its index, as the
// agent does.
func writeSnapshotAt(t *testing.T, path string, tab *routing.Table) {
	t.Helper()
	writeSnapshotWith(t, path, tab, routing.JSONHeader{WrittenAt: time.Now(), SyncedAt: time.Now()})
}

// writeSnapshotWith is writeSnapshotAt with the header h.
func writeSnapshotWith(t *testing.T, path string, tab *routing.Table, h routing.JSONHeader) {
	t.Helper()
	js, err := tab.JSONWith(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := snapindex.Encode(nil, tab, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(snap.IndexPath(path), idx, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startFront serves example.php (or cfg.Script) for snapshot under php-fpm
// and nginx, stopped at the test's end.
func startFront(t *testing.T, cfg phpfront.Config) *phpfront.Server {
	t.Helper()
	fpm, ngx := frontServers(t)
	cfg.PHPFPM, cfg.Nginx, cfg.Dir = fpm, ngx, t.TempDir()
	if cfg.Script == "" {
		script, err := filepath.Abs("example.php")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Script = script
	}
	s, err := phpfront.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// get requests path with CF-IPCountry country, never following a redirect.
func get(t *testing.T, s *phpfront.Server, path, country string, timeout time.Duration) (*http.Response, string) {
	t.Helper()
	hc := &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
	if country != "" {
		req.Header.Set("CF-IPCountry", country)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, s.Logs())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", path, err)
	}
	return resp, string(body)
}

// TestFrontDoorAnswersAreNotCached: the 302 and both 503s (no eligible
// pool; a table that cannot be read) of example.php under php-fpm and nginx
// say Cache-Control: private, no-store, so no CDN gives one viewer's
// redirect to others or keeps a drained edge. The unreadable table's body
// names no cause; the NoRoute body is the agent's.
func TestFrontDoorAnswersAreNotCached(t *testing.T) {
	now := time.Now()
	snapshot := filepath.Join(t.TempDir(), "table.json")
	writeSnapshotAt(t, snapshot, compile(t, fleet(t), routing.CompileOptions{Now: now}))
	s := startFront(t, phpfront.Config{Snapshot: snapshot, Children: 1, Defines: []string{"sys_temp_dir=" + t.TempDir()}})
	const want = "private, no-store"
	check := func(what string, resp *http.Response, status int) {
		t.Helper()
		if resp.StatusCode != status {
			t.Errorf("%s: status %d, want %d", what, resp.StatusCode, status)
		}
		if got := resp.Header.Values("Cache-Control"); len(got) != 1 || got[0] != want {
			t.Errorf("%s: Cache-Control %q, want %q", what, got, want)
		}
	}

	resp, _ := get(t, s, "/watch/1.mp4", "PL", 10*time.Second)
	check("302", resp, http.StatusFound)
	if !strings.HasPrefix(resp.Header.Get("Location"), "https://edge-") {
		t.Errorf("302: Location %q, want an edge", resp.Header.Get("Location"))
	}

	writeSnapshotAt(t, snapshot, compile(t, fleet(t), routing.CompileOptions{Now: now, Down: []string{"eu-central", "eu-west", "eu-north"}}))
	resp, body := get(t, s, "/watch/1.mp4", "DE", 10*time.Second)
	check("NoRoute 503", resp, http.StatusServiceUnavailable)
	if !strings.HasPrefix(body, `{"error":"no eligible pool","code":"no_route","country":"DE","reasons":[`) || !strings.Contains(body, `"pool-down:eu-central"`) {
		t.Errorf("NoRoute 503 body %q, want the agent's", body)
	}

	for _, f := range []string{snapshot, snap.IndexPath(snapshot)} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	resp, body = get(t, s, "/watch/1.mp4", "DE", 10*time.Second)
	check("unreadable table's 503", resp, http.StatusServiceUnavailable)
	if want := "routing unavailable: the regiond table cannot be read\n"; body != want {
		t.Errorf("unreadable table's 503 body %q, want %q", body, want)
	}
}

// TestRepeatedCountryHeadersTakeTheFirst: a request with CF-IPCountry twice
// is decided by the first, as the agent takes it (a hop that appends its
// own header after the trusted one must not move a German viewer to a US
// pool). nginx before 1.23 passes each line to php-fpm, where the last one
// wins, unless nginx-front.conf names the param ($http_cf_ipcountry is the
// first); nginx 1.23 and later join them ("DE, US"), which example.php cuts
// at the comma.
func TestRepeatedCountryHeadersTakeTheFirst(t *testing.T) {
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	snapshot := filepath.Join(t.TempDir(), "table.json")
	writeSnapshotAt(t, snapshot, tab)
	s := startFront(t, phpfront.Config{Snapshot: snapshot, Children: 1, Defines: []string{"sys_temp_dir=" + t.TempDir()}})
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, headers := range [][]string{{"DE", "US"}, {"US", "DE"}, {"DE, US"}, {"US,DE"}} {
		first := strings.TrimSpace(strings.Split(headers[0], ",")[0])
		want, err := tab.Resolve(first, "viewer-7", now)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/watch/1", nil)
		req.Header["Cf-Ipcountry"] = headers
		req.AddCookie(&http.Cookie{Name: "viewer", Value: "viewer-7"})
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Regiond-Pool"); resp.StatusCode != http.StatusFound || got != want.Pool {
			t.Errorf("CF-IPCountry %q: status %d, pool %q; want 302 and %s's pool %q\n%s", headers, resp.StatusCode, got, first, want.Pool, s.Logs())
		}
	}
}

// TestStaleTableIsLogged: a table the agent has not confirmed for an hour
// (stopped, or cut off from etcd) is served all the same, and said: in the
// response's X-Regiond-Degraded, in nginx-front.conf's access log, and in
// a throttled log line (the PHP review: only the header said it).
func TestStaleTableIsLogged(t *testing.T) {
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	snapshot := filepath.Join(t.TempDir(), "table.json")
	writeSnapshotWith(t, snapshot, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)})
	s := startFront(t, phpfront.Config{Snapshot: snapshot, Children: 1, Defines: []string{"sys_temp_dir=" + t.TempDir()}})
	for i := range 3 {
		resp, _ := get(t, s, "/watch/"+strconv.Itoa(i), "PL", 10*time.Second)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("X-Regiond-Degraded") != "stale-table" {
			t.Fatalf("status %d, X-Regiond-Degraded %q; want 302 and stale-table", resp.StatusCode, resp.Header.Get("X-Regiond-Degraded"))
		}
	}
	errLog, _ := os.ReadFile(filepath.Join(s.Dir(), "nginx-error.log"))
	if n := strings.Count(string(errLog), "PHP message: regiond: the table in "+snapshot+" is stale"); n != 1 {
		t.Errorf("%d log lines for 3 stale decisions, want 1 (throttled)\n%s", n, s.Logs())
	}
	var access []byte
	for i := 0; i < 50 && !strings.Contains(string(access), "/watch/2"); i++ { // nginx writes its access log as the request ends
		time.Sleep(20 * time.Millisecond)
		access, _ = os.ReadFile(filepath.Join(s.Dir(), "nginx-access.log"))
	}
	if !strings.Contains(string(access), `country="PL" pool=eu-`) || !strings.Contains(string(access), "degraded=stale-table") {
		t.Errorf("access log %q: want the country, the pool and degraded=stale-table", access)
	}
}

// TestJSONFallbackIsLogged: without table.idx beside the snapshot the
// front door answers from the whole table JSON, and says so in a throttled
// log line (the PHP review: a 8x slower front door said nothing).
func TestJSONFallbackIsLogged(t *testing.T) {
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	snapshot := filepath.Join(t.TempDir(), "table.json")
	writeSnapshotAt(t, snapshot, tab)
	if err := os.Remove(snap.IndexPath(snapshot)); err != nil {
		t.Fatal(err)
	}
	s := startFront(t, phpfront.Config{Snapshot: snapshot, Children: 1, Defines: []string{"sys_temp_dir=" + t.TempDir()}})
	for i := range 3 {
		if resp, _ := get(t, s, "/watch/"+strconv.Itoa(i), "PL", 10*time.Second); resp.StatusCode != http.StatusFound {
			t.Fatalf("status %d, want 302 from the table JSON", resp.StatusCode)
		}
	}
	errLog, _ := os.ReadFile(filepath.Join(s.Dir(), "nginx-error.log"))
	if n := strings.Count(string(errLog), "PHP message: regiond: no index beside "+snapshot); n != 1 {
		t.Errorf("%d log lines for 3 answers from the JSON, want 1 (throttled)\n%s", n, s.Logs())
	}
}

package agent_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

// snapshotHeader reads the times of the agent's snapshot file.
func (h *harness) snapshotHeader() (routing.JSONHeader, bool) {
	b, err := os.ReadFile(filepath.Join(h.dir, "shm", "table.json"))
	if err != nil {
		return routing.JSONHeader{}, false
	}
	_, hdr, err := routing.LoadTableJSONHeader(b)
	if err != nil {
		h.t.Fatalf("snapshot file does not load: %v", err)
	}
	return hdr, true
}

// TestSurvivesEtcdOutageAndRestartFromSnapshot, issue 10's scenario: etcd
// goes down; the agent keeps answering from its table and rewriting its
// snapshot file (written_at fresh, synced_at not), and is restarted while
// etcd is still down. The restarted agent answers from the file, marked
// stale-table, and takes its sync time from synced_at: /readyz, /v1/status
// and the staleness metric say the table has not been confirmed for longer
// than --max-stale, although the file's written_at is fresh, and its own
// rewrites keep that synced_at. When etcd is back it catches up, is ready,
// and the file's synced_at moves.
func TestSurvivesEtcdOutageAndRestartFromSnapshot(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	etcdDir := t.TempDir()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: etcdDir, ClientURL: url})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	rev := loadExample(t, cli)
	cli.Close()
	const maxStale = time.Second
	dir := t.TempDir()
	var logs logbuf.Buffer
	start := func() *harness {
		cfg := offlineConfig(dir)
		cfg.Endpoints, cfg.DialTimeout, cfg.StatusTTL, cfg.MaxStale = []string{url}, time.Second, 2*time.Second, maxStale
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		return runAgent(t, dir, cfg, func(a *agent.Agent) { agent.SetSnapshotRefresh(a, 50*time.Millisecond) })
	}
	h := start()
	waitFor(t, "synced and snapshot written", func() bool { s := h.snapshot(); return s != nil && s.Revision() >= rev })

	// etcd stops: the agent keeps answering from its table, and rewriting
	// the file, until written_at is more than --max-stale past synced_at.
	// Its log says why etcd does not answer, as at a start without etcd
	// (gRPC says only that a deadline passed).
	srv.Close()
	waitFor(t, "a log of the lost connection naming the refused endpoint", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "component=watch") && strings.Contains(l, "endpoint_errors=") &&
				strings.Contains(l, url+": dial: ") && strings.Contains(l, "connection refused") {
				return true
			}
		}
		return false
	})
	// /v1/status says it too (the status page's banner).
	waitFor(t, "etcd_error naming the refused endpoint while disconnected", func() bool {
		var st api.Status
		h.get("/v1/status", &st)
		return !st.Connected && strings.HasPrefix(st.EtcdError, "etcd unreachable: "+url+": dial: ") && strings.Contains(st.EtcdError, "connection refused")
	})
	if c, d := h.resolve("PL", "k"); c != 200 || d.Pool == "" {
		t.Fatalf("with etcd down: %d %+v", c, d)
	}
	var before routing.JSONHeader
	waitFor(t, "snapshot rewritten well after the last sync", func() bool {
		hdr, ok := h.snapshotHeader()
		before = hdr
		return ok && !hdr.SyncedAt.IsZero() && hdr.WrittenAt.Sub(hdr.SyncedAt) > maxStale
	})
	h.stop()

	// Restarted while etcd is down: the snapshot, marked stale, not ready.
	h2 := start()
	c, d := h2.resolve("PL", "k")
	if c != 200 || d.Pool == "" || d.Revision < rev || !contains(d.Degraded, "stale-table") {
		t.Fatalf("restart with etcd down: %d %+v, want a decision from the snapshot marked stale-table", c, d)
	}
	var st api.Status
	h2.get("/v1/status", &st)
	if want := before.SyncedAt.UTC().Format(time.RFC3339Nano); !st.Stale || st.Connected || st.SyncedAt != want || st.StaleSeconds <= maxStale.Seconds() {
		t.Fatalf("restarted: status %+v; want stale, not connected, the file's synced_at %s and stale_seconds over %v",
			st, want, maxStale.Seconds())
	}
	resp, err := h2.http.Get("http://" + h2.a.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "table last confirmed "+st.SyncedAt) {
		t.Fatalf("restarted: /readyz %d %q, want 503 naming synced_at %s (written_at was %s)", resp.StatusCode, body, st.SyncedAt, before.WrittenAt)
	}
	if got := gauge(t, h2, "regiond_watch_seconds_since_sync"); got <= maxStale.Seconds() {
		t.Fatalf("restarted: regiond_watch_seconds_since_sync %v, want more than %v", got, maxStale.Seconds())
	}
	// Without --user, making the client does not reach etcd: the agent's
	// probe does, and /v1/status and the metrics say so, naming why.
	waitFor(t, "etcd_error while etcd is down", func() bool { h2.get("/v1/status", &st); return st.EtcdError != "" })
	if !strings.Contains(st.EtcdError, "etcd unreachable at ["+url+"]") || !strings.Contains(st.EtcdError, url+": dial: ") ||
		!strings.Contains(st.EtcdError, "connection refused") {
		t.Fatalf("restarted with etcd down: etcd_error %q, want it to name the endpoint and the refused connection", st.EtcdError)
	}
	if got := gauge(t, h2, "regiond_agent_etcd_client"); got != 0 {
		t.Fatalf("restarted with etcd down: regiond_agent_etcd_client %v, want 0", got)
	}
	// The restarted agent's rewrites carry the same synced_at.
	waitFor(t, "the restarted agent's rewrite", func() bool {
		hdr, ok := h2.snapshotHeader()
		if ok && hdr.WrittenAt.After(before.WrittenAt) && !hdr.SyncedAt.Equal(before.SyncedAt) {
			t.Fatalf("the restarted agent rewrote synced_at %v, want the unconfirmed %v", hdr.SyncedAt, before.SyncedAt)
		}
		return ok && hdr.WrittenAt.After(before.WrittenAt)
	})

	// etcd comes back (same data, same port): the agent catches up, is
	// ready, and the file's synced_at moves.
	srv2, err := devetcd.Start(context.Background(), devetcd.Config{Dir: etcdDir, ClientURL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	cli2 := devetcd.NewTestClient(t, srv2)
	p, err := cli2.Put(context.Background(), prefix+"routes/PL", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "catch up after etcd returns", func() bool {
		c, d := h2.resolve("PL", "k")
		return c == 200 && d.Pool == "eu-north" && d.Revision >= p.Header.Revision && !contains(d.Degraded, "stale-table")
	})
	st = api.Status{} // etcd_error is omitted when empty
	if h2.get("/v1/status", &st); st.Stale || st.EtcdError != "" {
		t.Fatalf("status after catching up: %+v, want not stale, no etcd_error", st)
	}
	if got := gauge(t, h2, "regiond_agent_etcd_client"); got != 1 {
		t.Fatalf("after catching up: regiond_agent_etcd_client %v, want 1", got)
	}
	waitFor(t, "ready and synced once etcd is back", func() bool { return h2.get("/readyz?synced=1", nil) == 200 })
	waitFor(t, "synced_at moves in the file", func() bool {
		hdr, ok := h2.snapshotHeader()
		return ok && hdr.SyncedAt.After(before.SyncedAt)
	})
}

// TestRestartSeedsFromSyncedAt: an agent restarted while etcd is
// unreachable is ready when its snapshot's synced_at is within --max-stale
// and not when it is older, whatever written_at says; a file without
// synced_at (written before it existed) counts from written_at. /v1/table
// carries the same synced_at.
func TestRestartSeedsFromSyncedAt(t *testing.T) {
	tb := routing.Compile(5, []routing.KV{
		{Key: "pools/a", Value: []byte(`{"host":"a.example.net","residency":"eu"}`)},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"a","weight":100}]}`)},
	}, nil, routing.CompileOptions{Now: time.Now()})
	now := time.Now()
	for _, tc := range []struct {
		name     string
		h        routing.JSONHeader
		ready    bool
		syncedAt time.Time
	}{
		{"confirmed a second ago", routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Second)}, true, now.Add(-time.Second)},
		{"rewritten, not confirmed for an hour", routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)}, false, now.Add(-time.Hour)},
		{"no synced_at, fresh", routing.JSONHeader{WrittenAt: now}, true, now},
		{"no synced_at, old", routing.JSONHeader{WrittenAt: now.Add(-time.Hour)}, false, now.Add(-time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := offlineConfig(dir) // etcd unreachable
			cfg.MaxStale = time.Minute
			mkdir(t, filepath.Dir(cfg.Snapshot), 0o755)
			b, err := tb.JSONWith(nil, tc.h)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfg.Snapshot, b, 0o644); err != nil {
				t.Fatal(err)
			}
			h := runAgent(t, dir, cfg)
			var st api.Status
			h.get("/v1/status", &st)
			if st.SyncedAt != tc.syncedAt.UTC().Format(time.RFC3339Nano) || !st.Stale {
				t.Fatalf("status %+v, want synced_at %v, stale", st, tc.syncedAt)
			}
			if code := h.get("/readyz", nil); (code == 200) != tc.ready {
				t.Fatalf("/readyz %d, want ready %v", code, tc.ready)
			}
			// Ready or not, it follows no etcd: the runbook's check of a
			// restarted node fails (a typo'd --endpoints passed /readyz).
			if code := h.get("/readyz?synced=1", nil); code != 503 {
				t.Fatalf("/readyz?synced=1 %d with etcd unreachable, want 503", code)
			}
			var table struct {
				SyncedAt  string `json:"synced_at"`
				WrittenAt string `json:"written_at"`
			}
			if h.get("/v1/table", &table); table.SyncedAt != st.SyncedAt || table.WrittenAt == "" {
				t.Fatalf("/v1/table synced_at %q written_at %q, want the status's synced_at %s", table.SyncedAt, table.WrittenAt, st.SyncedAt)
			}
		})
	}
}

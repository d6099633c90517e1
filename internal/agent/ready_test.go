package agent_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/snapindex"
)

// TestNotReadyWithoutPools: an agent synced with a prefix that holds no
// pools (a wrong --prefix, or no config applied yet) routes nothing, and
// /readyz says so (503, naming --prefix and regionctl apply); once a
// config is applied it is ready. The log says so too (a wrong --prefix
// looked like a healthy start there).
func TestNotReadyWithoutPools(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	dir := t.TempDir()
	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Node = srv.Endpoints, "node-1"
	cfg.Socket, cfg.Listen = filepath.Join(dir, "run", "regiond.sock"), "127.0.0.1:0"
	cfg.Snapshot = filepath.Join(dir, "shm", "table.json")
	cfg.DialTimeout = time.Second
	logs := &logbuf.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	h := runAgent(t, dir, cfg)
	readyz := func() (int, string) {
		resp, err := h.http.Get("http://" + h.a.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "the first sync", func() bool { return h.snapshot() != nil })
	if code, body := readyz(); code != 503 || !strings.Contains(body, "has no pools") || !strings.Contains(body, "--prefix") ||
		!strings.Contains(body, "regionctl apply") {
		t.Fatalf("/readyz synced with an empty prefix: %d %q, want 503 saying there are no pools", code, body)
	}
	// No NoRoute (a decision a front door shows as "unavailable"):
	// no_table, which sends it to the snapshot files, naming the table.
	resp, err := h.http.Get("http://" + h.a.Addr() + "/v1/resolve?country=PL")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), `"code":"no_table"`) || !strings.Contains(string(b), "no pools") || resp.Header.Get(api.HeaderRevision) == "" {
		t.Fatalf("/v1/resolve with no pools: %d %s (%s %q), want no_table saying there are no pools, naming the table's revision", resp.StatusCode, b, api.HeaderRevision, resp.Header.Get(api.HeaderRevision))
	}
	waitFor(t, "the log naming --prefix", func() bool {
		return strings.Contains(logs.String(), "the table read from etcd has no pools, so nothing routes: is --prefix right")
	})
	loadExample(t, cli)
	waitFor(t, "ready once a config is applied", func() bool { code, _ := readyz(); return code == 200 })
	// The log says so too: the warning is not its last word.
	waitFor(t, "the log saying pools arrived", func() bool {
		return strings.Contains(logs.String(), "the table has pools now, so viewers are routed")
	})
	// A stop asked for says so, before and after (the "disconnected"
	// lines it causes read like etcd trouble otherwise).
	h.stop()
	if l := logs.String(); !strings.Contains(l, "regiond agent stopping: revoking its status key") || !strings.Contains(l, "regiond agent stopped") {
		t.Fatalf("the stop is not logged:\n%s", l)
	}
}

// TestSnapshotWithPoolsIsNotReplacedByOneWithout: an agent restarted on a
// prefix without pools (a wrong --prefix) routes nothing from the API,
// but leaves the snapshot file it started from, which has pools, as it is
// (front doors reading it keep routing), with regiond_snapshot_held 1 and
// regiond_watch_pools 0; the first table with pools is written.
func TestSnapshotWithPoolsIsNotReplacedByOneWithout(t *testing.T) {
	srv, cli := exampleEtcd(t)
	dir := t.TempDir()
	h1 := startAgent(t, dir, srv.Endpoints)
	waitFor(t, "the example in the snapshot file", func() bool { s := h1.snapshot(); return s != nil && s.NumPools() > 0 })
	h1.stop()
	before := h1.snapshot()

	cfg := agent.DefaultConfig()
	cfg.Endpoints, cfg.Node, cfg.Prefix = srv.Endpoints, "node-1", "/elsewhere/v1"
	cfg.Socket, cfg.Listen = filepath.Join(dir, "run", "regiond.sock"), "127.0.0.1:0"
	cfg.Snapshot, cfg.Logger = filepath.Join(dir, "shm", "table.json"), quietLogger()
	h2 := runAgent(t, dir, cfg)
	var st api.Status
	waitFor(t, "the sync with the empty prefix", func() bool {
		return h2.get("/v1/status", &st) == 200 && !st.Stale && st.SyncedAt != ""
	})
	if got := gauge(t, h2, "regiond_watch_pools"); got != 0 {
		t.Fatalf("regiond_watch_pools %v on an empty prefix, want 0", got)
	}
	waitFor(t, "regiond_snapshot_held 1", func() bool { return gauge(t, h2, "regiond_snapshot_held") == 1 })
	if code, _ := h2.resolve("PL", "k"); code != 503 {
		t.Fatalf("resolve on an empty prefix: %d, want 503", code)
	}
	// The file keeps the table it had (rewritten at start as the agent
	// serves it: marked stale until synced), never the empty one.
	if after := h2.snapshot(); after == nil || after.NumPools() != before.NumPools() || after.Revision() != before.Revision() {
		t.Fatalf("the snapshot file after the sync with an empty prefix: %v, want the table with %d pools at revision %d", after, before.NumPools(), before.Revision())
	}
	idx, err := snapindex.Open(filepath.Join(dir, "shm", "table.idx"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := idx.Resolve("PL", "k", time.Now()); err != nil || d.Revision != before.Revision() {
		t.Fatalf("the index after the sync with an empty prefix: %+v, %v; want PL routed at revision %d", d, err, before.Revision())
	}

	// A config under the new prefix is written at once, and the hold ends.
	rev := fleettest.Load(t, cli, "/elsewhere/v1/routing/")
	waitFor(t, "the new prefix's table in the file", func() bool {
		s := h2.snapshot()
		return s != nil && s.Revision() >= rev && s.NumPools() > 0
	})
	if got := gauge(t, h2, "regiond_snapshot_held"); got != 0 {
		t.Fatalf("regiond_snapshot_held %v once the table has pools, want 0", got)
	}
}

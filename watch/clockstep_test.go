package watch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/routing"
)

// TestBoostBackWhenTheClockStepsBack: real etcd, a running mirror. A boost
// with an hour left (key and lease alive) was dropped by the clock loop
// while the host's clock ran 2 h ahead (the table its At stored then);
// NTP steps the clock back. The clock loop applies the boost again within
// a second or two, with no etcd event: the mirror's own table holds it
// (the snapshot file is written from it), not only Resolve's answers. It
// waited for the next unrelated change under routing/ (the clock review).
func TestBoostBackWhenTheClockStepsBack(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	cli := devetcd.NewTestClient(t, devetcd.NewTest(t))
	m := runFleetMirror(t, Config{Client: cli, ProgressInterval: 200 * time.Millisecond}, nil)
	ctx := context.Background()
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	resp, err := cli.Put(ctx, faultPrefix+"overrides/jp",
		`{"route":"JP","targets":[{"pool":"kr-music","weight":100}],"expires_at":"`+end+`"}`, clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 10 s: %s", what)
			}
		}
	}
	waitFor("the boost applied", func() bool { return m.Table().Revision() >= resp.Header.Revision })
	m.swapMu.Lock()
	m.store(m.Table().At(time.Now().Add(2 * time.Hour)))
	m.swapMu.Unlock()
	if n := len(m.Table().Overrides()); n != 0 {
		t.Fatalf("the table of a clock 2 h ahead has %d overrides, want the boost left out", n)
	}
	waitFor("the boost back in the mirror's table", func() bool { _, ok := m.Table().Overrides()["jp"]; return ok })
	if d, _ := m.Table().Resolve("JP", "viewer-1", time.Now()); d.Pool != "kr-music" || m.Table().Revision() != resp.Header.Revision {
		t.Errorf("JP resolves to %s at revision %d, want the boost's kr-music at its revision %d", d.Pool, m.Table().Revision(), resp.Header.Revision)
	}
}

// TestAgesDoNotFollowTheWallClock: the time a table was confirmed in this
// process keeps its monotonic reading, so the ages measured from it
// (/v1/status's stale_seconds, /readyz, seconds_since_sync) do not jump
// with a step of the wall clock (they grew by a forward step past
// --max-stale, failing /readyz, and went negative for a backward one,
// which the alerts read as never synced). A seeded time, the file's wall
// time, may lie ahead of a clock stepped back: its age reads 0, not
// below.
func TestAgesDoNotFollowTheWallClock(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := runFleetMirror(t, Config{Client: devetcd.NewTestClient(t, devetcd.NewTest(t)), Registerer: reg}, func(m *Mirror) {
		seed := routing.Compile(1, nil, nil, routing.CompileOptions{Now: time.Now()})
		m.Seed(seed, time.Now().Add(10*time.Minute).Round(0))
		if got := sinceSync(t, reg); got != 0 {
			t.Errorf("seconds_since_sync of a seed synced 10 min ahead of the clock: %v, want 0", got)
		}
	})
	if at := m.Status().SyncedAt; !strings.Contains(at.String(), " m=") {
		t.Errorf("SyncedAt once confirmed has no monotonic reading: %s", at)
	}
	if got := sinceSync(t, reg); got < 0 || got > 60 {
		t.Errorf("seconds_since_sync once confirmed: %v", got)
	}
}

// sinceSync reads regiond_watch_seconds_since_sync from reg.
func sinceSync(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "regiond_watch_seconds_since_sync" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("regiond_watch_seconds_since_sync not registered")
	return 0
}

// runFleetMirror loads the example fleet under faultPrefix through
// cfg.Client, runs a mirror of cfg on it (Prefix faultPrefix, a request
// timeout of a second) until the test ends, and returns it once it has
// listed; before, if set, runs on the mirror before Run.
func runFleetMirror(t *testing.T, cfg Config, before func(*Mirror)) *Mirror {
	t.Helper()
	fleettest.Load(t, cfg.Client, faultPrefix)
	cfg.Prefix, cfg.RequestTimeout = faultPrefix, time.Second
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/routing"
)

// TestStalenessGaugesThroughTheMirrorSwap: from Run on, while
// its offline gauges give way to the mirror's, every gather finds
// regiond_watch_connected and regiond_watch_seconds_since_sync, and an
// agent seeded from its snapshot never reports "never synced" (-1). A
// scrape (or an alert's rule) that came between the two found neither, or
// -1, before the swap was done under one lock with the seed inside it.
func TestStalenessGaugesThroughTheMirrorSwap(t *testing.T) {
	t.Parallel() // self-contained (its own etcd, agents and directories): beside the waiting tests rather than before them all
	for i := 0; i < 150; i++ {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "shm"), 0o755); err != nil {
			t.Fatal(err)
		}
		synced := time.Now().Add(-time.Minute)
		kvs := []routing.KV{
			{Key: "pools/eu-west", Value: []byte(`{"host":"eu-west.example.net","residency":"eu"}`)},
			{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"eu-west","weight":100}]}`)},
		}
		b, err := routing.Compile(7, kvs, nil, routing.CompileOptions{Now: synced}).JSON(synced)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "shm", "table.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(offlineConfig(dir))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		deadline := time.Now().Add(2 * time.Second)
		running := false // Run has registered the offline gauges
		after := 0       // gathers since the mirror's own metrics appeared
		for n := 0; time.Now().Before(deadline) && after < 3; n++ {
			got := map[string]float64{}
			mfs, err := a.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if m := mf.GetMetric(); len(m) == 1 && m[0].GetGauge() != nil {
					got[mf.GetName()] = m[0].GetGauge().GetValue()
				}
			}
			if _, ok := got["regiond_watch_applied_revision"]; ok {
				after++
			}
			c, ok1 := got["regiond_watch_connected"]
			s, ok2 := got["regiond_watch_seconds_since_sync"]
			if running = running || ok1; !running {
				continue
			}
			if !ok1 || !ok2 || c != 0 || s < 59 {
				cancel()
				<-done
				t.Fatalf("start %d, gather %d: connected %v (found %v), seconds_since_sync %v (found %v); want 0 and about 60 at every gather", i, n, c, ok1, s, ok2)
			}
		}
		if after == 0 {
			t.Fatalf("start %d: the mirror's metrics did not appear within 2s", i)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

package watch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// TestEmbedderMisuseIsRefused: what an embedding router can get wrong is
// an error, not a panic or a race: a second Mirror on one Registerer (New
// says to wrap it), a second Run while one runs, Resolve on the nil table
// of a mirror not yet synced (ErrNoTable, not ErrNoRoute).
func TestEmbedderMisuseIsRefused(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	reg := prometheus.NewRegistry()
	m, err := watch.New(watch.Config{Client: cli, Prefix: prefix, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := m.Table().Resolve("pl", "k", time.Now()); !errors.Is(err, routing.ErrNoTable) || d.Country != "PL" {
		t.Fatalf("Resolve before the first sync: %+v %v, want ErrNoTable", d, err)
	}
	if _, err := watch.New(watch.Config{Client: cli, Prefix: prefix, Registerer: reg}); err == nil || !strings.Contains(err.Error(), "WrapRegistererWith") {
		t.Fatalf("a second Mirror on one Registerer: %v, want an error naming WrapRegistererWith", err)
	}
	// A registration that fails part way leaves nothing registered: the
	// next New on the same Registerer is not refused for the first
	// collectors of the failed one.
	partial := prometheus.NewRegistry()
	squatter := prometheus.NewGauge(prometheus.GaugeOpts{Name: "regiond_watch_connected", Help: "1 while a created watch follows etcd."})
	partial.MustRegister(squatter)
	if _, err := watch.New(watch.Config{Client: cli, Prefix: prefix, Registerer: partial}); err == nil {
		t.Fatal("New on a Registerer holding one of its metric names: no error")
	}
	partial.Unregister(squatter)
	if _, err := watch.New(watch.Config{Client: cli, Prefix: prefix, Registerer: partial}); err != nil {
		t.Fatalf("New after a failed registration was undone: %v", err)
	}
	two := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		if _, err := watch.New(watch.Config{Client: cli, Prefix: prefix, Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"mirror": name}, two)}); err != nil {
			t.Fatalf("Mirror %s on a Registerer wrapped with its own label: %v", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// Bounded: a second Run let through would run until its ctx ends,
	// and return nil then.
	second, cancelSecond := context.WithTimeout(ctx, 5*time.Second)
	err = m.Run(second)
	cancelSecond()
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("a second Run: %v, want an error", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Run again once it has returned: it serves again.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	put(t, cli, "pools/eu-zz", `{"host":"zz.example.net","residency":"eu","status":"active"}`)
	waitUntil(t, m, "the pool put after the restart of Run", func(tb *routing.Table) bool { _, ok := tb.Pool("eu-zz"); return ok })
}

// TestRefusedValuesAreLogged: a value the table refuses is logged once,
// naming the key and why (the last good value serves), and its repair is
// logged too.
func TestRefusedValuesAreLogged(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	loadExample(t, cli)
	logs := &logbuf.Buffer{}
	m := startMirror(t, cli, watch.Config{Logger: debugLogger(logs)})
	bad := put(t, cli, "pools/eu-central", `{"host":"edge-fra-1.example.net:443","residency":"eu","status":"bogus"}`)
	waitUntil(t, m, "the refused value", func(tb *routing.Table) bool { return tb.Revision() >= bad })
	put(t, cli, "routes/DE", `{"targets":[{"pool":"eu-central","weight":100}],"attrs":{"x":"1"}}`) // another change: no second line
	good := put(t, cli, "pools/eu-central", `{"host":"edge-fra-1.example.net:443","residency":"eu","status":"active"}`)
	waitUntil(t, m, "the repaired value", func(tb *routing.Table) bool { return tb.Revision() >= good })
	out := logs.String()
	if n := strings.Count(out, `msg="value refused; its last good value serves, if it had one" component=watch key=pools/eu-central`); n != 1 ||
		!strings.Contains(out, "bogus") {
		t.Fatalf("%d warnings of the refused value (want 1, naming status bogus):\n%s", n, out)
	}
	if !strings.Contains(out, `msg="value no longer refused" component=watch key=pools/eu-central`) {
		t.Fatalf("no log of the repair:\n%s", out)
	}
}

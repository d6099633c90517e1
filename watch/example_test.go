package watch_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// Example embeds the mirror in a Go router: start it, wait for its first
// sync, resolve from the current table on each request, stop it. (An
// embedded etcd with two keys stands in for the fleet's cluster.)
func Example() {
	endpoints, stopEtcd := exampleEtcd()
	defer stopEtcd()

	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	m, err := watch.New(watch.Config{
		Client: cli,
		Prefix: "/regiond/v1/routing/",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		// Registerer: your prometheus registry, for the regiond_watch_* metrics.
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }() // until ctx ends; the last good table serves through etcd's faults
	if err := m.WaitReady(ctx); err != nil {
		log.Fatal(err)
	}

	// On each request: the current table (never keep one), the viewer's
	// country header and sticky key.
	d, err := m.Table().Resolve("de", "viewer-42", time.Now())
	switch {
	case errors.Is(err, routing.ErrNoRoute):
		fmt.Println("503: no eligible pool:", d.Degraded) // a decision: never fall back past it
	case err != nil:
		fmt.Println("no table:", err)
	default:
		fmt.Println(d.Country, "→", d.Pool, d.Host)
	}

	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: DE → eu-central edge-fra-1.example.net:443
}

// exampleEtcd starts an embedded etcd holding one pool and the default
// route, and returns its endpoints and how to stop it.
func exampleEtcd() ([]string, func()) {
	dir, err := os.MkdirTemp("", "watch-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	cli, err := srv.Client()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	for k, v := range map[string]string{
		"/regiond/v1/routing/pools/eu-central": `{"host":"edge-fra-1.example.net:443","residency":"eu","status":"active"}`,
		"/regiond/v1/routing/routes/_default":  `{"targets":[{"pool":"eu-central","weight":100}]}`,
	} {
		if _, err := cli.Put(context.Background(), k, v); err != nil {
			log.Fatal(err)
		}
	}
	return srv.Endpoints, func() { srv.Close(); os.RemoveAll(dir) }
}

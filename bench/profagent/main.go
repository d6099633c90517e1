// Command profagent is the regiond agent (internal/agent, as cmd/regiond
// runs it) with a CPU profile and an optional execution trace, for the
// bench only: `go run ./bench -cpuprofile FILE` runs it instead of
// cmd/regiond. It takes the subset of regiond's flags the bench and
// the change-path harness's regiond peer uses (bench/README.md), so REGIOND_BIN may name it too.
//
//	REGIOND_CPUPROFILE=FILE  CPU profile, written when the agent stops
//	REGIOND_MEMPROFILE=FILE  heap profile (allocations since start), written when the agent stops
//	REGIOND_TRACE=FILE       runtime/trace, written when the agent stops
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"

	"github.com/regiond/regiond/internal/agent"
)

func main() {
	cfg := agent.DefaultConfig()
	endpoints := flag.String("endpoints", strings.Join(cfg.Endpoints, ","), "etcd client URLs")
	flag.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "root prefix")
	flag.StringVar(&cfg.Node, "node", cfg.Node, "node name")
	flag.StringVar(&cfg.Socket, "socket", cfg.Socket, "unix socket")
	flag.StringVar(&cfg.Listen, "listen", "", "loopback TCP address")
	flag.StringVar(&cfg.Snapshot, "snapshot", cfg.Snapshot, "snapshot file")
	flag.DurationVar(&cfg.HealthGrace, "health-grace", cfg.HealthGrace, "health grace window")
	logLevel := flag.String("log-level", "info", "log level")
	flag.Parse()
	cfg.Endpoints = strings.Split(*endpoints, ",")
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fail(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	if path := os.Getenv("REGIOND_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if path := os.Getenv("REGIOND_MEMPROFILE"); path != "" {
		defer func() {
			f, err := os.Create(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "profagent:", err)
				return
			}
			pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}()
	}
	if path := os.Getenv("REGIOND_TRACE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fail(err)
		}
		if err := trace.Start(f); err != nil {
			fail(err)
		}
		defer func() { trace.Stop(); f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := agent.New(cfg)
	if err != nil {
		fail(err)
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "profagent:", err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "profagent:", err)
	os.Exit(1)
}

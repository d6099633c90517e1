package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/snapfile"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	cli      *clientv3.Client
	mirror   *watch.Mirror
	api      *api.Server
	registry *prometheus.Registry
	unixLn   net.Listener
	tcpLn    net.Listener
}

// New validates cfg, dials etcd (without waiting for it: an unreachable
// etcd is retried in the background), loads the snapshot file if there is
// one, and opens the listeners. Call Run to serve.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, registry: prometheus.NewRegistry()}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.Endpoints, TLS: cfg.TLS, Username: cfg.Username, Password: cfg.Password,
		DialTimeout: cfg.DialTimeout, DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", cfg.Endpoints, err)
	}
	a.cli = cli
	ks, _ := keyspace.New(cfg.Prefix)
	a.mirror, err = watch.New(watch.Config{Client: cli, Prefix: ks.Routing(), Logger: cfg.Logger,
		Registerer: a.registry, HealthGrace: cfg.HealthGrace})
	if err != nil {
		cli.Close()
		return nil, err
	}
	a.loadSnapshot()
	a.api = api.New(api.Config{Node: cfg.Node, MaxStale: cfg.MaxStale, Registerer: a.registry,
		Gatherer: a.registry, Logger: cfg.Logger}, a.mirror)
	if err := a.listen(); err != nil {
		a.closeListeners()
		cli.Close()
		return nil, err
	}
	return a, nil
}

// loadSnapshot seeds the mirror with the snapshot file, marked stale.
func (a *Agent) loadSnapshot() {
	if a.cfg.Snapshot == "" {
		return
	}
	b, err := snapfile.ReadFile(a.cfg.Snapshot)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			a.log.Warn("snapshot file not loaded", "path", a.cfg.Snapshot, "err", err)
		}
		return
	}
	t, writtenAt, err := routing.LoadTableJSON(b)
	if err != nil {
		a.log.Warn("snapshot file not loaded: does not decode", "path", a.cfg.Snapshot, "err", err)
		return
	}
	a.mirror.Seed(t, writtenAt)
	a.log.Info("serving the snapshot file until synced with etcd", "path", a.cfg.Snapshot,
		"revision", t.Revision(), "written_at", writtenAt)
}

func (a *Agent) listen() error {
	if a.cfg.Socket != "" {
		ln, err := listenUnix(a.cfg.Socket)
		if err != nil {
			return err
		}
		a.unixLn = ln
	}
	if a.cfg.Listen != "" {
		ln, err := net.Listen("tcp", a.cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a.cfg.Listen, err)
		}
		a.tcpLn = ln
	}
	return nil
}

func (a *Agent) closeListeners() {
	if a.unixLn != nil {
		a.unixLn.Close()
	}
	if a.tcpLn != nil {
		a.tcpLn.Close()
	}
}

// Mirror returns the agent's mirror.
func (a *Agent) Mirror() *watch.Mirror { return a.mirror }

// Addr returns the loopback TCP address of the API, or "".
func (a *Agent) Addr() string {
	if a.tcpLn == nil {
		return ""
	}
	return a.tcpLn.Addr().String()
}

// Registry returns the agent's metrics registry.
func (a *Agent) Registry() *prometheus.Registry { return a.registry }

// Run serves until ctx is done, then shuts down: listeners closed, status
// key revoked, etcd client closed.
func (a *Agent) Run(ctx context.Context) error {
	defer a.cli.Close()
	ks, _ := keyspace.New(a.cfg.Prefix)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.mirror.Run(gctx) })
	if a.cfg.Snapshot != "" {
		w := snapfile.NewWriter(snapfile.WriterConfig{Path: a.cfg.Snapshot, Source: a.mirror,
			Logger: a.log, Registerer: a.registry})
		g.Go(func() error { return w.Run(gctx) })
	}
	pub := &publisher{cli: a.cli, key: ks.Agent(a.cfg.Node), node: a.cfg.Node, version: a.cfg.Version,
		ttl: a.cfg.StatusTTL, mirror: a.mirror, log: a.log.With("component", "status")}
	g.Go(func() error { pub.run(gctx); return nil })
	for _, s := range []struct {
		ln       net.Listener
		loopback bool
	}{{a.unixLn, false}, {a.tcpLn, true}} {
		if s.ln == nil {
			continue
		}
		srv := &http.Server{Handler: a.api.Handler(s.loopback), ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout: 2 * time.Minute}
		ln := s.ln
		g.Go(func() error {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve API on %s: %w", ln.Addr(), err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	a.log.Info("regiond agent running", "node", a.cfg.Node, "endpoints", a.cfg.Endpoints,
		"prefix", a.cfg.Prefix, "socket", a.cfg.Socket, "listen", a.Addr(), "snapshot", a.cfg.Snapshot)
	err := g.Wait()
	if a.cfg.Socket != "" {
		os.Remove(a.cfg.Socket)
	}
	return err
}

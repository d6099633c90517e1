package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/snapfile"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	api      *api.Server
	registry *prometheus.Registry
	unixLn   net.Listener
	tcpLn    net.Listener

	// seed is the table loaded from the snapshot file (marked stale), served
	// until the mirror exists; seedAt is the file's written_at.
	seed   *routing.Table
	seedAt time.Time
	mirror atomic.Pointer[watch.Mirror]
	// mirrorSet is closed once mirror is set.
	mirrorSet chan struct{}
}

// New validates cfg, loads the snapshot file if there is one, and opens the
// listeners. It does not contact etcd: Run does, retrying while etcd is
// unreachable and serving the snapshot meanwhile.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, registry: prometheus.NewRegistry(), mirrorSet: make(chan struct{})}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.loadSnapshot()
	a.api = api.New(api.Config{Node: cfg.Node, MaxStale: cfg.MaxStale, Registerer: a.registry,
		Gatherer: a.registry, Logger: cfg.Logger}, source{a})
	if err := a.listen(); err != nil {
		a.closeListeners()
		return nil, err
	}
	return a, nil
}

// source is what the API answers from: the mirror once it exists, the
// snapshot before.
type source struct{ a *Agent }

// Table returns the mirror's table, or the seeded snapshot.
func (s source) Table() *routing.Table {
	if m := s.a.mirror.Load(); m != nil {
		return m.Table()
	}
	return s.a.seed
}

// Changed returns a channel closed at the mirror's next table swap, or,
// before the mirror exists, when it is created.
func (s source) Changed() <-chan struct{} {
	if m := s.a.mirror.Load(); m != nil {
		return m.Changed()
	}
	return s.a.mirrorSet
}

// Status returns the mirror's status, or the snapshot's.
func (s source) Status() watch.Status {
	if m := s.a.mirror.Load(); m != nil {
		return m.Status()
	}
	if s.a.seed == nil {
		return watch.Status{}
	}
	return watch.Status{Revision: s.a.seed.Revision(), Epoch: s.a.seed.Epoch(), SyncedAt: s.a.seedAt}
}

// dial connects to etcd, retrying with backoff while it is unreachable
// (with --user, creating the client logs in, which needs etcd). A refused
// login is returned at once: retrying cannot fix a wrong password.
func (a *Agent) dial(ctx context.Context) (*clientv3.Client, error) {
	bo := backoff.Default()
	for {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: a.cfg.Endpoints, TLS: a.cfg.TLS, Username: a.cfg.Username, Password: a.cfg.Password,
			DialTimeout: a.cfg.DialTimeout, DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
			Logger: zap.NewNop(), Context: ctx,
		})
		if err == nil {
			return cli, nil
		}
		if errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrGRPCAuthFailed) ||
			errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
			return nil, fmt.Errorf("etcd client for %v: %w", a.cfg.Endpoints, err)
		}
		a.log.Warn("etcd unreachable; serving the last table meanwhile", "endpoints", a.cfg.Endpoints, "err", err)
		if bo.Wait(ctx) != nil {
			return nil, ctx.Err()
		}
	}
}

// loadSnapshot reads the snapshot file, to serve it (marked stale) until
// synced.
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
	a.seed, a.seedAt = t, writtenAt
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

// Mirror returns the agent's mirror, or nil before Run has reached etcd.
func (a *Agent) Mirror() *watch.Mirror { return a.mirror.Load() }

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
// key revoked, etcd client closed. It returns an error when etcd refuses
// the agent's credentials, or a listener fails.
func (a *Agent) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.runEtcd(gctx) })
	for _, s := range []struct {
		ln       net.Listener
		loopback bool
	}{{a.unixLn, false}, {a.tcpLn, true}} {
		if s.ln == nil {
			continue
		}
		srv := &http.Server{Handler: a.api.Handler(s.loopback), ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout: 2 * time.Minute,
			// Requests end with the agent: a blocking query (min_revision)
			// answers at once instead of holding the shutdown.
			BaseContext: func(net.Listener) context.Context { return gctx }}
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

// runEtcd connects to etcd, then runs the mirror, the snapshot writer and
// the status publisher until ctx is done.
func (a *Agent) runEtcd(ctx context.Context) error {
	cli, err := a.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer cli.Close()
	ks, _ := keyspace.New(a.cfg.Prefix)
	var w *snapfile.Writer // set before the mirror runs
	mcfg := watch.Config{Client: cli, Prefix: ks.Routing(), Logger: a.log,
		Registerer: a.registry, HealthGrace: a.cfg.HealthGrace, ProgressInterval: a.cfg.ProgressInterval}
	if a.cfg.Snapshot != "" {
		// An isolated change goes to the file straight from the mirror's
		// goroutine, unless blocking queries wait for it: they answer
		// first, and the writer's goroutine writes after them.
		mcfg.AfterChange = func() {
			if a.api.Waiting() == 0 {
				w.WriteNow()
			}
		}
	}
	m, err := watch.New(mcfg)
	if err != nil {
		return err
	}
	if a.seed != nil {
		m.Seed(a.seed, a.seedAt)
	}
	a.mirror.Store(m)
	close(a.mirrorSet)
	if a.cfg.Snapshot != "" {
		w = snapfile.NewWriter(snapfile.WriterConfig{Path: a.cfg.Snapshot, Source: m,
			Logger: a.log, Registerer: a.registry})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.Run(gctx) })
	if w != nil {
		g.Go(func() error { return w.Run(gctx) })
	}
	pub := &publisher{cli: cli, key: ks.Agent(a.cfg.Node), node: a.cfg.Node, version: a.cfg.Version,
		ttl: a.cfg.StatusTTL, mirror: m, log: a.log.With("component", "status")}
	g.Go(func() error { pub.run(gctx); return nil })
	return g.Wait()
}

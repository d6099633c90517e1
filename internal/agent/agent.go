package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/safedir"
	"github.com/regiond/regiond/internal/snapshot"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	api      *api.Server
	registry *prometheus.Registry
	// swapMetrics is held (written) while the offline gauges give way to
	// the mirror's of the same names, and read by every scrape of
	// /metrics, so no scrape sees neither.
	swapMetrics sync.RWMutex
	unixLn      *connLimit
	sock        *unixSocket // the file of unixLn, removed at exit while it is the agent's
	tcpLn       *connLimit

	// seed is the table loaded from the snapshot file (marked stale), served
	// until the mirror exists; seedAt is the file's synced_at (its
	// written_at when it has none).
	seed   *routing.Table
	seedAt time.Time
	// snapshotRefresh is the snapshot writer's Refresh (zero: its default;
	// tests shorten it).
	snapshotRefresh time.Duration
	mirror          atomic.Pointer[watch.Mirror]
	// mirrorSet is closed once mirror is set.
	mirrorSet chan struct{}

	// maxConns is the connection cap of each listener, fitted to the file
	// descriptor limit; conns are the connection metrics.
	maxConns int
	conns    connVecs
	// etcdErr says why the agent has not reached etcd since it started
	// (no client: a refused login; or no answer to awaitEtcd's probe);
	// nil once it has. login holds the dial's metrics.
	etcdErr atomic.Pointer[string]
	login   loginMetrics
	// statusClock times the status key's checks; beforeStatusPut runs
	// before each put of it; pub is the status publisher once it exists
	// (tests set and read them).
	statusClock     statusClock
	beforeStatusPut func(at time.Time)
	pub             atomic.Pointer[publisher]
	etcd            atomic.Pointer[clientv3.Client] // the client of --endpoints, once made
	writer          atomic.Pointer[snapshot.Writer] // nil without --snapshot, or before etcd's goroutine made it
	snapLock        *os.File                        // the snapshot's lock, held for the agent's life (lockSnapshot)
	// statusQuietSpacing is the publisher's quietSpacing (zero: its
	// default, statusQuietSpacing; tests lengthen it).
	statusQuietSpacing time.Duration
	// recordRetry is the publisher's recordRetry (zero: statusRefresh;
	// tests shorten it).
	recordRetry time.Duration
	// statusRetry is the publisher's backoff between failed lease grants
	// (nil: backoff.Default(); tests lengthen it).
	statusRetry *backoff.Backoff
	// statusPutFailures counts the status key's failed puts;
	// nodeConflicts the puts that found another agent's lease on it.
	statusPutFailures prometheus.Counter
	nodeConflicts     prometheus.Counter
	// copyErrors counts failed writes (and a failed restore) of the
	// snapshot's copy (--snapshot-copy); copyLastWrite is when it was last
	// written.
	copyErrors    prometheus.Counter
	copyLastWrite prometheus.Gauge
	// copyEvery is how often the copy is refreshed (snapshotCopyEvery;
	// tests shorten it).
	copyEvery time.Duration
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
	a := &Agent{cfg: cfg, log: cfg.Logger, registry: prometheus.NewRegistry(), mirrorSet: make(chan struct{}),
		statusClock: realClock}
	if w := cfg.snapshotCopyWarning(); w != "" {
		a.log.Warn(w)
	}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "regiond", Name: "build_info",
			Help:        "1, labelled with the agent's version (as in its status key): a node left on an old binary shows.",
			ConstLabels: prometheus.Labels{"version": cfg.Version}}, func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "table", Name: "no_route_countries",
			Help: "Countries (the unknown country too) the served table gives no eligible pool: their viewers get NoRoute (503)."},
			func() float64 { return float64(noRouteCountries(source{a}.Table())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "table", Name: "boosts_without_eligible_target",
			Help: "Live boosts (overrides setting targets) none of whose targets any viewer of the boosted route may be sent to (drained, down, unhealthy, other residency): their viewers go down the fallback chain until the boost ends."},
			func() float64 { return float64(boostsWithoutEligibleTarget(source{a}.Table())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "table", Name: "pools_out",
			Help: "Pools of the served table an operator took out (status draining or down): a drain has no end of its own, so one forgotten after maintenance stays until undrained."},
			func() float64 { return float64(poolsOut(source{a}.Table())) }))
	a.conns, a.login = newConnVecs(a.registry), newLoginMetrics(a.registry, a)
	a.statusPutFailures = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "agent", Name: "status_put_failures_total",
		Help: "Puts of the agent's status key that failed (etcd away, or the role lacks readwrite on <prefix>/agents/<node>); retried at the next check (a second) for a change, at the next refresh (a minute) otherwise."})
	a.nodeConflicts = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "agent", Name: "node_conflicts_total",
		Help: "Puts of the status key that found it under another agent's lease: another agent runs with the same --node."})
	a.copyErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "snapshot", Name: "copy_errors_total",
		Help: "Failed writes of the snapshot's copy on disk (--snapshot-copy), copies skipped because the snapshot file does not decode, and a start that found the copy but could not write the snapshot files from it."})
	a.copyLastWrite = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "snapshot", Name: "copy_last_write_timestamp_seconds",
		Help: "Unix time of the last write of the snapshot's copy on disk (--snapshot-copy); 0 before the first."})
	a.registry.MustRegister(a.statusPutFailures, a.nodeConflicts, a.copyErrors, a.copyLastWrite)
	maxWaiting, err := a.fitToFDLimit()
	if err != nil {
		return nil, err
	}
	// A start that fails leaves no directory it made (parents included):
	// one made by the wrong user (a start by hand as root, refused for a
	// port the service holds) would refuse the service's next start.
	var made []safedir.Made
	fail := func(err error) (*Agent, error) {
		a.closeListeners()
		if a.snapLock != nil {
			// Removed only from a directory this start made, and is
			// about to remove: elsewhere another agent may have opened it.
			if slices.ContainsFunc(made, func(m safedir.Made) bool { return m.Path == filepath.Dir(a.snapLock.Name()) }) {
				os.Remove(a.snapLock.Name())
			}
			a.snapLock.Close()
		}
		safedir.RemoveMade(made) // each only if empty: what someone put there stays
		return nil, err
	}
	// Before the file is read: a table in a directory others can write
	// may be forged.
	if cfg.Snapshot != "" {
		m, err := a.makeSnapshotDir(filepath.Dir(cfg.Snapshot))
		if err != nil {
			return fail(fmt.Errorf("--snapshot %s: %w", cfg.Snapshot, err))
		}
		made = append(made, m...)
		if a.snapLock, err = lockSnapshot(cfg.Snapshot); err != nil {
			return fail(err)
		}
		// The agent renames its files into place: a directory, a link or
		// anything but a file there would fail every write, for ever,
		// while /readyz said ready.
		for _, p := range []string{cfg.Snapshot, snapshot.IndexPath(cfg.Snapshot)} {
			if err := notAFile("--snapshot", cfg.Snapshot, p); err != nil {
				return fail(err)
			}
		}
	}
	m, err := a.makeSnapshotCopyDir()
	if err != nil {
		return fail(fmt.Errorf("--snapshot-copy %s: %w", cfg.SnapshotCopy, err))
	}
	made = append(made, m...)
	if cfg.SnapshotCopy != "" {
		// Read at start when the snapshot is missing: a FIFO there would
		// block the open, and the agent's start, with nothing logged.
		if err := notAFile("--snapshot-copy", cfg.SnapshotCopy, cfg.SnapshotCopy); err != nil {
			return fail(err)
		}
	}
	if cfg.Socket != "" {
		m, err := makeSocketDir(cfg.Socket)
		if err != nil {
			return fail(err)
		}
		made = append(made, m...)
	}
	a.api = api.New(api.Config{Node: cfg.Node, MaxStale: cfg.MaxStale, MaxWaiting: maxWaiting,
		WriteTimeout: cfg.WriteTimeout, Registerer: a.registry, Gatherer: prometheus.GathererFunc(a.gather), Logger: cfg.Logger}, source{a})
	a.mountUI()
	if err := a.listen(); err != nil {
		return fail(err)
	}
	// Once nothing can refuse the start: restoring the copy writes the
	// snapshot files, which would keep a refused start's directory (the
	// agent review: a start by hand as root, refused for a port in use,
	// left root's table.json in the directory it made). Nothing is
	// served before Run.
	a.loadSnapshot()
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

// EtcdError says why the agent has not reached etcd yet, or "".
func (s source) EtcdError() string {
	if e := s.a.etcdErr.Load(); e != nil {
		return *e
	}
	return ""
}

// StatusError says why the agent's status key is not published, or "".
func (s source) StatusError() string {
	if p := s.a.pub.Load(); p != nil {
		return p.statusError()
	}
	return ""
}

// SnapshotError says why the snapshot files do not hold the table the
// agent serves (their last write failed), or "".
func (s source) SnapshotError() string {
	if w := s.a.writer.Load(); w != nil {
		return w.Failure()
	}
	return ""
}

// fitToFDLimit sets the listeners' connection cap and returns the cap of
// waiting blocking queries, both fitted to the file descriptor limit.
func (a *Agent) fitToFDLimit() (int, error) {
	n := 0
	for _, on := range []bool{a.cfg.Socket != "", a.cfg.Listen != ""} {
		if on {
			n++
		}
	}
	limit, inUse := fdLimit()
	conns, blocking, err := fdBudget(a.cfg.MaxConnections, a.cfg.MaxBlockingQueries, a.cfg.FDReserve, n, limit, inUse)
	if err != nil {
		return 0, fmt.Errorf("agent config: %w", err)
	}
	if conns != a.cfg.MaxConnections || blocking != a.cfg.MaxBlockingQueries {
		a.log.Warn("API caps lowered to fit the file descriptor limit", "fd_limit", limit, "fds_in_use", inUse,
			"fd_reserve", a.cfg.FDReserve, "max_connections", conns, "max_blocking_queries", blocking)
	}
	a.maxConns = conns
	return blocking, nil
}

// ensureSnapshotDir creates the snapshot directory dir if missing (0755,
// or 0750 of --snapshot-group) and checks that it is the agent's own
// (safedir.Check). The writer calls it too, when the directory is gone.
func (a *Agent) ensureSnapshotDir(dir string) error {
	_, err := a.makeSnapshotDir(dir)
	return err
}

// makeSnapshotDir is ensureSnapshotDir, returning the directories it
// created (safedir.EnsureMade).
func (a *Agent) makeSnapshotDir(dir string) ([]safedir.Made, error) {
	gid, err := a.cfg.snapshotGID()
	if err != nil {
		return nil, err
	}
	return safedir.EnsureMade(dir, "snapshot directory", a.cfg.snapshotDirMode(), gid)
}

// loadSnapshot reads the snapshot file, to serve it (marked stale) until
// synced. Its synced_at (not written_at, which the writer refreshes
// whether or not etcd answers) is when the table was last confirmed
// against etcd; a file written before synced_at existed has only
// written_at.
func (a *Agent) loadSnapshot() {
	if a.cfg.Snapshot == "" {
		return
	}
	b, err := atomicfile.ReadFile(a.cfg.Snapshot)
	if errors.Is(err, os.ErrNotExist) && a.restoreSnapshotCopy("no snapshot file (after a reboot?)") {
		return
	}
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			a.log.Warn("snapshot file not loaded", "path", a.cfg.Snapshot, "err", err)
		}
		return
	}
	t, h, err := routing.LoadTableJSONHeader(b)
	if err != nil {
		a.log.Warn("snapshot file not loaded: does not decode", "path", a.cfg.Snapshot, "err", err)
		// Truncated, or of a newer agent after a downgrade: the copy, if
		// it decodes, is served and rewrites the files (the shutdown
		// review: the agent served 503 beside a good copy, and copied
		// the bad file over it at its stop).
		a.restoreSnapshotCopy("the snapshot file does not decode")
		return
	}
	a.seed, a.seedAt = t, h.SyncedAt
	if h.SyncedAt.IsZero() {
		a.seedAt = h.WrittenAt
	}
	a.log.Info("serving the snapshot file until synced with etcd", "path", a.cfg.Snapshot,
		"revision", t.Revision(), "synced_at", a.seedAt, "written_at", h.WrittenAt)
}

func (a *Agent) listen() error {
	if a.cfg.Socket != "" {
		ln, err := listenUnix(a.cfg.Socket)
		if err != nil {
			return err
		}
		a.sock = ln
		a.unixLn = limitListener(ln, a.maxConns, "unix", a.conns)
	}
	if a.cfg.Listen != "" {
		ln, err := net.Listen("tcp", a.cfg.Listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", a.cfg.Listen, err)
		}
		a.tcpLn = limitListener(ln, a.maxConns, "tcp", a.conns)
	}
	return nil
}

func (a *Agent) closeListeners() {
	if a.unixLn != nil {
		a.unixLn.Close()
		a.sock.Remove()
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

// Registry returns the agent's metrics as /metrics gathers them: never
// while the offline gauges give way to the mirror's, so from Run on a
// gather finds regiond_watch_connected and
// regiond_watch_seconds_since_sync at every moment.
func (a *Agent) Registry() prometheus.Gatherer { return prometheus.GathererFunc(a.gather) }

// gather is the registry's Gather, never while the offline gauges give way
// to the mirror's (see swapMetrics).
func (a *Agent) gather() ([]*dto.MetricFamily, error) {
	a.swapMetrics.RLock()
	defer a.swapMetrics.RUnlock()
	return a.registry.Gather()
}

// maxHeaderBytes caps an API request's line and headers (431 above): Go's
// server allows 4 KiB past it, so 64 KiB in all.
const maxHeaderBytes = 60 << 10

// Run serves until ctx is done, then shuts down: listeners closed, status
// key revoked, etcd client closed. It returns an error when a listener
// fails; etcd unreachable or refusing the agent's login is retried, with
// the last table served meanwhile.
func (a *Agent) Run(ctx context.Context) error {
	// The components run under run, cancelled once the stop is said: a
	// line the stop causes (a "disconnected", a warning of the
	// publisher's) never comes before it (the shutdown review).
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	g, gctx := errgroup.WithContext(run)
	stopping := context.AfterFunc(ctx, func() {
		if gctx.Err() == nil { // not during a component's failure, which stops the rest already
			a.log.Info("regiond agent stopping: revoking its status key, closing the API")
		}
		cancel()
	})
	defer stopping()
	// Registered before the API serves: a scrape never finds the agent
	// without its connection and staleness gauges.
	offline := a.registerOfflineGauges()
	etcdDone := make(chan struct{}) // the mirror, the snapshot writer and the status publisher have stopped
	g.Go(func() error { defer close(etcdDone); return a.runEtcd(gctx, offline) })
	g.Go(func() error { a.keepSnapshotCopy(gctx, etcdDone); return nil })
	g.Go(func() error { a.keepSocket(gctx); return nil })
	for _, s := range []struct {
		ln       *connLimit
		loopback bool
		name     string
	}{{a.unixLn, false, "unix"}, {a.tcpLn, true, "tcp"}} {
		if s.ln == nil {
			continue
		}
		// A loopback client sends its request at once: a connection
		// that trickles its headers (another local user holding the
		// TCP listener's connections, slowloris) is closed after a
		// second there. MaxHeaderBytes: the longest request the API
		// takes is a few kB, and 256 connections of Go's default 1 MB
		// each grew the agent by 600 MB.
		headerTimeout := 5 * time.Second
		if s.loopback {
			headerTimeout = time.Second
		}
		srv := &http.Server{Handler: a.api.Handler(s.loopback), ReadHeaderTimeout: headerTimeout, MaxHeaderBytes: maxHeaderBytes,
			IdleTimeout: 2 * time.Minute, ConnState: s.ln.connState, ErrorLog: newServerLog(a.log, s.name),
			// A client that stops reading its answers is cut after this
			// (the API gives a blocking query's answer as long again after
			// its wait).
			WriteTimeout: a.api.WriteTimeout(),
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
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				// A client that stopped reading its answer (a pager left
				// open on /v1/table) holds its connection up to the write
				// timeout: cut, the stop is still clean (the shutdown
				// review: regiond exited 1, and systemd marked the unit
				// failed).
				a.log.Warn(fmt.Sprintf("API: connections still answering %s after the stop: closed", shutdownGrace), "api", s.name, "connections", len(s.ln.sem), "err", err)
				srv.Close()
			}
			return nil
		})
	}
	g.Go(func() error { a.notifySystemd(gctx); return nil })
	a.log.Info("regiond agent running", "node", a.cfg.Node, "endpoints", a.cfg.Endpoints,
		"prefix", a.cfg.Prefix, "socket", a.cfg.Socket, "listen", a.Addr(), "snapshot", a.cfg.Snapshot)
	err := g.Wait()
	if a.sock != nil {
		a.sock.Remove()
	}
	if a.snapLock != nil {
		a.snapLock.Close() // the files are written no more: another agent may take them
	}
	if err == nil {
		a.log.Info("regiond agent stopped")
	}
	return err
}

// shutdownGrace is how long a stop waits for the API's connections to
// finish their answers before it closes them: within systemd's stop
// timeout (15 s in the package's unit) with the status key's revoke.
const shutdownGrace = 5 * time.Second

// notAFile refuses path p of flag (given as value) when something other
// than a regular file is there: the agent writes its files by rename, so
// a directory, a link or a FIFO there would fail every write, for ever,
// while /readyz said ready (or, read at start, block it).
func notAFile(flag, value, p string) error {
	if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %s: %s is a %s, not a file: the agent writes its files itself (by rename); remove it, or give another path",
			flag, value, p, fileKind(fi.Mode()))
	}
	return nil
}

// fileKind names a file mode's type for messages.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeSymlink != 0:
		return "symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// boostsWithoutEligibleTarget counts the live boosts of t (nil: none)
// that serve no viewer (routing.Table.BoostsWithoutEligibleTarget). Read
// at each scrape, off the change path.
func boostsWithoutEligibleTarget(t *routing.Table) int {
	if t == nil {
		return 0
	}
	return len(t.BoostsWithoutEligibleTarget())
}

// poolsOut counts the pools of t (nil: none) whose status is not active
// (draining or down). Read at each scrape, off the change path.
func poolsOut(t *routing.Table) int {
	if t == nil {
		return 0
	}
	n := 0
	for _, id := range t.PoolIDs() {
		if p, ok := t.Pool(id); ok && p.Status != routing.StatusActive {
			n++
		}
	}
	return n
}

// noRouteCountries counts the countries, the unknown one included, that t
// (nil: none) gives no eligible pool. Read at each scrape, off the change
// path.
func noRouteCountries(t *routing.Table) int {
	if t == nil {
		return 0
	}
	noRoute := func(cc string) int {
		if e := t.Effective(cc); e != nil && len(e.Candidates) == 0 {
			return 1
		}
		return 0
	}
	n := noRoute(routing.Unknown)
	for _, cc := range routing.Countries() {
		n += noRoute(cc)
	}
	return n
}

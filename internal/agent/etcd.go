package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/relogin"
	"github.com/regiond/regiond/internal/snapshot"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// runEtcd connects to etcd, then runs the mirror, the snapshot writer and
// the status publisher until ctx is done. offline are the gauges that stand
// in for the mirror's until it exists (see registerOfflineGauges).
func (a *Agent) runEtcd(ctx context.Context, offline []prometheus.Collector) error {
	cli := a.dial(ctx)
	if cli == nil {
		return nil // ctx is done
	}
	defer cli.Close()
	ks, _ := keyspace.New(a.cfg.Prefix)
	// The snapshot writer and the status publisher are made first: the
	// mirror's AfterChange calls them. The publisher is given the mirror
	// when it runs; the writer reads it through snapshotSource, from
	// a.mirror, which is set before either runs.
	w := a.newSnapshotWriter()
	pub := newPublisher(cli, ks.Agent(a.cfg.Node), ks.Node(a.cfg.Node), a)
	if w != nil {
		a.writer.Store(w)
		pub.snapshotFailure, pub.snapshotSettled = w.Failure, w.Settled
	}
	mcfg := watch.Config{Client: cli, Prefix: ks.Routing(), Logger: a.log, Registerer: a.registry,
		HealthGrace: a.cfg.HealthGrace, ProgressInterval: a.cfg.ProgressInterval, AfterChange: afterChange(w, pub), User: a.etcdUser(), UserFromCert: a.cfg.Username == "" && a.etcdUser() != "",
		Diagnose: func(ctx context.Context) string {
			return etcddiag.Describe(etcddiag.Check(ctx, a.cfg.Endpoints, a.cfg.TLS))
		}}
	// The mirror's gauges replace the offline ones in one step for a
	// gather, seeded first: its seconds_since_sync never reads "never"
	// for an agent that started from its snapshot.
	a.swapMetrics.Lock()
	a.unregister(offline)
	m, err := watch.New(mcfg)
	if err != nil {
		for _, c := range offline {
			a.registry.MustRegister(c) // the agent stops; its gauges stay until then
		}
	} else if a.seed != nil {
		m.Seed(a.seed, a.seedAt)
	}
	a.swapMetrics.Unlock()
	if err != nil {
		return err
	}
	a.mirror.Store(m)
	close(a.mirrorSet)
	a.etcd.Store(cli)
	a.pub.Store(pub)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { lowerGCUntil(gctx, m.WaitReady); return nil })
	g.Go(func() error { a.awaitEtcd(gctx, cli, m.Ready()); return nil })
	g.Go(func() error { a.warnIfNoPools(gctx, m, ks.Routing()); return nil })
	g.Go(func() error { return m.Run(gctx) })
	if w != nil {
		g.Go(func() error { return w.Run(gctx) })
	}
	g.Go(func() error {
		if len(a.cfg.StatusEndpoints) > 0 {
			// Its own client, dialed here: the mirror does not wait
			// for the status endpoints. pub.cli is the publisher's
			// goroutine's alone (the status page reads a.etcd).
			pub.statusEndpoints, pub.tls = a.cfg.StatusEndpoints, a.cfg.TLS
			scli := a.dialTo(gctx, a.cfg.StatusEndpoints, pub.dialFailed)
			if scli == nil {
				// Stopped during the login there (the status
				// endpoints not reachable yet): a record an earlier
				// run left goes all the same, through pub.cli, still
				// the mirror's client (the same etcd).
				pub.deleteRecord(true)
				return nil
			}
			pub.cli = scli
			defer pub.cli.Close()
		}
		pub.run(gctx, m)
		return nil
	})
	return g.Wait()
}

// warnIfNoPools logs, once the mirror has listed etcd, a first table
// without pools: nothing routes, and the usual cause is a wrong --prefix
// (or no config applied), which the log would otherwise show as a healthy
// start (/readyz says so too). It logs again when pools arrive.
func (a *Agent) warnIfNoPools(ctx context.Context, m *watch.Mirror, routing string) {
	if m.WaitReady(ctx) != nil {
		return
	}
	t := m.Table()
	if t == nil || t.NumPools() > 0 {
		return
	}
	a.log.Warn("the table read from etcd has no pools, so nothing routes: is --prefix right, and was a config applied (regionctl apply)?",
		"routing_prefix", routing, "revision", t.Revision(), "keys_skipped", len(t.Skipped()))
	// Said again once pools arrive: the warning above must not be the
	// last word in the log of an agent that routes (an on-call review
	// read it so).
	for {
		ch := m.Changed()
		if t := m.Table(); t != nil && t.NumPools() > 0 {
			a.log.Info("the table has pools now, so viewers are routed", "pools", t.NumPools(), "revision", t.Revision(), "epoch", t.Epoch())
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// newSnapshotWriter returns the writer of the snapshot file, or nil
// without --snapshot. The writer owns when and from where the file is
// written: an isolated change from the mirror's goroutine, unless blocking
// queries wait for it (they answer first, and the writer's goroutine
// writes after them).
func (a *Agent) newSnapshotWriter() *snapshot.Writer {
	if a.cfg.Snapshot == "" {
		return nil
	}
	return snapshot.New(snapshot.Config{Path: a.cfg.Snapshot, Source: snapshotSource{a}, File: a.seed,
		Refresh: a.snapshotRefresh, EnsureDir: a.ensureSnapshotDir, Yield: func() bool { return a.api.Waiting() > 0 },
		Logger: a.log, Registerer: a.registry})
}

// afterChange is the mirror's AfterChange: the snapshot writer's (w may
// be nil), then the status publisher's. The status key is put from the
// publisher's own goroutine: an etcd write stays off the path that serves
// and writes the change.
func afterChange(w *snapshot.Writer, pub *publisher) func() {
	if w == nil {
		return pub.changed
	}
	return func() {
		w.AfterChange()
		pub.changed()
	}
}

// snapshotSource is the agent's mirror as the snapshot writer's source.
// The writer is made before the mirror (the mirror's AfterChange calls
// it), and used only once the mirror is set.
type snapshotSource struct{ a *Agent }

// Table returns the mirror's table.
func (s snapshotSource) Table() *routing.Table { return s.a.mirror.Load().Table() }

// Changed returns the mirror's channel closed at its next swap.
func (s snapshotSource) Changed() <-chan struct{} { return s.a.mirror.Load().Changed() }

// SyncedAt returns the mirror's Status().SyncedAt: the file's synced_at.
func (s snapshotSource) SyncedAt() time.Time { return s.a.mirror.Load().Status().SyncedAt }

// dialRetryMax bounds the wait between two attempts to reach etcd (or to
// log in): the backoff's cap plus its jitter.
const dialRetryMax = 30 * time.Second

// dialBackoff is the retry policy of dial: 800 ms doubling, with up to
// half again of jitter, never more than dialRetryMax.
func dialBackoff() *backoff.Backoff {
	b := backoff.New(800*time.Millisecond, dialRetryMax)
	b.Jitter = 0.5
	return b
}

// grpcWindow is the agent's gRPC flow-control window, per stream and per
// connection, fixed. gRPC's default window grows by estimating the
// bandwidth: after every response that arrives while no estimate is in
// flight, the client sends the server a PING (and a WINDOW_UPDATE) and
// takes its ACK. A watch's responses come one at a time, so that is a
// round trip more per change, per agent, waking the agent and etcd (or
// the grpc-proxy) for nothing. A fixed window turns the estimation off.
// 4 MiB holds a list page (watch.Config.PageSize, 5,000 keys) of values
// up to ~800 bytes; a larger page flows on as the client reads it (gRPC
// returns window each time a quarter of it is read).
const grpcWindow = 4 << 20

// dial makes the etcd client, retrying with backoff until it can or ctx is
// done (then it returns nil). With --user, making it logs in, which needs
// etcd, within --dial-timeout; without, it does not wait for etcd (see
// awaitEtcd). Meanwhile the API serves the snapshot, marked stale, and
// /v1/status names the error. A refused login is retried too: the
// password may be fixed in etcd (or the user created) without a restart.
func (a *Agent) dial(ctx context.Context) *clientv3.Client {
	cli := a.dialTo(ctx, a.cfg.Endpoints, func(err error, wait time.Duration) { a.dialFailed(ctx, err, wait) })
	if cli != nil {
		a.login.dialRefused.Store(false)
	}
	return cli
}

// dialTo is dial to endpoints, calling failed before each retry.
func (a *Agent) dialTo(ctx context.Context, endpoints []string, failed func(error, time.Duration)) *clientv3.Client {
	bo := dialBackoff()
	opts := []grpc.DialOption{grpc.WithStaticStreamWindowSize(grpcWindow), grpc.WithStaticConnWindowSize(grpcWindow),
		grpc.WithConnectParams(backoff.GRPCReconnect)}
	if a.cfg.Username != "" {
		// After etcd is restored from a backup, it holds the requests
		// carrying a token of before it instead of refusing them: a list
		// retried on its own would time out until a restart.
		opts = append(opts, grpc.WithChainUnaryInterceptor(relogin.Interceptor(relogin.Every)))
	}
	for {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: endpoints, TLS: a.cfg.TLS, Username: a.cfg.Username, Password: a.cfg.Password,
			DialTimeout: a.cfg.DialTimeout, DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
			Logger: zap.NewNop(), Context: ctx, DialOptions: opts,
		})
		if err == nil {
			return cli
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := bo.Next()
		failed(err, wait)
		if backoff.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// awaitEtcd probes etcd until it answers, or the mirror has listed it
// (listed is closed), or ctx is done. Making a client without a login does
// not wait for etcd (its first request makes the connection), so this is
// what finds etcd unreachable, without a leader, or speaking another TLS
// at start: /v1/status names it (dialFailed) while the mirror's first
// list keeps failing, and regiond_agent_etcd_client stays 0. The mirror
// and the snapshot writer run meanwhile (the file's written_at stays
// fresh). The probe is a read of the epoch key, linearizable, within
// --dial-timeout, retried with the dial's backoff; etcd refusing the read
// to the agent's user counts as reached: the mirror reports that
// (watch.Status.Refused).
func (a *Agent) awaitEtcd(ctx context.Context, cli *clientv3.Client, listed <-chan struct{}) {
	ks, _ := keyspace.New(a.cfg.Prefix)
	bo := dialBackoff()
	for reached := false; !reached; {
		pctx, cancel := context.WithTimeout(ctx, a.cfg.DialTimeout)
		_, err := cli.Get(pctx, ks.Epoch(), clientv3.WithCountOnly())
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil || watch.PermissionDenied(err) {
			reached = true
			continue
		}
		select {
		case <-listed: // the mirror's list got its answer meanwhile
			reached = true
			continue
		default:
		}
		wait := bo.Next()
		a.dialFailed(ctx, fmt.Errorf("no answer within --dial-timeout %s: %w", a.cfg.DialTimeout, err), wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-listed:
			t.Stop()
			reached = true
		case <-t.C:
		}
	}
	if a.etcdErr.Swap(nil) != nil {
		a.log.Info("connected to etcd", "endpoints", a.cfg.Endpoints, "user", a.cfg.Username)
	}
	a.login.client.Set(1)
}

// dialFailed reports a failed dial: in the logs (a refused login loudly),
// in /v1/status and, for a refused login, in the metrics. For etcd not
// answering it names what each endpoint's own dial finds (etcddiag): a
// refused connection, a certificate, TLS against plaintext.
func (a *Agent) dialFailed(ctx context.Context, err error, wait time.Duration) {
	var msg string
	if loginRefused(err) {
		msg = fmt.Sprintf("etcd refused the login of user %q at %v: %v; check the user's password ($REGIOND_PASSWORD) and that the user exists in etcd",
			a.cfg.Username, a.cfg.Endpoints, err)
		if store.NoPasswordUser(err) {
			msg = fmt.Sprintf("etcd refused the login of user %q at %v: the user has no password in etcd, it logs in by its client certificate (whose common name is the user): remove --user and $REGIOND_PASSWORD, keep --cert and --key; "+
				"behind etcd's grpc-proxy, which passes no client certificate on, it needs a password: delete the user (etcdctl user delete %s) and run regionctl auth apply --agent %s --passwords, which makes it again with one (%v)",
				a.cfg.Username, a.cfg.Endpoints, a.cfg.Username, a.cfg.Node, err)
		}
		a.login.dialRefused.Store(true)
		a.login.dialRefusals.Add(1)
		a.log.Error("etcd refused the agent's login; serving the last table (stale) and retrying", "user", a.cfg.Username,
			"endpoints", a.cfg.Endpoints, "err", err, "retry_in", wait.Round(time.Millisecond))
	} else {
		msg = fmt.Sprintf("etcd unreachable at %v: %v", a.cfg.Endpoints, err)
		why := etcddiag.Describe(etcddiag.Check(ctx, a.cfg.Endpoints, a.cfg.TLS))
		if why != "" {
			msg += " (" + why + ")"
		}
		a.login.dialRefused.Store(false)
		serving := "serving the last table meanwhile"
		if (source{a}).Table() == nil {
			serving = "no table to serve until it answers (no snapshot file loaded)"
		}
		a.log.Warn("etcd unreachable; "+serving, "endpoints", a.cfg.Endpoints,
			"err", err, "endpoint_errors", why, "retry_in", wait.Round(time.Millisecond))
	}
	a.etcdErr.Store(&msg)
}

// loginRefused reports whether err is etcd refusing the credentials.
func loginRefused(err error) bool {
	return errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrGRPCAuthFailed) ||
		errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) ||
		store.NoPasswordUser(err)
}

// loginMetrics say whether the agent has reached etcd, and count the
// logins etcd refused.
type loginMetrics struct {
	client   prometheus.Gauge
	refused  prometheus.GaugeFunc
	refusals prometheus.CounterFunc
	// dialRefusals and statusRefusals count the refused logins of the
	// first dial's retries and of the status key's puts; refusals sums
	// them with the mirror's (watch.Status.LoginRefusals: the auth
	// restore walk found the total 0 while the gauge said refused).
	dialRefusals, statusRefusals *atomic.Int64
	// dialRefused: etcd refuses the login of the agent's first dial (at
	// start); the mirror says whether it refuses a later one
	// (watch.Status.LoginRefused: the user gone under a running agent).
	dialRefused *atomic.Bool
}

// newLoginMetrics registers the login metrics of a, whose mirror (once
// made) says whether a later login is refused.
func newLoginMetrics(reg prometheus.Registerer, a *Agent) loginMetrics {
	dialRefused := new(atomic.Bool)
	dialRefusals, statusRefusals := new(atomic.Int64), new(atomic.Int64)
	m := loginMetrics{dialRefused: dialRefused, dialRefusals: dialRefusals, statusRefusals: statusRefusals,
		client: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "agent", Name: "etcd_client",
			Help: "1 once the agent has reached etcd (and logged in, with --user) since it started; 0 while it retries, serving its snapshot file (GET /v1/status: etcd_error)."}),
		refused: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "agent", Name: "etcd_login_refused",
			Help: "1 while etcd refuses the agent's login (--user, $REGIOND_PASSWORD), at start or later (the user gone, its password changed): the agent serves its last table and retries."},
			func() float64 {
				if dialRefused.Load() {
					return 1
				}
				if mi := a.Mirror(); mi != nil && mi.Status().LoginRefused {
					return 1
				}
				if p := a.pub.Load(); p != nil && p.loginRefused.Load() {
					return 1
				}
				return 0
			}),
		refusals: prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "agent", Name: "etcd_login_refusals_total",
			Help: "Logins to etcd refused (wrong password, unknown user): the first dial's, the routing watch's and the status key's."},
			func() float64 {
				n := dialRefusals.Load() + statusRefusals.Load()
				if mi := a.Mirror(); mi != nil {
					n += mi.Status().LoginRefusals
				}
				return float64(n)
			}),
	}
	reg.MustRegister(m.client, m.refused, m.refusals)
	return m
}

// registerOfflineGauges registers the mirror's connection and staleness
// gauges (regiond_watch_connected 0, regiond_watch_seconds_since_sync from
// the snapshot's synced_at) for the time before the mirror exists: an agent
// that cannot reach etcd, or whose login is refused, from its start on
// still trips the alerts on them. The mirror registers its own once made.
func (a *Agent) registerOfflineGauges() []prometheus.Collector {
	const ns, sub = "regiond", "watch"
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connected",
			Help: "1 while a created watch follows etcd."}, func() float64 { return 0 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "seconds_since_sync",
			Help: "Seconds since the table was last confirmed current against etcd (-1: never)."},
			func() float64 {
				if a.seedAt.IsZero() {
					return -1
				}
				return time.Since(a.seedAt).Seconds()
			}),
	}
	a.swapMetrics.Lock() // a gather finds both or neither
	defer a.swapMetrics.Unlock()
	for _, c := range cs {
		a.registry.MustRegister(c)
	}
	return cs
}

// unregister removes collectors from the agent's registry.
func (a *Agent) unregister(cs []prometheus.Collector) {
	for _, c := range cs {
		a.registry.Unregister(c)
	}
}

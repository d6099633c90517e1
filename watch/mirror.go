package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
)

// Config configures a Mirror. Client and Prefix are required.
type Config struct {
	// Client is the etcd client; the mirror does not close it.
	Client *clientv3.Client
	// Prefix is the watched prefix, "<root>/routing/"; it must end in '/'.
	Prefix string
	// User is the client's etcd user (its login, or its client
	// certificate's common name), named when etcd refuses it the prefix;
	// "" when it has none.
	User string
	// UserFromCert says User is the client certificate's common name (no
	// login): a refusal then also names what keeps etcd from taking it.
	UserFromCert bool
	// Logger receives the mirror's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the mirror's metrics; nil means none.
	Registerer prometheus.Registerer
	// HealthGrace is the health grace window; zero means 5s.
	HealthGrace time.Duration
	// PageSize is the number of keys per Get page; zero means 5000.
	PageSize int64
	// RequestTimeout bounds each Get and probe, and the wait for etcd to
	// answer a watch's creation; zero means 5s.
	RequestTimeout time.Duration
	// ProgressInterval is how often the mirror asks etcd for a progress
	// notification and checks its connection; a watch that stays silent
	// for three intervals is probed (see the package doc). Zero means 5s.
	ProgressInterval time.Duration
	// NewBackoff returns the retry policy; nil means backoff.Default.
	NewBackoff func() *backoff.Backoff
	// Diagnose, if set, names why etcd does not answer at the client's
	// endpoints, as an operator would read it (the agent's is
	// etcddiag.Check: "127.0.0.1:2379: connection refused"), or returns
	// "" when each took the connection. It is called, bounded by a ctx of
	// RequestTimeout, in the mirror's goroutine, when the connection is
	// lost and when a list or a watch's creation times out without one,
	// and its answer logged as endpoint_errors and kept as
	// Status.Unreachable.
	Diagnose func(ctx context.Context) string
	// AfterChange, if set, is called in the mirror's goroutine after it
	// swapped in a table of new content, built from watch events or from a
	// list that differed from the state (the agent's snapshot Writer.AfterChange and
	// status put). Changed waiters are woken after it returns: what it
	// writes does not compete with them for a CPU (Table returns the new
	// table already; the agent's writer leaves the change to its own
	// goroutine when blocking queries wait for it). The next events wait
	// for it.
	AfterChange func()
}

// Status is the mirror's view of its own freshness.
type Status struct {
	// Revision is the etcd revision the table is known to be current at.
	Revision int64
	// Epoch is the config epoch of the table.
	Epoch int64
	// Connected is true while a watch whose creation etcd (or the
	// grpc-proxy) answered follows etcd: never between a list and the
	// creation of the watch after it.
	Connected bool
	// SyncedAt is when the table was last confirmed current against etcd
	// (for a seeded table, the syncedAt given to Seed); zero if never.
	SyncedAt time.Time
	// Synced is true once the mirror has listed etcd at least once.
	Synced bool
	// ChangeRevision is the revision of the last table built from new
	// content (a list or events); Revision moves past it on progress
	// notifications alone.
	ChangeRevision int64
	// EventRevision is the revision of the newest event (a put or a
	// delete under the prefix) the mirror applied from a watch since it
	// started; 0 before the first. A list does not move it. A delete
	// leaves no key, so this is how the agents' status keys tell
	// regionctl status about it.
	EventRevision int64
	// Refused says that etcd refuses this client's user the prefix
	// (permission denied: its role lost read on it), from the refused
	// list, watch or check until a list or a watch is answered again; ""
	// otherwise. The last good table keeps serving meanwhile.
	Refused string
	// ClusterID is the ID of the etcd cluster the table served was
	// listed from (0: none, or a table from a snapshot file of an agent
	// that did not know it).
	ClusterID uint64
	// LoginRefused: Refused is etcd refusing the client's login
	// (authentication failed: a password changed in etcd, the user gone),
	// not its role.
	LoginRefused bool
	// LoginRefusals counts the logins etcd refused the mirror's lists,
	// watches and checks since it started (each retry one more).
	LoginRefusals int64
	// Unreachable says what the endpoints answered a plain dial
	// (Config.Diagnose) the last time the mirror found itself without a
	// connection to etcd, while it still has none; "" otherwise, and once
	// a diagnosis found every endpoint taking the connection. While
	// disconnected with a connection up, after etcd said it has no
	// leader (a quorum of members down), it says that (noLeaderMsg).
	Unreachable string
}

// noLeaderMsg is Status.Unreachable while the member the client reaches
// has no leader: the connection is up, so no dial says anything.
const noLeaderMsg = "the etcd member answering has no leader: a quorum of members is down or cut off from it (etcdctl endpoint status -w table)"

// Why the mirror is not connected while its connection to etcd is up
// (Status.Unreachable): a silent path, as a member without a leader
// behind etcd's grpc-proxy is (the proxy does not pass "no leader" on),
// and a new watch that is never created, as behind a grpc-proxy with
// authentication on whose shared upstream watch was opened without a
// token (by a watcher from before `etcdctl auth enable`).
const (
	silentReadsMsg    = "etcd takes the connection but answers no read within the request timeout: the member may have lost its leader (behind a grpc-proxy, which does not pass \"no leader\" on: check the proxy's members, etcdctl endpoint status -w table) or be overloaded"
	listTimeoutMsg    = "etcd takes the connection but a page of the list of the prefix got no answer within the request timeout (%s for up to 5,000 keys): etcd or its grpc-proxy may be overloaded (a fleet's agents listing at once, after a restart), or the member lost its leader; listing again with backoff"
	uncreatedWatchMsg = "etcd takes the connection but does not answer the creation of a watch within the request timeout: behind etcd's grpc-proxy with authentication on, the proxy's one upstream stream carries the token of the watcher that opened it, and once that token is not valid (expired: --auth-token-ttl; that watcher connected before auth was enabled; etcd restored or restarted) etcd refuses each new upstream watch (this agent starts its next watch at etcd's revision, after a list when etcd moved on, to join the proxy's live one): restart the proxy, then this agent if it stays disconnected; else the member may have lost its leader or be overloaded"
)

// Mirror keeps a routing.Table equal to the routing prefix of etcd.
type Mirror struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	start   time.Time

	table  atomic.Pointer[routing.Table]
	swapMu sync.Mutex // serializes derive-and-store of the table

	connected     atomic.Bool
	refused       atomic.Pointer[refusal] // see Status.Refused
	loginRefusals atomic.Int64            // see Status.LoginRefusals
	unreach       atomic.Pointer[string]  // see Status.Unreachable
	// leaderless: etcd said no leader since the mirror was last connected.
	leaderless atomic.Bool
	// stalled, since the mirror was last connected, says why with the
	// connection up (silentReadsMsg, uncreatedWatchMsg); nil otherwise.
	stalled   atomic.Pointer[string]
	syncedAt  atomic.Pointer[time.Time] // with the monotonic reading once confirmed here
	eventRev  atomic.Int64              // see Status.EventRevision
	ready     chan struct{}
	readyOnce sync.Once

	chMu    sync.Mutex
	changed chan struct{}

	// Owned by the Run goroutine.
	state     map[string]routing.KV
	applied   int64 // revision the state is known current at
	lastEvent int64 // newest revision seen in a list or an event
	eventSeen int64 // newest revision of an event applied (EventRevision once its table is served)
	// otherHistory: a relist for another history (diverged, another
	// cluster) is due; kept across failed lists until one succeeds.
	otherHistory bool
	beforeSwap   func() // tests only: run just before a compiled table is swapped in
	uncompiled   bool   // state changed since the table was compiled
	// now, if set, is Run's clock for a compaction's relist (tests only:
	// see clock); nil is time.Now.
	now func() time.Time
	// pending holds the events applied to the state since the table was
	// compiled; incremental says they are all of them (no relist since),
	// so the next table can be the current one updated with them.
	pending     []routing.Event
	incremental bool
	// listed holds the last list's KVs, in order, and decoded their
	// values, decoded while the list was read: the compile of the listed
	// state takes them instead of decoding again, then drops them.
	listed  []routing.KV
	decoded *routing.Decoded
	// precompiled, when not nil, delivers the table of listed, compiled
	// while the watch after the list was being created (see
	// Mirror.precompile).
	precompiled <-chan *routing.Table
	clusterID   uint64 // etcd cluster of the last list
	watches     uint64 // watches opened, to give each its own stream
	// downAt is when an attempt that failed found the client without a
	// connection to etcd (noteDown), zero otherwise; a retry's wait ends
	// once it is back (retryWait).
	downAt time.Time
	// otherRange: watch the prefix as [prefix+"\x00", end) rather than
	// [prefix, end). Both hold the same keys (the bare prefix is no key of
	// the state: lists and probes skip it too), but etcd's grpc-proxy keeps
	// one upstream watch per range. See silent.
	otherRange bool
	// stuck: a watch was found behind etcd, or its creation went
	// unanswered, and no watch has delivered since, nor has a probe found
	// the table current (a silence probe). A silent watch opened
	// meanwhile is probed at the next progress tick, not the third, and
	// relists when found behind (ReasonBehind). See silent and uncreated.
	stuck bool
	// unanswered counts the watch creations in a row not answered on a
	// connection up all along (see open).
	unanswered int
	// tokenMisses counts the watches etcd refused for a login token the
	// member did not know (unknownToken) since a watch was last created.
	tokenMisses int
	// progressIgnored: progress requests go unanswered on this path (etcd's
	// grpc-proxy drops them), so none are sent until a notification comes.
	progressIgnored bool
	// progressUnanswered counts the silences since the last progress
	// notification in which etcd was past the watch's start revision
	// (unansweredSilences of them set progressIgnored).
	progressUnanswered int
	// skippedLogged holds the refusal last logged of each key the table
	// skips (guarded by swapMu).
	skippedLogged map[string]string
	// running is set while Run runs: one Run at a time.
	running atomic.Bool
}

// New returns a mirror; call Run to start it.
func New(cfg Config) (*Mirror, error) {
	if cfg.Client == nil {
		return nil, errors.New("watch: Config.Client is nil")
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("watch: Config.Prefix %q must start and end with '/'", cfg.Prefix)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HealthGrace <= 0 {
		cfg.HealthGrace = routing.DefaultHealthGrace
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 5000
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 5 * time.Second
	}
	if cfg.NewBackoff == nil {
		cfg.NewBackoff = backoff.Default
	}
	m := &Mirror{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "watch"),
		start:   time.Now(),
		ready:   make(chan struct{}),
		changed: make(chan struct{}),
		state:   map[string]routing.KV{},
	}
	mt, err := newMetrics(m, cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("watch: register metrics: %w (one Mirror per Registerer; for several, give each its own label: prometheus.WrapRegistererWith(prometheus.Labels{\"mirror\": NAME}, reg))", err)
	}
	m.metrics = mt
	return m, nil
}

// Table returns the current table, or nil before the first list (and
// without a seed). It never blocks, and is safe to call from any
// goroutine. Call it for each request rather than keeping the table: a
// table kept across swaps serves its old state, and, once one of its
// boosts has reached its expires_at or a health grace window has ended,
// rebuilds what it answers at each call (the mirror swaps in a table
// rebuilt once). What a table returns (a Decision's Attrs and Degraded,
// pools, routes, entries) is shared with later tables and must not be
// modified.
func (m *Mirror) Table() *routing.Table { return m.table.Load() }

// Ready is closed once the mirror has listed etcd at least once.
func (m *Mirror) Ready() <-chan struct{} { return m.ready }

// WaitReady waits until the mirror has listed etcd once, or ctx is done.
func (m *Mirror) WaitReady(ctx context.Context) error {
	select {
	case <-m.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("watch: waiting for the first sync: %w", ctx.Err())
	}
}

// Changed returns a channel closed at the next table swap (for a table
// of new content, once Config.AfterChange has returned).
func (m *Mirror) Changed() <-chan struct{} {
	m.chMu.Lock()
	defer m.chMu.Unlock()
	return m.changed
}

// Status returns the mirror's freshness.
func (m *Mirror) Status() Status {
	s := Status{Connected: m.connected.Load(), EventRevision: m.eventRev.Load(), LoginRefusals: m.loginRefusals.Load()}
	if r := m.refused.Load(); r != nil {
		s.Refused, s.LoginRefused = r.msg, r.login
	}
	if u := m.unreach.Load(); u != nil && !s.Connected && !m.transportReady() {
		s.Unreachable = *u
	} else if !s.Connected && m.leaderless.Load() {
		s.Unreachable = noLeaderMsg
	} else if st := m.stalled.Load(); st != nil && !s.Connected && m.transportReady() {
		s.Unreachable = *st // said only while it holds: the connection up
	}
	if t := m.Table(); t != nil {
		// From the table served: a revision stored apart from it could be
		// read between its store and the table's swap (the concurrency
		// review: a status put then said the old revision and the new
		// change, and the change's own put was skipped as already made).
		s.Revision, s.Epoch, s.ChangeRevision, s.ClusterID = t.Revision(), t.Epoch(), t.ChangeRevision(), t.ClusterID()
	}
	if at := m.syncedAt.Load(); at != nil {
		s.SyncedAt = *at
	}
	select {
	case <-m.ready:
		s.Synced = true
	default:
	}
	return s
}

// Seed serves a table loaded from a snapshot file (marked stale) until the
// first list replaces it. syncedAt is when that table was last confirmed
// current against etcd: the agent passes the file's synced_at (its
// written_at for a file that has none), so SyncedAt, and the staleness
// measured from it, survive a restart. It must be called before Run. A
// table loaded from a file carries no last good values: a key refused in
// etcd when the first list comes is served from etcd's history, when it
// still holds a good value (docs/keys-and-values.md, "The limit"), not
// from the seed.
func (m *Mirror) Seed(t *routing.Table, syncedAt time.Time) {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	if m.table.Load() != nil {
		return
	}
	if !syncedAt.IsZero() {
		m.syncedAt.Store(&syncedAt)
	}
	m.store(t)
}

// store swaps in t and wakes Changed waiters. Callers hold swapMu.
func (m *Mirror) store(t *routing.Table) {
	m.swapIn(t)
	m.wakeChanged()
}

// swapIn swaps in t without waking Changed waiters: announce does, after
// AfterChange. Callers hold swapMu.
func (m *Mirror) swapIn(t *routing.Table) {
	m.table.Store(t)
	m.metrics.observeTable(t)
	m.logSkipped(t.Skipped())
}

// logSkipped logs each key the table newly skips (a refused value: the
// last good one serves, if any), once per refusal, and each key no longer
// skipped. Callers hold swapMu.
func (m *Mirror) logSkipped(sk []routing.Skipped) {
	if len(sk) == 0 && len(m.skippedLogged) == 0 {
		return
	}
	now := make(map[string]string, len(sk))
	for _, s := range sk {
		if _, ok := now[s.Key]; ok {
			continue // the first reason of a key reported twice
		}
		now[s.Key] = s.Error
		if m.skippedLogged[s.Key] != s.Error {
			m.log.Warn("value refused; its last good value serves, if it had one", "key", s.Key, "err", s.Error,
				"served_alike", routing.ServedAlike(s.Key))
		}
	}
	for key := range m.skippedLogged {
		if _, ok := now[key]; !ok {
			m.log.Info("value no longer refused", "key", key)
		}
	}
	m.skippedLogged = now
}

// announce tells of a table of new content that recompile swapped in:
// AfterChange first (the snapshot's write), then the Changed waiters.
func (m *Mirror) announce() {
	if m.cfg.AfterChange != nil {
		m.cfg.AfterChange()
	}
	m.wakeChanged()
}

// wakeChanged wakes Changed waiters.
func (m *Mirror) wakeChanged() {
	m.chMu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.chMu.Unlock()
}

// markSynced records that the table is current now. The time keeps its
// monotonic reading, so the ages measured from it in this process
// (staleness, /readyz, seconds_since_sync) do not move with a step of the
// wall clock; a seeded time has none (it is the file's).
func (m *Mirror) markSynced() { m.markSyncedAt(time.Now()) }

// markSyncedAt records that the table served is current as of at: called
// once that table is swapped in, never before (a sync time fresher than
// the table served called an old one fresh: the concurrency review).
func (m *Mirror) markSyncedAt(at time.Time) { m.syncedAt.Store(&at) }

func (m *Mirror) setConnected(c bool) {
	if c {
		m.refused.Store(nil)
		m.unreach.Store(nil)
		m.leaderless.Store(false)
		m.stalled.Store(nil)
	}
	if m.connected.Swap(c) != c {
		m.log.Info("watch connection", "connected", c)
	}
}

// refusal is Status.Refused and Status.LoginRefused.
type refusal struct {
	msg   string
	login bool
	// read: a read's refusal (a probe's, a check's), which a creation
	// that times out does not clear: only a read answered or timed out.
	read bool
}

// refused reports whether err is etcd refusing the client's user a
// request (PermissionDenied) or its login (authentication failed): what
// refuse records.
func refused(err error) bool { return PermissionDenied(err) || authFailed(err) }

// authFailed is etcddiag.AuthFailed.
func authFailed(err error) bool { return etcddiag.AuthFailed(err) }

// refuse records and logs that etcd refused the client's user what (a
// list, watch or check) of the prefix, or its login: Status.Refused until
// a list or a watch is answered again, or times out (etcd holds it: the
// refusal is no longer what is known).
func (m *Mirror) refuse(what string, err error) {
	if authFailed(err) {
		msg := fmt.Sprintf("etcd refuses the login of user %s (authentication failed) for the %s of %s: its password in etcd is not the agent's (changed in etcd, or etcd restored from a backup made before its password was changed: set it again with etcdctl user passwd, as regionctl auth apply keeps an existing user's password), or the user is gone (deleted, or etcd restored from a backup made before it: regionctl auth apply makes the agents' users again, then give the agent the password it sets)",
			m.cfg.User, what, m.cfg.Prefix)
		m.refused.Store(&refusal{msg: msg, login: true, read: what == "read"})
		m.loginRefusals.Add(1)
		m.log.Error(msg+"; keeping the last good table and retrying", "prefix", m.cfg.Prefix, "user", m.cfg.User, "err", err)
		return
	}
	roles := "regionctl auth roles"
	if root, ok := strings.CutSuffix(m.cfg.Prefix, "/routing/"); ok && root != keyspace.DefaultRoot {
		roles = "regionctl --prefix " + root + " auth roles"
	}
	why, who := "permission denied", "to etcd user "+m.cfg.User+": check that its role may read the prefix and is still granted to the user ("+roles+" shows the agents' roles)"
	switch {
	case etcddiag.UserEmpty(err) && m.cfg.UserFromCert:
		// The auth review: a certificate's user behind etcd's grpc-proxy
		// was told to check a role etcd never saw.
		why, who = "user name is empty", "although this client presents a certificate whose common name is "+m.cfg.User+": etcd did not take it as the user, so etcd's grpc-proxy is between them (it passes no client certificate on: there log in with --user and a password, regionctl auth apply --passwords), or etcd runs without --client-cert-auth"
	case etcddiag.UserEmpty(err) && m.cfg.User != "":
		// A login's token missing from the watch's stream: authentication
		// turned on under a stream opened without one.
		why, who = "user name is empty", "although this client logs in as "+m.cfg.User+": its watch stream carries no login token (etcd's authentication turned on under it?); the agent retries, and a restart logs in afresh"
	case etcddiag.UserEmpty(err):
		why, who = "user name is empty", "to a client with no etcd user: etcd's authentication is on; give --user with $REGIOND_PASSWORD, or --cert and --key with a certificate whose common name is an etcd user"
	case m.cfg.User == "":
		who = "to a client with no etcd user: with auth on, give --user, or --cert with a certificate whose common name is an etcd user"
	case m.cfg.UserFromCert:
		// The auth review: behind etcd's grpc-proxy etcd sees the proxy's
		// certificate, without a common name, and refuses that (no) user;
		// a common name that is no etcd user is refused alike.
		who = "to etcd user " + m.cfg.User + " (the common name of this client's certificate): check that " + m.cfg.User + " is an etcd user whose role may read the prefix (etcd restored from a backup made before the user or its grant lacks them; " + roles +
			" shows the agents' roles); if --endpoints is etcd's grpc-proxy, which passes no client certificate on, etcd saw no user at all: log in there with --user and a password (regionctl auth apply --passwords), or point --endpoints at the members"
	}
	msg := fmt.Sprintf("etcd refuses the %s of %s (%s) %s", what, m.cfg.Prefix, why, who)
	m.refused.Store(&refusal{msg: msg, read: what == "read"})
	m.log.Error(msg+"; keeping the last good table and retrying", "prefix", m.cfg.Prefix, "err", err)
}

// noteStalled records why the mirror is not following etcd although its
// connection is up (msg: silentReadsMsg, uncreatedWatchMsg), for Status.
func (m *Mirror) noteStalled(msg string) {
	if m.transportReady() {
		m.stalled.Store(&msg)
	}
}

package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/connectivity"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// statusClock is the time source of the status publisher: a ticker that
// re-checks the status (the connection, the refresh) and the current time.
// Tests inject one that never ticks and never advances, and may follow the
// publisher's waits (observe).
type statusClock struct {
	// newTicker returns a ticker's channel and its stop function.
	newTicker func(d time.Duration) (<-chan time.Time, func())
	now       func() time.Time
	// observe, if set, is told of the publisher's waits, in its goroutine
	// (which it holds while it runs): tests follow the publisher's
	// decisions by it, rather than by timing its puts. what is "retry" (a
	// wait before another attempt at a session; d the backoff's delay),
	// "retry-check" (that wait's check of the connection, before it
	// reads it), "spacing" (a wait out the spacing of changes; d its
	// length), "spacing-kick" (a change woke that wait, before it reads
	// the epoch), "settle" (the snapshot writer has not settled the
	// change due; d the time left to wait for it, none when <= 0) or
	// "delete-check" (the stop's delete of the node record has decided
	// whether it is this run's, before its Txn). nil in production.
	observe func(what string, d time.Duration)
}

// realClock is the wall clock.
var realClock = statusClock{
	newTicker: func(d time.Duration) (<-chan time.Time, func()) {
		t := time.NewTicker(d)
		return t.C, t.Stop
	},
	now: time.Now,
}

// publisher keeps <root>/agents/<node> equal to the agent's status, bound
// to a session lease. A new change of the table is put at once (a change
// that left the epoch as it is at most every quietSpacing); the
// connection is checked every statusCheck. Each put that checks the key
// (the first of a session, an epoch or a connection change, the refresh)
// also puts the status, without a lease, at the node record
// <root>/nodes/<node>, in the same Txn; a clean stop deletes it. A node
// whose status key ended with its lease (cut off from etcd, crashed) is so
// still known to regionctl status and --wait-converged.
type publisher struct {
	cli     *clientv3.Client
	key     string
	record  string // the node record's key
	node    string
	version string
	ttl     time.Duration
	log     *slog.Logger
	clock   statusClock
	// kick is signalled by changed; its one slot coalesces the changes
	// that arrive while a put is in flight into the next put.
	kick chan struct{}
	// quietSpacing is the least time between two puts for changes that
	// did not move the epoch (statusQuietSpacing; tests lengthen it).
	quietSpacing time.Duration
	// beforePut, if set, runs before each put with the instant the
	// publisher decided on it, read from the clock that spaces puts for
	// changes (tests hold a put with it, or check the spacing).
	beforePut func(at time.Time)
	// failed counts the puts that failed since the last that did not
	// (only the first is logged as a warning); failures counts them all.
	failed   int
	failures prometheus.Counter
	// lastErr says why the status key is not published (the last lease
	// or put that failed, and the way out of an etcd alarm); nil once a
	// put succeeds. /v1/status shows it as status_error.
	lastErr atomic.Pointer[string]
	// owned: a put of this session holds the key; conflicts counts the
	// puts that found another agent's lease on it (in this session), and
	// conflictsTotal all of them.
	owned          bool
	conflicts      int
	conflictsTotal prometheus.Counter
	// statusEndpoints are --status-endpoints (nil: the status key goes
	// through the mirror's client), named with what each answered when
	// a lease's grant times out there.
	statusEndpoints []string
	tls             *tls.Config
	// mirrorCli is the client of --endpoints (the mirror's): cli too,
	// without --status-endpoints. With them, the stop deletes the node
	// record through it when cli has no connection (deleteRecord).
	mirrorCli *clientv3.Client
	// lostAt are the times the status key's lease was lost within
	// leaseLossWindow (leaseLost).
	lostAt []time.Time
	// user is the agent's etcd user ("" for none), named when etcd
	// refuses the status key to it.
	user string
	// userFromCert says user is the client certificate's common name
	// (no --user).
	userFromCert bool
	// loginRefused: etcd refuses the login of the status key's client
	// (its password changed in etcd under the running agent, its user
	// gone), until a put or grant passes again; regiond_agent_etcd_login_refused
	// says so, and loginRefusals counts each refusal.
	loginRefused  atomic.Bool
	loginRefusals *atomic.Int64
	// noRecordAt is when etcd last refused the node record to the
	// agent's role (one made before node records, by an older regionctl
	// auth apply), zero while it does not: the status key alone is put,
	// and the record is tried again a statusRefresh later (regionctl auth
	// apply run meanwhile is found without a restart). recordWarned: the
	// refusal was logged (once a run).
	noRecordAt   time.Time
	recordWarned bool
	// recordRev is the revision of this run's last put of the node
	// record (0: none yet): the delete at stop deletes the record while it
	// is that put's. leases are the leases of this run's puts of the
	// record, answered or not: a record at another revision is this run's
	// too when the status key was put in the same revision under one of
	// them (a put etcd applied while its answer was lost).
	recordRev int64
	leases    map[clientv3.LeaseID]bool
	// runLeases are the leases of this run's sessions (keyTaken).
	runLeases map[clientv3.LeaseID]bool
	// recordRetry is how long after a refusal the record is tried again.
	recordRetry time.Duration
	// retry spaces the attempts at a new session after a failed one.
	retry *backoff.Backoff
	// snapshotFailure, if set, says why the snapshot files do not hold
	// the table (snapshot.Writer.Failure): the status's snapshot_error.
	snapshotFailure func() string
	// snapshotSettled, if set, is snapshot.Writer.Settled: a put for a
	// change waits (at most snapshotSettleMax) for the writer to have
	// written it, or failed to, so that the status that confirms the
	// change says whether the files hold it.
	snapshotSettled func(changeRev int64) (bool, <-chan struct{})
}

// snapshotSettleMax bounds how long a status put for a change waits for
// the snapshot writer to settle it: its pacing holds a change back at
// most 200 ms; a write hung past this is reported by the next put.
const snapshotSettleMax = time.Second

// newPublisher returns the publisher of a's status at key. It is made
// before the mirror, whose AfterChange calls its changed; run is given
// the mirror to publish the status of.
func newPublisher(cli *clientv3.Client, key, record string, a *Agent) *publisher {
	return &publisher{cli: cli, mirrorCli: cli, key: key, record: record, node: a.cfg.Node, user: a.etcdUser(), userFromCert: a.cfg.Username == "" && a.etcdUser() != "", version: a.cfg.Version, ttl: a.cfg.StatusTTL,
		log: a.log.With("component", "status"), clock: a.statusClock, kick: make(chan struct{}, 1),
		quietSpacing: cmp.Or(a.statusQuietSpacing, statusQuietSpacing), recordRetry: cmp.Or(a.recordRetry, statusRefresh),
		retry:     cmp.Or(a.statusRetry, backoff.Default()),
		beforePut: a.beforeStatusPut, failures: a.statusPutFailures, conflictsTotal: a.nodeConflicts, loginRefusals: a.login.statusRefusals}
}

// changed tells the publisher that the table may have reached a new
// change. It never blocks: it is called from the mirror's goroutine, after
// the change is served and written (watch.Config.AfterChange).
func (p *publisher) changed() {
	select {
	case p.kick <- struct{}{}:
	default: // a put is already due: it will read the latest status
	}
}

// status is the agent's status key for the mirror's status st and table
// t (nil before the first).
func (p *publisher) status(st watch.Status, t *routing.Table) routing.AgentStatus {
	s := routing.AgentStatus{Node: p.node, Revision: st.Revision, Epoch: st.Epoch, Connected: st.Connected, Version: p.version,
		ChangeRevision: st.EventRevision}
	if !st.SyncedAt.IsZero() {
		s.SyncedAt = st.SyncedAt.UTC().Format(time.RFC3339)
	}
	if st.ClusterID != 0 {
		s.ClusterID = fmt.Sprintf("%x", st.ClusterID)
	}
	if t != nil {
		s.Skipped, s.SkippedAlike, s.SkippedKeys = skippedKeys(t.Skipped())
	}
	if p.snapshotFailure != nil {
		s.SnapshotError = p.snapshotFailure()
	}
	return s
}

// skippedKeys returns how many keys sk names (a key may be listed twice),
// how many of them every agent serves alike (routing.ServedAlike), and the
// first routing.MaxStatusSkippedKeys of them: the others first, so that
// the keys an operator must fix are named, then those served alike, each
// sorted; nil for none.
func skippedKeys(sk []routing.Skipped) (n, alike int, names []string) {
	if len(sk) == 0 {
		return 0, 0, nil
	}
	keys := make([]string, 0, len(sk))
	for _, s := range sk {
		keys = append(keys, s.Key)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var fix, same []string
	for _, k := range keys {
		if routing.ServedAlike(k) {
			same = append(same, k)
		} else {
			fix = append(fix, k)
		}
	}
	names = append(fix, same...)
	return len(names), len(same), slices.Clip(names[:min(len(names), routing.MaxStatusSkippedKeys)])
}

// run publishes the status of m until ctx is done, then deletes the node
// record and revokes the lease so the key goes.
func (p *publisher) run(ctx context.Context, m *watch.Mirror) {
	// run returns only at a stop (ctx done), and the node record goes
	// wherever the stop finds the publisher: before the first list (a
	// record of an earlier run goes too), between leases (the last one
	// lost, the next not granted yet), during the revoke of a lost lease
	// (the shutdown review: each of these returned without the delete,
	// and regionctl status listed the node stopped on purpose LOST).
	deleted := false
	defer func() {
		if !deleted {
			p.deleteRecord(true)
		}
	}()
	// Nothing is put before the first list is served: a put while the
	// mirror lists moves etcd's revision past the list's, so its watch
	// (from the list's revision + 1) would start behind etcd's, and etcd
	// catches such a watch up only every 100 ms: the first changes after
	// the start would wait for it (see watch.Mirror.list).
	if m.WaitReady(ctx) != nil {
		return
	}
	bo := p.retry
	for ctx.Err() == nil {
		sess, err := p.newSession(ctx)
		if err != nil && ctx.Err() != nil {
			return
		}
		if err != nil {
			// No lease, no status key: counted as a failed put (an
			// etcd that turned auth on under a running agent refuses
			// its grants: "user name is empty"), logged once a run.
			p.failed++
			p.failures.Inc()
			p.setErr("no lease for the status key", err)
			p.log.Log(ctx, firstAt(p.failed, slog.LevelWarn), "agent status: no lease for the status key; retrying (logged again at debug level)", p.withHint([]any{"err", err, "failures", p.failed}, err)...)
			if p.waitRetry(ctx, bo, m) != nil {
				return
			}
			continue
		}
		bo.Reset()
		p.publish(ctx, sess, m)
		stopping := ctx.Err() != nil
		again := false
		if stopping {
			again = !p.deleteRecord(false) // before the revoke: the record never outlives the key
			deleted = true
		}
		err = p.revoke(sess.Lease(), stopping) // key goes at once on shutdown
		sess.Orphan()
		if stopping && err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			p.log.Warn(fmt.Sprintf("agent status: cannot revoke the status key's lease at stop: the key stays until its TTL (%s) ends", p.ttl), "key", p.key, "err", err)
		}
		if again {
			// The record changed between the delete's check and its
			// Txn: a put of this run the stop abandoned in flight, which
			// etcd applied meanwhile, can have done it. With the lease
			// revoked no such put lands any more: the check is final
			// (the stop-path review: the node stopped on purpose stayed
			// LOST).
			p.deleteRecord(true)
		}
	}
}

// waitRetry waits out bo's next delay before another attempt at a
// session, or less: until the mirror, seen without a connection during the
// wait, has one again (etcd answers again: a quorum back, its proxy
// restarted). The drills saw the status key come back up to 20 s after
// quorum returned, the delay grown during the outage running out, while
// the abandoned lease's end deleted it meanwhile: regionctl status listed
// live agents LOST.
func (p *publisher) waitRetry(ctx context.Context, bo *backoff.Backoff, m *watch.Mirror) error {
	d := bo.Next()
	p.observe("retry", d)
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	down := !m.Status().Connected
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-tick.C:
			p.observe("retry-check", 0)
			up := m.Status().Connected
			if down && up {
				return nil
			}
			down = down || !up
		}
	}
}

// leaseGrantTimeout bounds the grant of a status key's lease: etcd's
// client waits for a connection without end, and an agent cut off from
// etcd (a path that drops packets, a frozen member) would wait there with
// no failure counted and no status_error.
const leaseGrantTimeout = 5 * time.Second

// newSession grants the status key's lease, within leaseGrantTimeout, and
// keeps it alive until ctx is done or etcd lets it expire.
func (p *publisher) newSession(ctx context.Context) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, leaseGrantTimeout)
	lease, err := p.cli.Grant(gctx, int64(p.ttl/time.Second))
	cancel()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("etcd did not answer within %s: %w", leaseGrantTimeout, err)
		if len(p.statusEndpoints) > 0 {
			// Not the mirror's etcd: say which, and what each answered
			// (a wrong port read as "did not answer" alone).
			dctx, dcancel := context.WithTimeout(ctx, 2*etcddiag.Timeout)
			why := etcddiag.Describe(etcddiag.Check(dctx, p.statusEndpoints, p.tls))
			dcancel()
			err = fmt.Errorf("--status-endpoints %s: %w", strings.Join(p.statusEndpoints, ","), err)
			if why != "" {
				err = fmt.Errorf("%w (%s)", err, why)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return concurrency.NewSession(p.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(p.ttl/time.Second)), concurrency.WithContext(ctx))
}

// leaseLost records that the session's lease ended under the publisher:
// its keep-alives went unanswered for its TTL, so etcd drops the key, and
// regionctl status no longer lists this agent until a new lease is put.
// Lost again and again through --endpoints, it adds a hint
// (proxyLeaseHint).
func (p *publisher) leaseLost() {
	now := time.Now()
	p.lostAt = append(slices.DeleteFunc(p.lostAt, func(t time.Time) bool { return now.Sub(t) > leaseLossWindow }), now)
	msg := fmt.Sprintf("the status key's lease ended (its keep-alives got no answer for its TTL, %s): etcd drops the key, so regionctl status does not list this agent until it gets a new lease", p.ttl)
	if len(p.statusEndpoints) == 0 && len(p.lostAt) >= leaseLossesForHint {
		msg += fmt.Sprintf("; lost %d times in %s: %s", len(p.lostAt), leaseLossWindow, proxyLeaseHint)
		p.log.Warn("agent status: lease lost; starting a new session: "+proxyLeaseHint, "losses", len(p.lostAt), "within", leaseLossWindow)
	} else {
		p.log.Warn("agent status: lease lost; starting a new session")
	}
	p.lastErr.Store(&msg)
}

// A status key's lease lost leaseLossesForHint times within
// leaseLossWindow, through the watch's --endpoints, is named with
// proxyLeaseHint: behind an etcd grpc-proxy, leases renewed through it
// ended every few seconds under a steady stream of writes (the herd
// review: 64 and 96 agents, a write every 200 ms; none through the
// members).
const (
	leaseLossesForHint = 3
	leaseLossWindow    = 10 * time.Minute
	proxyLeaseHint     = "if --endpoints is an etcd grpc-proxy, give --status-endpoints the members' client URLs (the proxy's lease renewal is not reliable; docs/operations.md, etcd and its grpc-proxy)"
)

// statusRefresh is how often a status that only moved with progress
// notifications (revision, synced_at) is re-put: every agent re-putting on
// each notification would bump the revision for all the others, a fleet-wide
// feedback loop of writes.
const statusRefresh = time.Minute

// statusYield is how long a status put waits after a change: the
// change's readers (of the files, blocking queries) get the CPUs first.
const statusYield = 2 * time.Millisecond

// statusSpacing is the least time between two status puts for changes: a
// steady stream of regionctl's writes (each moves the epoch) is reported
// with at most 40 puts a second per agent; an isolated change goes out at
// once.
const statusSpacing = 25 * time.Millisecond

// statusQuietSpacing is the least time between two status puts for
// changes that did not move the epoch: all but regionctl's write verbs (a
// health key put by regionctl heartbeat or an origin's own script, or gone
// with its lease, a boost's key gone with its lease, a key put around
// regionctl). Nobody waits on those (--wait-converged follows the write
// verbs, and each of those moves the epoch), and they come in storms:
// origins flapping in an incident change routing/ tens of times a second,
// and with statusSpacing a fleet of N agents would put N×40 status keys a
// second into etcd just then. With this spacing it is at most N a second.
// An isolated change still goes out at once, and a regionctl write during
// such a storm is not held back by it: it moves the epoch.
const statusQuietSpacing = time.Second

// confirmAfter is how old the synced_at of a put that says connected
// again must be for the next one to be put too (see publish).
const confirmAfter = 2 * time.Second

// statusCheck is how often the publisher looks for what no change signals:
// a connection that came or went, a status due for its refresh.
const statusCheck = time.Second

// publish writes the status of m under one session until it ends or ctx
// is done: when the table reached a new change (watch.Status.
// ChangeRevision moved), at once if the epoch moved with it (a regionctl
// write; puts statusSpacing apart), else at most every quietSpacing; when
// the connection changed, at once or at the next check; and every
// statusRefresh otherwise. One put is in flight at a time.
func (p *publisher) publish(ctx context.Context, sess *concurrency.Session, m *watch.Mirror) {
	tick, stop := p.clock.newTicker(statusCheck)
	defer stop()
	p.owned, p.conflicts = false, 0 // a new session's lease: its first put takes the key
	var last routing.AgentStatus
	var lastChange int64
	var lastAt, lastPut time.Time // lastAt on the publisher's clock; lastPut on the wall clock, for the spacing
	var settleBy time.Time        // the end of the wait for the snapshot writer, for the change due
	written := false
	// confirm: the last put said connected again (a session's first, or
	// the connection back) with a synced_at of before the cut (the watch
	// resumed, not yet confirmed current): the next synced_at is put
	// too, once, not at the refresh a minute later (the status-page
	// review). A synced_at as fresh as a start's list is not re-put: an
	// idle fleet's puts would move each other's revisions.
	confirm := false
	// taken: the status key was deleted, or put under another lease,
	// since this session's puts (keyTaken): put it back at once, checked.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel() // before the revoke at a stop: its delete is not taken for another's
	if p.runLeases == nil {
		p.runLeases = map[clientv3.LeaseID]bool{}
	}
	p.runLeases[sess.Lease()] = true
	taken := p.keyTaken(wctx, sess.Lease(), maps.Clone(p.runLeases))
	retake := false
	for {
		ms := m.Status()
		st := p.status(ms, m.Table())
		// A snapshot file that fails, or is written again, is put at
		// once too: the front doors reading it route by an older table.
		significant := retake || !written || st.Epoch != last.Epoch || st.Connected != last.Connected || ms.ChangeRevision != lastChange ||
			st.SnapshotError != last.SnapshotError || confirm && st.SyncedAt != last.SyncedAt
		// A put for changes alone: statusSpacing after the one before
		// when they moved the epoch (a regionctl write is among them),
		// quietSpacing when they did not.
		change := written && st.Connected == last.Connected && ms.ChangeRevision != lastChange
		onlyChange := change && st.Epoch == last.Epoch
		if change {
			spacing := statusSpacing
			if onlyChange {
				spacing = p.quietSpacing
			}
			if wait := time.Until(lastPut.Add(spacing)); wait > 0 {
				if !p.waitSpacing(ctx, sess, m, wait, onlyChange, last.Epoch) {
					return
				}
				continue // with the status as it is by then
			}
		}
		// Any put of a new change waits for the snapshot writer to settle
		// it, also one that a reconnection makes significant (the watch
		// made again and the table published together: the concurrency
		// review), so its snapshot_error is the file's for that change.
		if written && ms.ChangeRevision != lastChange {
			if wait, ok := p.settleWait(m, &settleBy); ok {
				if !p.waitSettled(ctx, sess, wait) {
					return
				}
				continue // with the status as it is by then
			}
		}
		kick := p.kick
		if significant || !reflect.DeepEqual(st, last) && p.clock.now().Sub(lastAt) >= statusRefresh {
			settleBy = time.Time{}
			lastPut = time.Now()
			// A put for changes that left the epoch as it is is a plain
			// put (a storm of them adds no compare to etcd's work);
			// every other put (a regionctl write, the connection, the
			// refresh) checks that the key is still this session's.
			if p.put(ctx, sess, st, lastPut, !onlyChange || retake) {
				confirm = st.Connected && (!written || !last.Connected) && time.Since(ms.SyncedAt) > confirmAfter
				last, lastChange, written = st, ms.ChangeRevision, true
				retake = false // a failed one is retried at the next check
			} else {
				kick = nil // a failed put is retried at the next check, not per change
			}
			lastAt = p.clock.now()
		}
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			p.leaseLost()
			return
		case <-taken:
			retake = true
		case <-kick:
			// The readers woken by the change (the snapshot file's,
			// blocking queries) get the CPUs first: the put, and etcd's
			// work for it, come after them. A put for a change also
			// waits out the spacing, in the same sleep (one wake-up of
			// this goroutine, not two, for each put of a stream).
			// (A connection that changed meanwhile waits with it: it
			// is put at the next check, statusCheck, anyway.)
			select {
			case <-ctx.Done():
				return
			case <-sess.Done():
				p.leaseLost()
				return
			case <-time.After(max(statusYield, time.Until(lastPut.Add(statusSpacing)))):
			}
		case <-tick:
		}
	}
}

// keyTaken watches the status key while ctx lives and signals the
// returned channel (one slot: signals coalesce) when the key is deleted
// while under another lease than lease, this session's, or put under a
// lease not of this run (run: this run's sessions' leases, lease's
// included; a put of an earlier session that etcd applied after its
// answer was lost is not another agent's). Such a delete is the clean
// stop of another agent with the same --node that held the key last
// (its revoke), the end of an earlier session's lease that held it, or
// a hand's delete of its key: without this, this agent's key stayed
// gone until its next checked put, up to a minute (the runbook walk: a
// regiond run by hand on a node, stopped after seconds, took the node
// out of regionctl status). A put under another lease (that other agent
// starting) is signalled once per session, so two such agents do not
// take the key from each other at every put: after that one, their
// checked puts do (putOwn). The watch starts at the key's revision read
// before this session's first put. A watch that fails (a compacted revision
// after a long cut) is made again, 1 s doubling to 30 s later, one
// refused (a hand-made role that may not read the key) not again in
// the session; the checked puts cover what it missed.
func (p *publisher) keyTaken(ctx context.Context, lease clientv3.LeaseID, run map[clientv3.LeaseID]bool) <-chan struct{} {
	taken := make(chan struct{}, 1)
	signal := func() {
		select {
		case taken <- struct{}{}:
		default:
		}
	}
	// The watch starts at the revision before this session's first put,
	// which follows at once: a watch made from "now" in the goroutine
	// could miss a put of the other agent landing meanwhile (CI: the
	// newcomer missed the running agent's put back, so it never put its
	// own back). Without that revision (the read failed) it starts when
	// it is made.
	var next int64
	gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
	if resp, err := p.cli.Get(gctx, p.key, clientv3.WithCountOnly()); err == nil {
		next = resp.Header.Revision + 1
	}
	gcancel()
	go func() {
		foreignSeen := false
		bo := backoff.New(time.Second, 30*time.Second)
		for ctx.Err() == nil {
			opts := []clientv3.OpOption{clientv3.WithPrevKV()}
			if next > 0 {
				opts = append(opts, clientv3.WithRev(next))
			}
			for resp := range p.cli.Watch(ctx, p.key, opts...) {
				if resp.CompactRevision != 0 {
					next = 0 // compacted past it: from when made again; the checked puts cover the rest
				}
				if err := resp.Err(); err != nil && watch.PermissionDenied(err) {
					p.log.Debug("agent status: etcd refuses the watch of the status key to this agent's role (readwrite on it is regionctl auth apply's); its checked puts find another agent's put or delete", "key", p.key, "err", err)
					return
				} else if err != nil {
					p.log.Debug("agent status: watch of the status key ended; made again", "key", p.key, "err", err)
					break
				}
				bo.Reset()
				for _, ev := range resp.Events {
					next = ev.Kv.ModRevision + 1
					switch {
					case ev.Type == clientv3.EventTypeDelete:
						// Not under this session's lease: the end of that
						// lease is the session's end (sess.Done).
						if ev.PrevKv != nil && clientv3.LeaseID(ev.PrevKv.Lease) != lease {
							signal()
						}
					case !run[clientv3.LeaseID(ev.Kv.Lease)] && !foreignSeen:
						foreignSeen = true
						signal()
					}
				}
			}
			if bo.Wait(ctx) != nil {
				return
			}
		}
	}()
	return taken
}

// putOwn puts v at the status key under lease. Once a put of this
// session holds the key, a put with check goes through a Txn on the key's
// lease: a key found under another lease was written by another agent
// with the same --node, which is logged (an error the first time in a
// session, then at debug level) and counted in
// regiond_agent_node_conflicts_total, and the key is put all the same. A
// key found deleted (its lease ended meanwhile) is put again. Without
// check (a put for a change alone) it is a plain put: the next epoch
// change, connection change or refresh (at most a minute) checks.
func (p *publisher) putOwn(ctx context.Context, v string, lease clientv3.LeaseID, check bool) error {
	record := check && (p.noRecordAt.IsZero() || time.Since(p.noRecordAt) >= p.recordRetry)
	err := p.putOwnOps(ctx, v, lease, check, record)
	if err == nil && record && !p.noRecordAt.IsZero() {
		p.noRecordAt = time.Time{}
		p.log.Info("agent status: the node record is written (the role allows it now)", "key", p.record)
	}
	if err == nil || !record || !watch.PermissionDenied(err) || ctx.Err() != nil {
		return err
	}
	// etcd refuses the whole Txn if either key is refused: the status key
	// alone tells a role from before node records (it passes) from one
	// that lacks the status key too (a role made for another --node,
	// which that put's failure names).
	if err := p.putOwnOps(ctx, v, lease, check, false); err != nil {
		return err
	}
	p.noRecordAt = time.Now()
	if !p.recordWarned {
		p.recordWarned = true
		p.log.Warn("agent status: etcd refuses the node record "+p.record+" to this agent's role (made by a regionctl auth apply older than node records): "+p.authApply()+" adds it (found within a minute, no restart); until then, regionctl status does not know this node once its status key is gone",
			"err", err)
	}
	return nil
}

// deleteRecord deletes the node record at a clean stop: the node leaves
// the fleet's view (a stop that cannot reach etcd leaves it, and regionctl
// status names the node lost until it runs again). A role that may not
// delete it (one from before node records) kept none. Only a record this
// run put goes (ownRecord), or, before this run put one, a record of an
// earlier run while no live agent holds the status key: an agent started
// with a live one's --node by mistake must not take the live one's record
// with it when it stops (the drills: the live agent was missing from
// regionctl status until its next refresh, up to a minute). With
// --status-endpoints, it goes through the mirror's client when the
// status key's has no connection.
//
// A record that changed between the check and the delete is left, and
// said so, only when final; otherwise deleteRecord reports false, for
// the caller to ask again once no put of this run can land (the lease
// revoked). Every other outcome reports true.
func (p *publisher) deleteRecord(final bool) bool {
	if !p.noRecordAt.IsZero() {
		return true
	}
	var err error
	cli := p.stopClient()
	if !connected(cli) {
		// No connection to etcd: the stop does not wait for one (an
		// agent that never reached etcd, or cut off as it stops).
		err = fmt.Errorf("no connection to etcd (%s)", cli.ActiveConnection().GetState())
	} else {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var resp *clientv3.TxnResponse
		var ours clientv3.Cmp
		if ours, err = p.ownRecord(dctx, cli); err == nil {
			p.observe("delete-check", 0)
			resp, err = cli.Txn(dctx).If(ours).Then(clientv3.OpDelete(p.record)).
				Else(clientv3.OpGet(p.record, clientv3.WithCountOnly())).Commit()
		}
		cancel()
		if err == nil && !resp.Succeeded && resp.Responses[0].GetResponseRange().GetCount() == 0 {
			// Deleted already (regionctl agent rm, another agent of the
			// same --node at its stop): nothing left, nothing to say.
			p.log.Debug("agent status: no node record to delete at stop (already gone)", "key", p.record)
		} else if err == nil && !resp.Succeeded && !final {
			p.log.Debug("agent status: the node record changed since the delete's check: checked again after the revoke", "key", p.record)
			return false
		} else if err == nil && !resp.Succeeded {
			p.log.Info("agent status: the node record was written since this run's last put, or is an earlier run's while a status key lives (another agent of the same --node?): left in place", "key", p.record)
		}
	}
	if err != nil && !watch.PermissionDenied(err) && p.recordRev == 0 && len(p.leases) == 0 {
		// This run put no record: one of an earlier run's, if any, stays
		// (after a clean stop there is none).
		p.log.Info("agent status: could not check for a node record of an earlier run at stop", "key", p.record, "err", err)
	} else if err != nil && !watch.PermissionDenied(err) {
		p.log.Warn("agent status: cannot delete the node record at stop: regionctl status names this node lost until it runs again (regionctl agent rm "+p.node+" forgets it)", "key", p.record, "err", err)
	}
	return true
}

// stopClient is the client a stop's requests (the node record's delete,
// the lease's revoke) go through: the status key's, or the mirror's when
// only that one has a connection. --status-endpoints not answering (or
// not reached yet), the mirror's --endpoints reach the same etcd (the
// shutdown review: an earlier run's record stayed, the node stopped on
// purpose listed LOST; the status key lived out its TTL).
func (p *publisher) stopClient() *clientv3.Client {
	if !connected(p.cli) && connected(p.mirrorCli) {
		return p.mirrorCli
	}
	return p.cli
}

// revoke revokes the status key's lease, which deletes the key; at a stop
// through stopClient. A revoke that does not come through within 2 s is
// given up (the key then lives out its TTL).
func (p *publisher) revoke(lease clientv3.LeaseID, stopping bool) error {
	cli := p.cli
	if stopping {
		cli = p.stopClient()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := cli.Revoke(ctx, lease)
	return err
}

// connected reports whether cli has a ready connection to etcd.
func connected(cli *clientv3.Client) bool {
	conn := cli.ActiveConnection()
	return conn == nil || conn.GetState() == connectivity.Ready
}

// ownRecord returns the condition, read through cli, under which the
// node record is this run's to delete at stop: it is at the revision of
// this run's last put of it, or at a revision where the status key was
// put under a lease of this run's puts of the record (the same Txn put
// both: a put etcd applied while its answer was lost, which recordRev
// does not know).
// Before this run put one, it is an earlier run's while no status key
// lives. A record whose revision is compacted away from the status key's
// history is taken as another's.
func (p *publisher) ownRecord(ctx context.Context, cli *clientv3.Client) (clientv3.Cmp, error) {
	at := func(rev int64) clientv3.Cmp { return clientv3.Compare(clientv3.ModRevision(p.record), "=", rev) }
	ours := at(p.recordRev)
	if p.recordRev == 0 {
		ours = clientv3.Compare(clientv3.CreateRevision(p.key), "=", 0)
	}
	if len(p.leases) == 0 {
		return ours, nil
	}
	resp, err := cli.Get(ctx, p.record)
	if err != nil {
		return ours, fmt.Errorf("read the node record: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision == p.recordRev {
		return ours, nil
	}
	rev := resp.Kvs[0].ModRevision
	st, err := cli.Get(ctx, p.key, clientv3.WithRev(rev))
	if err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			return ours, nil
		}
		return ours, fmt.Errorf("read the status key at the node record's revision %d: %w", rev, err)
	}
	if len(st.Kvs) == 1 && st.Kvs[0].ModRevision == rev && p.leases[clientv3.LeaseID(st.Kvs[0].Lease)] {
		return at(rev), nil
	}
	return ours, nil
}

// putOwnOps is putOwn, with the node record when record.
func (p *publisher) putOwnOps(ctx context.Context, v string, lease clientv3.LeaseID, check, record bool) error {
	ops := []clientv3.Op{clientv3.OpPut(p.key, v, clientv3.WithLease(lease))}
	if record {
		ops = append(ops, clientv3.OpPut(p.record, v))
		if p.leases == nil {
			p.leases = map[clientv3.LeaseID]bool{}
		}
		p.leases[lease] = true
	}
	do := func() error {
		if len(ops) == 1 {
			_, err := p.cli.Do(ctx, ops[0])
			return err
		}
		resp, err := p.cli.Txn(ctx).Then(ops...).Commit()
		if err == nil {
			p.recordRev = resp.Header.Revision
		}
		return err
	}
	if !p.owned || !check {
		if err := do(); err != nil {
			return err
		}
		p.owned = true
		return nil
	}
	resp, err := p.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(p.key), "=", lease)).
		Then(ops...).Else(clientv3.OpGet(p.key)).Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		if record {
			p.recordRev = resp.Header.Revision
		}
		return nil
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 && kvs[0].Lease != int64(lease) {
		p.conflicts++
		p.conflictsTotal.Inc()
		p.log.Log(ctx, firstAt(p.conflicts, slog.LevelError), "agent status: another agent publishes as this node (its own lease on the status key): --node must be unique in the fleet, or regionctl status and --wait-converged count one of you only",
			"key", p.key, "node", p.node, "other_lease", fmt.Sprintf("%x", kvs[0].Lease), "lease", fmt.Sprintf("%x", int64(lease)))
	}
	return do()
}

// put writes st under the session's lease and reports whether it did. at
// is when the publisher decided on the put (for beforePut).
func (p *publisher) put(ctx context.Context, sess *concurrency.Session, st routing.AgentStatus, at time.Time, check bool) bool {
	if p.beforePut != nil {
		p.beforePut(at)
	}
	b, _ := json.Marshal(st)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := p.putOwn(pctx, string(b), sess.Lease(), check); err != nil {
		if ctx.Err() == nil {
			p.failed++
			p.failures.Inc()
			// A put of a significant change (epoch, connection,
			// snapshot error, the first) is retried at each
			// statusCheck; a refresh, at the next refresh (a minute:
			// under etcd's NOSPACE alarm an agent at rest fails one put
			// a minute). The first failure is a warning, the rest are
			// for debugging, until a put succeeds again.
			p.setErr("put "+p.key, err)
			p.log.Log(ctx, firstAt(p.failed, slog.LevelWarn), "agent status: put failed; retried at the next check or refresh (logged again at debug level)", p.withHint([]any{"key", p.key, "err", err, "failures", p.failed}, err)...)
		}
		return false
	}
	p.lastErr.Store(nil)
	p.loginRefused.Store(false)
	if p.failed > 0 {
		p.log.Info("agent status: put again", "key", p.key, "failed_before", p.failed)
		p.failed = 0
	}
	return true
}

// dialFailed records that the client of --status-endpoints could not be
// made (a refused login, etcd away): /v1/status's status_error says so,
// and the first failure is a warning.
func (p *publisher) dialFailed(err error, wait time.Duration) {
	p.failed++
	p.failures.Inc()
	p.setErr("connect to --status-endpoints", err)
	p.log.Log(context.Background(), firstAt(p.failed, slog.LevelWarn), "agent status: cannot connect to --status-endpoints; retrying (logged again at debug level)",
		"err", err, "retry_in", wait.Round(time.Millisecond))
}

// setErr records why the status key is not published, and whether etcd
// refused the login.
func (p *publisher) setErr(what string, err error) {
	if etcddiag.AuthFailed(err) {
		p.loginRefused.Store(true)
		if p.loginRefusals != nil { // each refusal, as the dial and the mirror count (the third read)
			p.loginRefusals.Add(1)
		}
	}
	msg := what + ": " + err.Error()
	if h := p.hint(err); h != "" {
		msg += " (" + h + ")"
	}
	p.lastErr.Store(&msg)
}

// hint says what to do about err, a failed lease or put of the status
// key, or "": etcddiag's hint, or, for a refusal, whose role lacks the
// key (an agent whose --node is not the NODE its role was made for has
// every read it needs and no status: it drops out of regionctl status).
func (p *publisher) hint(err error) string {
	if h := etcddiag.Hint(err); h != "" {
		return h
	}
	if etcddiag.AuthFailed(err) {
		// The auth fault review: a password changed in etcd under the
		// running agent was a bare "authentication failed" here, while
		// the watch, checked at its creation only, followed on.
		return fmt.Sprintf("etcd refuses the login of user %s: its password in etcd is not this agent's $REGIOND_PASSWORD (changed in etcd: give the agent the new one and restart it; "+
			"etcd restored from a backup made before the agent's password was changed: set it again, etcdctl user passwd), "+
			"or the user is gone (regionctl auth apply makes it again); the agent's open watch still follows etcd until its connection is made again, then it serves its last table", p.user)
	}
	if !watch.PermissionDenied(err) {
		return ""
	}
	switch {
	case etcddiag.UserEmpty(err) && p.userFromCert:
		// The auth review: a certificate's user behind etcd's grpc-proxy
		// was told to fix the role of a user etcd never saw.
		return fmt.Sprintf("etcd saw no user (user name is empty) although this agent presents a certificate whose common name is %s: "+
			"etcd's grpc-proxy is between them (it passes no client certificate on: give --status-endpoints the members' URLs, or log in with --user and a password), "+
			"or etcd runs without --client-cert-auth", p.user)
	case etcddiag.UserEmpty(err) && p.user != "":
		return fmt.Sprintf("etcd saw no user (user name is empty) although this agent logs in as %s: the request carried no login token (etcd's authentication turned on under it?); retried, and a restart logs in afresh", p.user)
	case etcddiag.UserEmpty(err):
		return "etcd's authentication is on and this agent has no etcd user: give --user with $REGIOND_PASSWORD, or --cert and --key with a certificate whose common name is an etcd user (" +
			p.authApply() + " makes the user and its role)"
	}
	user := p.user
	if user == "" {
		user = "(no user: set --user, or --cert with a certificate whose CN is an etcd user)"
	}
	apply := p.authApply()
	h := fmt.Sprintf("etcd user %s may not write %s: its role must be made for this --node, %s, and granted to the user "+
		"(%s makes role regiond-agent-%s, with your deployment's --role-prefix if it has one, with readwrite on that key, "+
		"and grants it again if it was revoked); is --node right?",
		user, p.key, p.node, apply, p.node)
	if _, other, ok := strings.Cut(p.user, "agent-"); ok && other != p.node && other != "" {
		// The auth review: --node node1 with node-1's user was told to
		// give node-1's user node1's role too, which auth apply refuses
		// (one job per user) and --revoke-extra would take from node-1.
		h = fmt.Sprintf("user %s is named for the agent of node %s, not of --node %s: is --node right? Run each node's agent as its own user; ", p.user, other, p.node) + h
	}
	if p.userFromCert {
		h += " (" + p.user + " is the common name of this agent's certificate: if the status key's endpoints are etcd's grpc-proxy, which passes no client certificate on, etcd saw no user at all: " +
			"give --status-endpoints the members' URLs, or log in with --user and a password)"
	}
	return h
}

// rolePrefixRE is a --role-prefix a user's name can show: letters,
// digits, '.', '_' and '-', ending in '-' (as regionctl's roles are named).
var rolePrefixRE = regexp.MustCompile(`^[A-Za-z0-9._-]*-$`)

// authApply is the regionctl command that makes this agent's role: with
// the agent's --prefix when it is not the default (the RBAC review: the
// hint made a role of the default root), and the --role-prefix its user's
// name shows (a user regiond-agent-NODE is the default's; up-agent-NODE
// was made with --role-prefix up-: the operations review), or its user
// named when the name shows no prefix.
func (p *publisher) authApply() string {
	cmd := "regionctl"
	if root := strings.TrimSuffix(p.key, "/agents/"+p.node); root != keyspace.DefaultRoot {
		cmd += " --prefix " + root
	}
	cmd += " auth apply"
	agent := " --agent " + p.node
	rolePrefix, ok := strings.CutSuffix(p.user, "agent-"+p.node)
	switch {
	case ok && rolePrefix == "regiond-":
	case ok && rolePrefixRE.MatchString(rolePrefix):
		cmd += " --role-prefix " + rolePrefix
	case p.user != "" && strings.ContainsAny(p.user, " '\t\"$`\\&|;<>()*?"):
		agent = " --agent '" + p.node + "=" + strings.ReplaceAll(p.user, "'", `'\''`) + "'" // quoted for the shell
	case p.user != "":
		agent += "=" + p.user // a name that shows no prefix (agent-NODE): the user named
	}
	return cmd + agent
}

// statusError says why the status key is not published, or "".
func (p *publisher) statusError() string {
	if e := p.lastErr.Load(); e != nil {
		return *e
	}
	return ""
}

// firstAt is the level of the n-th log line of a repeated failure: level
// for the first, debug for the rest (the failure is retried every second:
// the journal gets it once, its metric counts every one).
func firstAt(n int, level slog.Level) slog.Level {
	if n > 1 {
		return slog.LevelDebug
	}
	return level
}

// waitSpacing waits d, the spacing before a put for changes, and reports
// whether to go on (false: ctx is done or the session ended). While the
// changes waited on left the epoch as it is (quiet), a change that moves
// it (a regionctl write) ends the wait, after statusYield; others only
// wake it.
func (p *publisher) waitSpacing(ctx context.Context, sess *concurrency.Session, m *watch.Mirror, d time.Duration, quiet bool, epoch int64) bool {
	p.observe("spacing", d)
	t := time.NewTimer(d)
	defer t.Stop()
	var kick chan struct{}
	if quiet {
		kick = p.kick
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-sess.Done():
			p.leaseLost()
			return false
		case <-t.C:
			return true
		case <-kick:
			p.observe("spacing-kick", 0)
			if m.Status().Epoch != epoch {
				return sleep(ctx, statusYield)
			}
		}
	}
}

// sleep waits d or until ctx is done, and reports whether ctx is not.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// withHint appends the hint for err (hint) to a log line's attributes,
// when it has one (an empty hint="" says nothing).
func (p *publisher) withHint(attrs []any, err error) []any {
	if h := p.hint(err); h != "" {
		return append(attrs, "hint", h)
	}
	return attrs
}

// settleWait returns, for a put of the change m's table holds, the
// snapshot writer's channel to wait on before it, and true while the
// writer has not settled that change and the wait, counted from the first
// call for it (*by), has not reached snapshotSettleMax.
func (p *publisher) settleWait(m *watch.Mirror, by *time.Time) (<-chan struct{}, bool) {
	t := m.Table()
	if p.snapshotSettled == nil || t == nil {
		return nil, false
	}
	ok, ch := p.snapshotSettled(t.ChangeRevision())
	if ok {
		return nil, false
	}
	if by.IsZero() {
		*by = time.Now().Add(snapshotSettleMax)
	}
	left := time.Until(*by)
	p.observe("settle", left)
	return ch, left > 0
}

// observe tells the clock's observer, if any, of a wait (statusClock).
func (p *publisher) observe(what string, d time.Duration) {
	if p.clock.observe != nil {
		p.clock.observe(what, d)
	}
}

// waitSettled waits for the snapshot writer's next settling, at most
// snapshotSettleMax; false when ctx is done or the session ended.
func (p *publisher) waitSettled(ctx context.Context, sess *concurrency.Session, settled <-chan struct{}) bool {
	timer := time.NewTimer(snapshotSettleMax)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-sess.Done():
		p.leaseLost()
		return false
	case <-settled:
	case <-timer.C:
	}
	return true
}

package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/etcddiag"
)

// stream is one watch of the prefix whose creation etcd answered.
type stream struct {
	ctx context.Context // the watch's: require-leader metadata, also for its reads
	// watcher is the watch's own: its Close ends every gRPC stream it
	// made, also one a progress request made after etcd ended the watch
	// (clientv3 then opens a new stream for the context, detached from its
	// cancellation, that nothing else would ever close).
	watcher    clientv3.Watcher
	cancel     func() // cancels ctx and closes watcher
	ch         clientv3.WatchChan
	start      int64     // the first revision it watches
	opened     time.Time // when its creation was answered
	heard      time.Time // when it last answered, or a probe confirmed the table
	probedPast bool      // a probe found etcd's revision at or past start
	answered   bool      // it delivered a response after its creation
}

// createTimeout is the create failures metric's reason for a creation not
// answered within RequestTimeout.
const createTimeout = "timeout"

// publishWait bounds how long a listed table waits for its watch's
// creation before it is published anyway (see Mirror.list).
const publishWait = 50 * time.Millisecond

// healthyAfter is how long a created watch must last for its end not to
// count as a failure: a watch created and ended at once, over and over,
// backs off like a creation that fails.
const healthyAfter = time.Second

// follow watches from the applied revision until a relist is needed, and
// returns its reason ("" once ctx is done). A watch that ends is opened
// again from the applied revision at once, once etcd's prefix at that
// revision is checked to be the state (verify); only attempts that keep
// failing back off. The first retries are immediate, two per other endpoint:
// clientv3 sends each new stream to its next endpoint, so a member without
// a leader is left for one that has one.
func (m *Mirror) follow(ctx context.Context, bo *backoff.Backoff, publish func()) string {
	quick := max(1, 2*(len(m.cfg.Client.Endpoints())-1))
	failures := 0
	for again := false; ctx.Err() == nil; again = true {
		// After the first, the watch before this one ended: the etcd
		// answering now may hold another history (see verify).
		s, why := m.open(ctx, publish, again)
		publish = nil
		if s == nil {
			if ctx.Err() != nil || relists(why) {
				return why
			}
			m.setConnected(false)
			if failures++; failures > quick && m.retryWait(ctx, bo) != nil {
				return ""
			}
			continue
		}
		why, s = m.serve(ctx, s)
		s.cancel()
		m.noteDown()
		m.setConnected(false)
		healthy := s.followed(why, time.Now())
		if healthy {
			bo.Reset()
		}
		if ctx.Err() != nil || relists(why) {
			return why
		}
		if healthy {
			failures = 0
		} else {
			failures++
		}
		m.metrics.reopens.WithLabelValues(why).Inc()
		m.log.Info("watching again from the applied revision", "reason", why, "applied_revision", m.applied)
		if failures > quick && m.retryWait(ctx, bo) != nil {
			return ""
		}
	}
	return ""
}

// followed reports whether s, ended at now for why, was a success for the
// backoff. A watch that lasted is one: what failed before it (lists,
// opens) says nothing about the next attempts, which start over at the
// backoff's first delay instead of where earlier failures left it (up to
// 30 s: one list failing after a compaction would then leave the agent
// that long behind). A watch found stuck behind a proxy (behind,
// uncreated) lasted without following: no success, or a stuck agent
// would relist, a full list each time, every few seconds at the
// backoff's first delay (the diff review saw it every ~6 s).
func (s *stream) followed(why string, now time.Time) bool {
	return now.Sub(s.opened) >= healthyAfter && why != ReasonBehind && why != ReasonUncreated
}

// open creates a watch from applied+1 and waits, up to RequestTimeout, for
// its creation to be answered (by etcd, or by the grpc-proxy joining it to
// a watch it already has). Only then is the mirror connected. It returns
// the watch, or why there is none. publish, if not nil, is called once
// the creation is answered, or publishWait after it was asked, whichever
// comes first (see Mirror.list), and in any case before open returns.
// With check, the watch is kept only once verify finds etcd's prefix at
// the applied revision to be the state; a failed check counts as a failed
// creation. A creation not answered on a connection up all along may end
// in a relist reason (see uncreated).
func (m *Mirror) open(ctx context.Context, publish func(), check bool) (*stream, string) {
	p := newDuePublish(publish)
	defer p.now()
	ready := m.transportReady()
	s, chc := m.startWatch(ctx)
	misses := m.tokenMisses
	created, why := m.awaitCreation(ctx, s, chc, p)
	if created && check {
		if why = m.verify(s.ctx); why != "" {
			created = false
		}
	}
	if !created {
		m.abandon(ctx, s, chc, why, m.abandonLevel(misses))
		if why == createTimeout && ready && m.transportReady() && ctx.Err() == nil {
			// Not answered on a connection up all along, twice in a row
			// (once alone is as likely a loaded etcd, which a relist
			// would load more): see uncreated. The count starts over
			// once the probe has acted on the pair.
			if m.unanswered++; m.unanswered >= 2 {
				m.unanswered = 0
				if r := m.uncreated(ctx); r != "" {
					why = r
				}
			}
		} else {
			m.unanswered = 0 // failed otherwise: the row is broken
		}
		return nil, why
	}
	m.unanswered, m.tokenMisses = 0, 0
	s.opened = time.Now()
	s.heard = s.opened
	m.downAt = time.Time{}
	m.setConnected(true)
	return s, ""
}

// duePublish is a listed table's publish while the watch after the list
// is opened: due when the creation is answered, or publishWait after it
// was asked, whichever comes first (see Mirror.list).
type duePublish struct {
	f     func() // nil once called, or when there is nothing to publish
	timer *time.Timer
	due   <-chan time.Time // fires publishWait after the watch was asked for; nil with f
}

// newDuePublish starts publishWait for f; f may be nil (nothing to publish).
func newDuePublish(f func()) *duePublish {
	p := &duePublish{f: f}
	if f != nil {
		p.timer = time.NewTimer(publishWait)
		p.due = p.timer.C
	}
	return p
}

// now publishes, unless that was done already or there is nothing to
// publish.
func (p *duePublish) now() {
	if p.f == nil {
		return
	}
	f := p.f
	p.timer.Stop()
	p.f, p.due = nil, nil
	f()
}

// startWatch asks for a watch of the prefix from applied+1 and returns it
// (its channel not yet known) with the channel that delivers the watch's
// channel. clientv3's Watch returns only once the creation is answered, or
// its context ends: with no endpoint reachable it waits for good, so it is
// called from a goroutine of its own.
func (m *Mirror) startWatch(ctx context.Context) (*stream, <-chan clientv3.WatchChan) {
	// Each watch gets its own gRPC stream, from a Watcher of its own and
	// under metadata of its own (clientv3 shares streams between watches
	// with equal metadata): a new watch must not join the stream of the
	// one it replaces while that stream shuts down, or it is closed too.
	m.watches++
	wctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
		"regiond-watch", strconv.FormatUint(m.watches, 10)))
	wt := clientv3.NewWatcher(m.cfg.Client)
	s := &stream{ctx: wctx, watcher: wt, start: m.applied + 1}
	s.cancel = func() {
		cancel()
		wt.Close() // its error is the cancellation's
	}
	key := m.cfg.Prefix
	if m.otherRange {
		key = m.firstKey()
	}
	chc := make(chan clientv3.WatchChan, 1)
	go func() {
		chc <- wt.Watch(wctx, key, clientv3.WithRange(clientv3.GetPrefixRangeEnd(m.cfg.Prefix)), clientv3.WithRev(s.start),
			clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	}()
	return s, chc
}

// awaitCreation waits, up to RequestTimeout, for the first response of the
// watch s, whose channel chc delivers once clientv3's Watch returns, and
// publishes p when it is due meanwhile. It reports whether the response
// answered the creation, and else why not ("" once ctx is done).
func (m *Mirror) awaitCreation(ctx context.Context, s *stream, chc <-chan clientv3.WatchChan, p *duePublish) (bool, string) {
	deadline := time.Now().Add(m.cfg.RequestTimeout)
	timer := time.NewTimer(m.cfg.RequestTimeout)
	defer timer.Stop()
	var first <-chan clientv3.WatchResponse // nil until Watch returned
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-timer.C:
			return false, createTimeout
		case s.ch = <-chc:
			first = s.ch
		case <-p.due:
			// The publish (a compile, history reads) is this process's
			// time, not etcd's: the creation's wait is not counted down
			// meanwhile, or a watch etcd created during a long publish
			// could be dropped as a timeout (the select picks at random
			// between a fired timer and the answer).
			began := time.Now()
			p.now()
			deadline = deadline.Add(time.Since(began))
			timer.Reset(time.Until(deadline))
		case resp, ok := <-first:
			if why := m.created(resp, ok); why != "" {
				return false, why
			}
			return true, ""
		}
	}
	return false, ""
}

// abandonLevel is the level of the "watch not created" line of a
// creation that failed while misses watches had been refused for an
// unknown token before it: INFO when this one was the first such refusal
// in a row (see tokenMiss), WARN otherwise.
func (m *Mirror) abandonLevel(misses int) slog.Level {
	if misses == 0 && m.tokenMisses == 1 {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// abandon ends the watch s whose creation was not answered, or whose
// check failed, why ("" when ctx is done): it cancels it and waits for
// clientv3's Watch to return, which it does once its context is
// cancelled, so no goroutine of it outlives open. A failure that does not
// relist is counted and logged at level, a timeout with what the
// endpoints answer when the connection is down (unreachable).
func (m *Mirror) abandon(ctx context.Context, s *stream, chc <-chan clientv3.WatchChan, why string, level slog.Level) {
	s.cancel()
	if s.ch == nil {
		<-chc
	}
	m.noteDown()
	if why == createTimeout {
		// etcd holds the creation: an earlier refusal of a list or watch
		// is no longer what is known. One of a read since (a probe's) is:
		// behind a grpc-proxy, creations can go unanswered while reads
		// are refused (it flapped, set by every second creation's probe).
		if r := m.refused.Load(); r == nil || !r.read {
			m.refused.Store(nil)
		}
	}
	if why != "" && !relists(why) {
		m.metrics.openFailures.WithLabelValues(why).Inc()
		attrs := []any{"reason", why, "applied_revision", m.applied}
		if why == createTimeout {
			attrs = append(attrs, m.unreachable(ctx)...)
			m.noteStalled(uncreatedWatchMsg)
		}
		m.log.Log(ctx, level, "watch not created", attrs...)
	}
}

// created checks the first response of a new watch: "" when it answers the
// creation, else why the watch is not there.
func (m *Mirror) created(resp clientv3.WatchResponse, ok bool) string {
	switch {
	case !ok:
		return ReasonClosed
	case resp.Err() != nil:
		return m.watchError(resp)
	case resp.Canceled || !resp.Created:
		return ReasonClosed
	case resp.Header.GetClusterId() != 0 && resp.Header.GetClusterId() != m.clusterID:
		m.log.Warn("watch answered by another etcd cluster than the list", "cluster_id", fmt.Sprintf("%x", resp.Header.GetClusterId()))
		return ReasonCluster
	}
	return ""
}

// watchError classifies a watch response carrying an error.
func (m *Mirror) watchError(resp clientv3.WatchResponse) string {
	err := resp.Err()
	if resp.CompactRevision > 0 || errors.Is(err, rpctypes.ErrCompacted) {
		m.log.Warn("watch compacted", "compact_revision", resp.CompactRevision, "applied_revision", m.applied)
		return ReasonCompacted
	}
	if refused(err) {
		m.refuse("watch", err)
		return ReasonPermission
	}
	if unknownToken(err) {
		m.tokenMiss(err)
		return ReasonError
	}
	m.log.Warn("watch error", "err", err)
	if errors.Is(err, rpctypes.ErrNoLeader) {
		m.leaderless.Store(true)
		return ReasonNoLeader
	}
	return ReasonError
}

// Logged when etcd refuses a watch for a login token the member does not
// know (unknownToken): the first time in a row at INFO, tokenMissMsg,
// then at WARN, tokenMissAgainMsg.
const (
	tokenMissMsg      = "etcd member did not know the login token (it had not applied the login yet, or restarted since it: etcd's simple tokens); logging in again"
	tokenMissAgainMsg = "etcd member did not know the login token, again; logging in again: a member that keeps refusing new logins lags behind the others (etcdctl endpoint status -w table: its raft applied index); etcd --auth-token jwt tokens are known to every member at once"
)

// unknownToken reports whether err is etcd refusing a watch for a login
// token the member does not know ("invalid auth token"). With etcd's
// simple tokens (its default --auth-token), clientv3 logs in before it
// opens each watch stream, and the login goes to one member while the
// stream may go to another (it round-robins the endpoints). Each member
// learns a token when it applies the login, but checks a token only
// against the raft index before that login (etcd v3.7.3: the token is
// named after the consistent index as the login is applied, the index of
// the entry before it; etcd issue 18437): a member that has applied that
// entry but not the login refuses the token, at once. A member restarted
// since a login knows none of the tokens before it. Either way the next
// watch logs in again, and its creation succeeds.
func unknownToken(err error) bool {
	return etcddiag.InvalidToken(err)
}

// tokenMiss logs a watch refused for an unknown token (unknownToken): at
// INFO the first time since a watch was last created, a race of etcd's
// that the next watch's login ends; at WARN when it repeats, as a member
// that does not catch up would.
func (m *Mirror) tokenMiss(err error) {
	m.tokenMisses++
	if m.tokenMisses == 1 {
		m.log.Info(tokenMissMsg, "err", err)
		return
	}
	m.log.Warn(tokenMissAgainMsg, "err", err, "in_a_row", m.tokenMisses)
}

// PermissionDenied reports whether etcd refused a request to the client's
// user, or to a client without a user while its authentication is on
// ("user name is empty"): as an error, or as the reason a watch was
// cancelled with (its text).
func PermissionDenied(err error) bool { return etcddiag.Refused(err) }

// serve follows s, and the watches that replace it when it falls silent,
// until one must end; it returns why, and the last watch.
func (m *Mirror) serve(ctx context.Context, s *stream) (string, *stream) {
	tick := time.NewTicker(m.cfg.ProgressInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", s
		case resp, ok := <-s.ch:
			if why := m.drain(s.ch, resp, ok); why != "" {
				return why, s
			}
			s.heard, s.answered, m.stuck = time.Now(), true, false
		case <-tick.C:
			if !m.transportReady() {
				m.log.Warn("no connection to etcd; watching again once there is one",
					append([]any{"applied_revision", m.applied}, m.unreachable(ctx)...)...)
				return ReasonDisconnected, s
			}
			if since := time.Since(s.heard); since < m.silentAfter() {
				// A watch heard within the last interval marked the
				// table synced then: no request (etcd's grpc-proxy drops
				// each with an ERROR in its log, ~600 lines a second for
				// 3,000 agents under a steady stream of changes: the herd
				// review).
				if since >= m.cfg.ProgressInterval {
					m.requestProgress(s)
				}
				continue
			}
			next, why := m.silent(ctx, s)
			if next == nil {
				return why, s
			}
			if next != s {
				s.cancel() // make before break: next is created
				s = next
			}
		}
	}
}

// silentAfter is how long a watch may answer nothing before a probe asks
// etcd whether it is behind: until the third progress tick, or, while the
// mirror is stuck (a watch found behind or not created, none heard since),
// the first.
func (m *Mirror) silentAfter() time.Duration {
	if m.stuck {
		return m.cfg.ProgressInterval / 2
	}
	return 3*m.cfg.ProgressInterval - m.cfg.ProgressInterval/2
}

// transportReady reports whether the client has a connection to some
// endpoint. With none (the member or the proxy went away, or gRPC
// keepalive found the connection dead), no watch stream is alive, although
// clientv3 keeps the watch's channel open to resume it later, silently.
func (m *Mirror) transportReady() bool {
	conn := m.cfg.Client.ActiveConnection()
	return conn == nil || conn.GetState() == connectivity.Ready
}

// unreachable returns, as log attributes, and keeps as Status.Unreachable,
// what the endpoints answer when
// the client has no connection to etcd: "endpoint_errors" from
// Config.Diagnose (a refused connection, a certificate, TLS against a
// plaintext port), or nothing (connected, no Diagnose, or every endpoint
// took the connection). gRPC says only that a deadline passed.
func (m *Mirror) unreachable(ctx context.Context) []any {
	if m.cfg.Diagnose == nil || m.transportReady() || ctx.Err() != nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	defer cancel()
	why := m.cfg.Diagnose(dctx)
	if why == "" {
		m.unreach.Store(nil) // each endpoint took the connection: what it said before is past
		return nil
	}
	m.unreach.Store(&why)
	return []any{"endpoint_errors", why}
}

// noteDown records, once, when an attempt that failed found the client
// without a connection to etcd (Mirror.downAt).
func (m *Mirror) noteDown() {
	if m.downAt.IsZero() && !m.transportReady() {
		m.downAt = time.Now()
	}
}

// retryWait waits before the next attempt after a failure: bo's delay,
// cut short once the client's connection, lost (since downAt, or during
// the wait) for backoff.MinOutage, is back (backoff.WaitConn). After a
// long outage the delay has grown to its cap (30 s); a watch that waited
// it out left the agent that long behind an etcd that was back. downAt is
// spent: a next failure with the connection up waits its whole delay (an
// etcd back without a leader yet is not retried in a loop).
func (m *Mirror) retryWait(ctx context.Context, bo *backoff.Backoff) error {
	err := bo.WaitClient(ctx, m.cfg.Client, m.downAt)
	m.downAt = time.Time{}
	return err
}

// requestProgress asks etcd to tell s's revision, unless the path to etcd
// is known to drop such requests.
func (m *Mirror) requestProgress(s *stream) {
	if m.progressIgnored {
		return
	}
	rctx, cancel := context.WithTimeout(s.ctx, m.cfg.RequestTimeout)
	defer cancel()
	if err := s.watcher.RequestProgress(rctx); err != nil {
		m.log.Debug("progress request failed", "err", err)
	}
}

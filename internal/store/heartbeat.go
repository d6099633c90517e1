package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/routing"
)

// HeartbeatConfig names the health marker kept alive by Heartbeat.
type HeartbeatConfig struct {
	// Pool and Instance name the marker, health/<pool>/<instance>; Addr is
	// the instance's address, written in its value.
	Pool, Instance, Addr string
	// TTL is the lease TTL: how long the marker outlives a killed process.
	TTL time.Duration
	// OnUp, if set, is called each time the marker is (re)written, with
	// its lease and the TTL etcd granted that lease: etcd raises a TTL
	// below its minimum (1.5 election timeouts, rounded up: 2 s at the
	// default 1 s), so it may exceed TTL.
	OnUp func(lease int64, granted time.Duration)
	// Explain, if set, adds the caller's advice to a refusal (a
	// *PermissionError, or a login etcd no longer takes) met while
	// putting the marker back after a lost lease, before it is logged:
	// the command knows where the heartbeat's credentials are set.
	Explain func(err error) error
}

// MaxHeartbeatTTL is the longest TTL Heartbeat takes: a killed origin
// counts as live for up to its TTL. It keeps the TTL within etcd's
// maximum lease TTL and its rounding to seconds from overflowing.
const MaxHeartbeatTTL = 24 * time.Hour

// HeartbeatTakenError means a starting heartbeat found its marker held
// under another live lease with another address: another process keeps
// the same pool and instance (two origins started with one --instance),
// or this instance was restarted with a new address while its old lease
// lives on. Nothing was written; the lease granted for it was revoked.
type HeartbeatTakenError struct {
	// Key is the marker's full etcd key; Instance its instance id.
	Key, Instance string
	// Addr is this heartbeat's address, OtherAddr the one in the marker
	// ("" when its value holds none).
	Addr, OtherAddr string
	// OtherLease is the lease holding the marker.
	OtherLease int64
	// OtherTTL is that lease's remaining life and OtherGranted its granted
	// TTL (0 when they could not be read).
	OtherTTL, OtherGranted time.Duration
}

// Error names the key, the other lease and address, the likely causes and
// what to do about each.
func (e *HeartbeatTakenError) Error() string {
	other := "no addr"
	if e.OtherAddr != "" {
		other = "addr " + e.OtherAddr
	}
	ends := "within its TTL"
	if e.OtherTTL > 0 {
		ends = fmt.Sprintf("within %s", e.OtherTTL)
		if e.OtherGranted > 0 {
			ends += fmt.Sprintf(" (what remains of its %s TTL)", e.OtherGranted)
		}
	}
	return fmt.Sprintf("%s is held by live lease %x with %s, not this heartbeat's %s; nothing written. "+
		"Either two origins run with --instance %s (give each its own: --instance must be unique within the pool), "+
		"or this instance restarted with a new --addr and its old heartbeat's lease ends %s: then start it again after that "+
		"(under systemd it is restarted until it takes the key)",
		e.Key, e.OtherLease, other, e.Addr, e.Instance, ends)
}

// Heartbeat keeps <root>/routing/health/<pool>/<instance> alive under a
// concurrency.Session until ctx ends, then revokes the lease so the marker
// disappears at once. When the lease is lost (etcd unreachable past the
// TTL), it grants a new one and writes the marker again. It needs nothing
// but readwrite on <root>/routing/health/<pool>/ (Roles.Origin); a
// refused put at its start is a *PermissionError, returned at once.
//
// The marker's since is when it was put after being absent (or held by
// another): the start, or the return after a lost lease that etcd ended
// (the key was gone: the instance counted as dead); a key found under the
// lease this process lost, still alive in etcd, keeps its since.
//
// A refusal after a lost lease (etcd's authentication turned on under a
// heartbeat without credentials, its role revoked, its password changed)
// is not returned: it is logged at ERROR (through c.Explain) once, at
// debug level while it repeats, and retried 1 s doubling to 30 s apart,
// so grants put right in etcd are picked up; the marker is gone meanwhile.
//
// Its first put is a Txn: a marker held under another live lease is taken
// over only when it holds the same address (this instance restarted after
// a crash, its old lease alive for up to a TTL); with another address it
// returns a *HeartbeatTakenError and writes nothing. A marker put without
// a lease is taken over. After a lost lease the marker is put whatever
// holds it (logged as an error when another heartbeat's, with another
// address, did).
func (s *Store) Heartbeat(ctx context.Context, c HeartbeatConfig) error {
	rel := routing.HealthKey(c.Pool, c.Instance)
	if _, err := routing.ParseKey(rel); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if c.TTL <= 0 || c.TTL > MaxHeartbeatTTL {
		return fmt.Errorf("heartbeat: TTL %s of %s: want above 0 and at most %s", c.TTL, rel, MaxHeartbeatTTL)
	}
	if _, err := healthValue(c.Addr, ""); err != nil {
		return fmt.Errorf("heartbeat: encode marker: %w", err)
	}
	ttl := max(1, int((c.TTL+time.Second-1)/time.Second))
	bo := backoff.New(200*time.Millisecond, 5*time.Second)
	refusedBo := backoff.New(time.Second, 30*time.Second) // a refusal lasts until a hand fixes it
	refused := ""                                         // the cause of the refusal last logged at ERROR (refusalCause)
	var prev clientv3.LeaseID                             // the lease of the session lost last; 0 before the first
	var diagnosedAt time.Time                             // when an unreachable etcd's endpoints were last diagnosed
	for {
		first := prev == 0
		sess, val, granted, err := s.heartbeatSession(ctx, ttl, c, s.ks.RoutingKey(rel), prev)
		var taken *HeartbeatTakenError
		if errors.As(err, &taken) || (first && heartbeatRefused(err)) {
			return fmt.Errorf("heartbeat: %w", err) // a retry cannot fix it
		}
		if err != nil {
			if ctx.Err() != nil {
				return s.stopHeartbeat(ctx, rel, prev, "heartbeat stopped between leases")
			}
			wait := bo
			switch {
			case heartbeatRefused(err):
				wait = refusedBo
				cause := refusalCause(err)
				if c.Explain != nil {
					err = c.Explain(err)
				}
				if cause != refused {
					refused = cause
					s.log.Error("heartbeat: etcd refuses to put the marker back after the lease was lost, so this instance counts as dead; retrying until etcd lets it (1s doubling to 30s apart, logged again only if the refusal changes)",
						"key", rel, "err", err)
				} else {
					s.log.Debug("heartbeat: still refused, retrying", "key", rel, "err", err)
				}
			default:
				// Each endpoint's own dial takes up to a second or two
				// when it is silent: once per outage, then every
				// diagnoseEvery, not at each retry (the second read).
				if time.Since(diagnosedAt) >= diagnoseEvery {
					var ran bool
					if err, ran = s.diagnose(ctx, err); ran {
						diagnosedAt = time.Now()
					}
				}
				s.log.Warn("heartbeat: cannot write marker, retrying", "key", rel, "err", err)
			}
			if wait.Wait(ctx) != nil {
				return s.stopHeartbeat(ctx, rel, prev, "heartbeat stopped between leases")
			}
			continue
		}
		bo.Reset()
		refusedBo.Reset()
		refused, diagnosedAt = "", time.Time{}
		s.log.Info("heartbeat up", "key", rel, "lease", fmt.Sprintf("%x", int64(sess.Lease())), "ttl_s", int64(granted/time.Second))
		if c.OnUp != nil {
			c.OnUp(int64(sess.Lease()), granted)
		}
		s.keepMarker(ctx, sess, rel, val, c.Explain, &refused)
		select {
		case <-ctx.Done():
			sess.Orphan()
			return s.stopHeartbeat(ctx, rel, sess.Lease(), "heartbeat stopped")
		case <-sess.Done():
			prev = sess.Lease()
			s.log.Warn("heartbeat: lease lost, granting a new one", "key", rel, "lease", fmt.Sprintf("%x", int64(prev)))
		}
	}
}

// keepMarker holds the marker at rel under sess's lease until ctx or the
// session ends. The lease alone does not: a delete (a hand's etcdctl del
// while this process runs) would leave a live origin looking dead for as
// long as it runs. So it reads the key and watches it from there: a key
// found gone is put back (only if still absent: a Txn on its create
// revision), as is a key put by hand without a lease (it would outlive
// this process: a Txn on its mod revision), and a key under another lease
// (a second heartbeat with the same --instance) is logged, once per lease,
// and put back once that one is gone. A watch or read that fails is
// retried with a backoff: the lease keeps the key meanwhile. A refusal
// (the user's role revoked under it) is logged as Heartbeat logs one,
// through explain: at ERROR once, then at debug while it repeats, retried
// 1 s doubling to 30 s apart; refused is the cause last logged, shared
// with Heartbeat (the same refusal met by its grant after the lease is
// lost is not logged again).
func (s *Store) keepMarker(ctx context.Context, sess *concurrency.Session, rel, val string, explain func(error) error, refused *string) {
	key := s.ks.RoutingKey(rel)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the session ending ends the watch
		select {
		case <-sess.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	bo := backoff.New(200*time.Millisecond, 5*time.Second)
	refusedBo := backoff.New(time.Second, 30*time.Second) // a refusal lasts until a hand fixes it
	warned := noLease                                     // the other lease last logged
	for ctx.Err() == nil {
		rev, err := s.ensureMarker(ctx, sess.Lease(), rel, key, val, &warned)
		if err == nil {
			// Read (and put back) again: a refusal met later is news.
			refusedBo.Reset()
			*refused = ""
			err = s.nextMarkerEvent(ctx, key, rev)
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && heartbeatRefused(err):
			cause := refusalCause(err)
			if explain != nil {
				err = explain(err)
			}
			if cause != *refused {
				*refused = cause
				s.log.Error("heartbeat: etcd refuses this heartbeat its marker while the lease lives: a marker deleted meanwhile stays gone (this instance counts as dead); retrying until etcd lets it (1s doubling to 30s apart, logged again only if the refusal changes)",
					"key", rel, "err", err)
			} else {
				s.log.Debug("heartbeat: marker still refused, retrying", "key", rel, "err", err)
			}
			if refusedBo.Wait(ctx) != nil {
				return
			}
		case err != nil && etcddiag.InvalidToken(err):
			// etcd dropped this client's auth token (its user's password
			// changed, the token's TTL ran out): not news, the next read
			// logs in again, and a refused login is logged then.
			s.log.Debug("heartbeat: auth token dropped by etcd, logging in again", "key", rel, "err", err)
			if bo.Wait(ctx) != nil {
				return
			}
		case err != nil:
			s.log.Warn("heartbeat: cannot follow the marker, retrying", "key", rel, "err", err)
			if bo.Wait(ctx) != nil {
				return
			}
		default:
			bo.Reset()
		}
	}
}

// ensureMarker reads the marker and puts it back under lease if it is
// gone or was put without a lease, and logs (once per lease) a marker
// under another lease; it returns the revision the key was seen at.
func (s *Store) ensureMarker(ctx context.Context, lease clientv3.LeaseID, rel, key, val string, warned *clientv3.LeaseID) (int64, error) {
	for {
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.cli.Get(rctx, key)
		cancel()
		if err != nil {
			return 0, s.permErr("read "+key, err, s.roles.WriteNeed(key))
		}
		// Put back: where the key is absent, or (a put by hand without a
		// lease, which would outlive this process and keep a stopped
		// origin alive) still as that put left it.
		var back []clientv3.Cmp
		switch {
		case len(resp.Kvs) == 0:
			back = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
		case resp.Kvs[0].Lease == 0:
			back = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)}
		}
		switch {
		case back != nil:
			rctx, cancel := s.reqCtx(ctx)
			txn, err := s.cli.Txn(rctx).If(back...).Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).Commit()
			cancel()
			if err != nil {
				return 0, s.writeErr("put "+key+" back", err, s.roles.WriteNeed(key))
			}
			if !txn.Succeeded {
				continue // changed meanwhile: read what is there
			}
			what := "deleted by someone else (a hand edit such as etcdctl del, or another heartbeat with the same --instance stopping)"
			attrs := []any{"key", rel, "lease", fmt.Sprintf("%x", int64(lease))}
			switch {
			case len(resp.Kvs) > 0:
				what = "put without a lease (it would outlive this process)"
			case *warned != noLease:
				// Held by another lease until now: its heartbeat
				// stopped (revoking it) or died, or a hand deleted it.
				what = "deleted by someone else (the other heartbeat with the same --instance, whose lease held it, stopped or died; or a hand edit)"
				attrs = append(attrs, "other_lease", fmt.Sprintf("%x", int64(*warned)))
			}
			s.log.Warn("heartbeat: the marker was "+what+" while this heartbeat runs; put it back under its lease (stop the heartbeat, or drain the pool, to take the instance out)",
				attrs...)
			*warned = noLease
			return txn.Header.Revision, nil
		case clientv3.LeaseID(resp.Kvs[0].Lease) != lease:
			if other := clientv3.LeaseID(resp.Kvs[0].Lease); other != *warned {
				*warned = other
				s.log.Error("heartbeat: the marker is held by another lease (another heartbeat with the same --instance, or a put by hand): --instance must be unique within the pool; this heartbeat puts it back once that one is gone",
					"key", rel, "lease", fmt.Sprintf("%x", int64(lease)), "other_lease", fmt.Sprintf("%x", int64(other)))
			}
		}
		return resp.Header.Revision, nil
	}
}

// noLease stands for "no other lease logged yet": no lease has this ID.
const noLease clientv3.LeaseID = -1

// nextMarkerEvent returns at the first change of key after rev; an error
// when the watch ends without one (ctx done, no leader, compacted; a
// refusal is a *PermissionError).
func (s *Store) nextMarkerEvent(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return s.permErr("watch "+key, err, s.roles.WriteNeed(key))
		}
		if len(resp.Events) > 0 {
			return nil
		}
	}
	return fmt.Errorf("watch %s: %w", key, errors.Join(ctx.Err(), errors.New("the watch ended")))
}

// heartbeatSession grants a lease, keeps it alive in a session that
// outlives ctx (so Close can still revoke after a signal) and puts the
// marker under it; it returns the value put and the TTL etcd granted.
// The value's since is now: the marker was absent, or held by another,
// until this put. The put is a Txn on
// the key's absence; a key found present is taken over (a Txn on its mod
// revision) when it has no lease, is under a lease with the same address,
// or this is not the first session (prev, the lease this heartbeat lost,
// is not 0: the key is put back whatever holds it). Else the lease is
// revoked and a *HeartbeatTakenError returned. A key found under prev
// (the lease lost by this process but alive in etcd: its keep-alives went
// unanswered past the TTL, as across a lost quorum, whose new leader
// renews every lease) is put again under the new lease, and prev revoked;
// its since is kept, the key having been there all along.
func (s *Store) heartbeatSession(ctx context.Context, ttl int, c HeartbeatConfig, key string, prev clientv3.LeaseID) (*concurrency.Session, string, time.Duration, error) {
	first := prev == 0
	fresh, err := healthValue(c.Addr, s.opts.Now().UTC().Format(time.RFC3339))
	if err != nil {
		return nil, "", 0, fmt.Errorf("encode marker: %w", err)
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	grant, err := s.cli.Grant(rctx, int64(ttl))
	if err != nil {
		// Refused when authentication is on and the request carries
		// no user ("user name is empty"): named as the put would be.
		return nil, "", 0, s.writeErr("grant a lease for "+key, err, s.roles.WriteNeed(key))
	}
	granted := time.Duration(grant.TTL) * time.Second
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(max(ttl, int(grant.TTL))), concurrency.WithLease(grant.ID),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		s.revoke(ctx, grant.ID)
		return nil, "", 0, s.rpcErr("keep lease alive", err)
	}
	fail := func(err error) (*concurrency.Session, string, time.Duration, error) {
		sess.Orphan()
		if ctx.Err() != nil { // a stop: within its bound (stopHeartbeat revokes prev after it)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.opts.RequestTimeout, heartbeatStopRevoke))
			s.cli.Revoke(rctx, sess.Lease())
			cancel()
		} else {
			s.revoke(ctx, sess.Lease())
		}
		return nil, "", 0, err
	}
	absent := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	guard, took, val := absent, (*mvccpb.KeyValue)(nil), fresh // took: the key the guard would take over
	for {
		put := clientv3.OpPut(key, val, clientv3.WithLease(sess.Lease()))
		txn, err := s.cli.Txn(rctx).If(guard).Then(put).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return fail(s.writeErr("put "+key, err, s.roles.WriteNeed(key)))
		}
		if txn.Succeeded {
			switch {
			case took != nil && prev != 0 && clientv3.LeaseID(took.Lease) == prev:
				s.log.Info(fmt.Sprintf("heartbeat: put the marker again under new lease %x after losing lease %x (still alive in etcd, now revoked)", int64(sess.Lease()), int64(prev)),
					"key", key, "lease", fmt.Sprintf("%x", int64(sess.Lease())), "old_lease", fmt.Sprintf("%x", int64(prev)))
				s.revoke(ctx, prev)
			case took != nil:
				s.logTakeover(key, c.Addr, sess.Lease(), took)
			}
			return sess, val, granted, nil
		}
		kvs := txn.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 { // deleted meanwhile
			guard, took, val = absent, nil, fresh
			continue
		}
		kv := kvs[0]
		if addr := markerAddr(kv.Value); first && kv.Lease != 0 && addr != c.Addr {
			taken := &HeartbeatTakenError{Key: key, Instance: c.Instance, Addr: c.Addr, OtherAddr: addr, OtherLease: kv.Lease}
			if ttl, err := s.cli.TimeToLive(rctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
				taken.OtherTTL, taken.OtherGranted = time.Duration(ttl.TTL)*time.Second, time.Duration(ttl.GrantedTTL)*time.Second
			}
			return fail(taken)
		}
		guard, took, val = clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision), kv, fresh
		if since := markerSince(kv.Value); prev != 0 && clientv3.LeaseID(kv.Lease) == prev && since != "" {
			if v, err := healthValue(c.Addr, since); err == nil { // there all along: live since then
				val = v
			}
		}
	}
}

// healthValue is the marker's value: routing.Health of addr and since.
func healthValue(addr, since string) (string, error) {
	b, err := json.Marshal(routing.Health{Addr: addr, Since: since})
	return string(b), err
}

// refusalCause is what a heartbeat's refusal (heartbeatRefused) is
// logged once for: the user refused a permission (whichever request met
// it), or a login.
func refusalCause(err error) string {
	var pe *PermissionError
	if errors.As(err, &pe) {
		return "permission denied to user " + strconv.Quote(pe.User)
	}
	return "login refused"
}

// heartbeatRefused reports whether err is etcd refusing a heartbeat's
// request for its credentials or grants, which a retry fixes only once a
// hand does: a *PermissionError, or a login etcd no longer takes.
func heartbeatRefused(err error) bool {
	var pe *PermissionError
	return errors.As(err, &pe) || errors.Is(err, rpctypes.ErrAuthFailed)
}

// markerAddr is the addr of a marker's value; "" when it does not decode.
func markerAddr(value []byte) string {
	var h routing.Health
	if json.Unmarshal(value, &h) != nil {
		return ""
	}
	return h.Addr
}

// markerSince is the since of a marker's value; "" when it does not decode.
func markerSince(value []byte) string {
	var h routing.Health
	if json.Unmarshal(value, &h) != nil {
		return ""
	}
	return h.Since
}

// logTakeover logs a marker taken over from another holder (kv, as it
// was) under lease.
func (s *Store) logTakeover(key, addr string, lease clientv3.LeaseID, kv *mvccpb.KeyValue) {
	other := markerAddr(kv.Value)
	attrs := []any{"key", key, "lease", fmt.Sprintf("%x", int64(lease)), "other_lease", fmt.Sprintf("%x", kv.Lease), "other_addr", other}
	switch {
	case kv.Lease == 0:
		s.log.Warn("heartbeat: took over the marker, put without a lease (it would outlive this process)", attrs...)
	case other == addr:
		s.log.Warn("heartbeat: took over the marker from another lease with the same --addr (this instance restarted, or etcd was restored from a backup holding its old lease; that lease ends within its TTL)", attrs...)
	default:
		s.log.Error("heartbeat: after losing its lease, took the marker from another lease with another --addr: another heartbeat runs with the same --instance (--instance must be unique within the pool)", attrs...)
	}
}

// heartbeatStopRevoke bounds each revoke at a heartbeat's stop, whatever
// --command-timeout says: at most two (a lease granted as the stop came,
// and the one lost before it) end within the package unit's
// TimeoutStopSec (10 s), before systemd's SIGKILL.
const heartbeatStopRevoke = 4 * time.Second

// stopHeartbeat ends a heartbeat stopped on purpose: it revokes lease (the
// session's; or, stopped between leases, the one it lost, which etcd may
// have kept alive and holding the marker, as across a lost quorum; 0:
// none), so the marker goes at once. A revoke refused by permission is
// the error returned; one etcd does not answer is a warning (the marker
// goes when the lease's TTL ends), and the stop is clean: a stop while
// etcd is away did exit 1, and systemd marked the unit failed (the
// shutdown review, which also found the lost lease left unrevoked).
func (s *Store) stopHeartbeat(ctx context.Context, rel string, lease clientv3.LeaseID, what string) error {
	if lease == 0 {
		s.log.Info(what, "key", rel)
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.opts.RequestTimeout, heartbeatStopRevoke))
	_, err := s.cli.Revoke(rctx, lease)
	cancel()
	key := s.ks.RoutingKey(rel)
	switch {
	case err == nil:
		s.log.Info(what+", lease revoked", "key", rel, "lease", fmt.Sprintf("%x", int64(lease)))
		return nil
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		s.log.Info(what+", its lease already ended", "key", rel, "lease", fmt.Sprintf("%x", int64(lease)))
		return nil
	case isPermissionDenied(err):
		return s.writeErr("heartbeat: revoke the lease of "+key, err, s.roles.WriteNeed(key))
	}
	s.log.Warn(what+"; etcd did not revoke its lease: the marker goes when the lease's TTL ends", "key", rel, "lease", fmt.Sprintf("%x", int64(lease)), "err", err)
	return nil
}

// diagnoseEvery is how often a heartbeat that cannot reach etcd dials
// each endpoint again to say why.
const diagnoseEvery = 30 * time.Second

// diagnose adds to err, when it is an *UnreachableError without them,
// what each endpoint answers a plain dial of its own (etcddiag.Check):
// the auth review's running heartbeat said only "context deadline
// exceeded" of a certificate that had expired, where a start names it.
// It reports whether it dialed them (ran): the caller's throttle counts
// only those (the third read: an error of another kind started it, and
// the unreachable etcd that followed went undiagnosed for 30 s).
func (s *Store) diagnose(ctx context.Context, err error) (_ error, ran bool) {
	var ue *UnreachableError
	if !errors.As(err, &ue) || ue.Why != "" || len(s.opts.Endpoints) == 0 {
		return err, false
	}
	eps, eerr := etcddiag.Endpoints(s.opts.Endpoints, s.opts.TLS != nil)
	if eerr != nil {
		return err, false
	}
	dctx, cancel := context.WithTimeout(ctx, 2*etcddiag.Timeout)
	defer cancel()
	why, connected := etcddiag.Check(dctx, eps, s.opts.TLS)
	if why == "" {
		return err, true
	}
	d := *ue
	d.Why, d.Connected = why, connected
	return &d, true
}

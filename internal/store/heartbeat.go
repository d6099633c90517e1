package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/routing"
)

// HeartbeatConfig names the health marker kept alive by Heartbeat.
type HeartbeatConfig struct {
	Pool, Instance, Addr string
	// TTL is the lease TTL: how long the marker outlives a killed process.
	TTL time.Duration
	// OnUp, if set, is called each time the marker is (re)written.
	OnUp func(lease int64)
}

// Heartbeat keeps <root>/routing/health/<pool>/<instance> alive under a
// concurrency.Session until ctx ends, then revokes the lease so the marker
// disappears at once. When the lease is lost (etcd unreachable past the
// TTL), it grants a new one and writes the marker again. It needs nothing
// but readwrite on <root>/routing/health/<pool>/ (Roles.Origin); a
// refused put is a *PermissionError, returned at once.
func (s *Store) Heartbeat(ctx context.Context, c HeartbeatConfig) error {
	rel := routing.HealthKey(c.Pool, c.Instance)
	if _, err := routing.ParseKey(rel); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	val, err := json.Marshal(routing.Health{Addr: c.Addr, Since: s.opts.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return fmt.Errorf("heartbeat: encode marker: %w", err)
	}
	ttl := max(1, int((c.TTL+time.Second-1)/time.Second))
	bo := backoff.New(200*time.Millisecond, 5*time.Second)
	for {
		sess, err := s.heartbeatSession(ctx, ttl, s.ks.RoutingKey(rel), string(val))
		var pe *PermissionError
		if errors.As(err, &pe) {
			return fmt.Errorf("heartbeat: %w", err) // a retry cannot fix it
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("heartbeat: cannot write marker, retrying", "key", rel, "err", err)
			if bo.Wait(ctx) != nil {
				return nil
			}
			continue
		}
		bo.Reset()
		s.log.Info("heartbeat up", "key", rel, "lease", fmt.Sprintf("%x", int64(sess.Lease())), "ttl_s", ttl)
		if c.OnUp != nil {
			c.OnUp(int64(sess.Lease()))
		}
		s.keepMarker(ctx, sess, rel, string(val))
		select {
		case <-ctx.Done():
			// Revoked within --command-timeout (5 s), not the session's
			// Close, which waits up to the TTL: a stop under systemd
			// (TimeoutStopSec=10s) ends before the unit's kill.
			sess.Orphan()
			rctx, cancel := s.reqCtx(context.WithoutCancel(ctx))
			_, err := s.cli.Revoke(rctx, sess.Lease())
			cancel()
			if err != nil {
				key := s.ks.RoutingKey(rel)
				return s.writeErr("heartbeat: revoke the lease of "+key, err, s.roles.WriteNeed(key))
			}
			s.log.Info("heartbeat stopped, lease revoked", "key", rel)
			return nil
		case <-sess.Done():
			s.log.Warn("heartbeat: lease lost, granting a new one", "key", rel)
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
// retried with a backoff: the lease keeps the key meanwhile.
func (s *Store) keepMarker(ctx context.Context, sess *concurrency.Session, rel, val string) {
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
	warned := noLease // the other lease last logged
	for ctx.Err() == nil {
		rev, err := s.ensureMarker(ctx, sess.Lease(), rel, key, val, &warned)
		if err == nil {
			err = s.nextMarkerEvent(ctx, key, rev)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("heartbeat: cannot follow the marker, retrying", "key", rel, "err", err)
			if bo.Wait(ctx) != nil {
				return
			}
			continue
		}
		bo.Reset()
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
			return 0, s.rpcErr("read "+key, err)
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
			what := "deleted"
			if len(resp.Kvs) > 0 {
				what = "put without a lease (it would outlive this process)"
			}
			s.log.Warn("heartbeat: the marker was "+what+" while this heartbeat runs; put it back under its lease (stop the heartbeat, or drain the pool, to take the instance out)",
				"key", rel, "lease", fmt.Sprintf("%x", int64(lease)))
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
// when the watch ends without one (ctx done, no leader, compacted).
func (s *Store) nextMarkerEvent(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", key, err)
		}
		if len(resp.Events) > 0 {
			return nil
		}
	}
	return fmt.Errorf("watch %s: %w", key, errors.Join(ctx.Err(), errors.New("the watch ended")))
}

// heartbeatSession grants a lease, keeps it alive in a session that
// outlives ctx (so Close can still revoke after a signal) and puts the
// marker under it.
func (s *Store) heartbeatSession(ctx context.Context, ttl int, key, val string) (*concurrency.Session, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	grant, err := s.cli.Grant(rctx, int64(ttl))
	if err != nil {
		return nil, s.rpcErr("grant lease", err)
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttl), concurrency.WithLease(grant.ID),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		s.revoke(ctx, grant.ID)
		return nil, s.rpcErr("keep lease alive", err)
	}
	if _, err := s.cli.Put(rctx, key, val, clientv3.WithLease(sess.Lease())); err != nil {
		sess.Close()
		return nil, s.writeErr("put "+key, err, s.roles.WriteNeed(key))
	}
	return sess, nil
}

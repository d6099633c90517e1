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

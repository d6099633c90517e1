package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// heartbeatOpts are the flags of heartbeat.
type heartbeatOpts struct {
	instance, addr string
	ttl            time.Duration
}

func (a *app) heartbeatCmd() *cobra.Command {
	var o heartbeatOpts
	cmd := &cobra.Command{
		Use:   "heartbeat POOL --instance ID --addr A [--ttl 10s]",
		Short: "Keep a pool's health key alive while this process runs (origin side)",
		Long: `heartbeat writes <root>/routing/health/POOL/ID under a lease and keeps it
alive until SIGTERM or SIGINT, when it revokes the lease so the key goes at
once. If the process dies, the key disappears within --ttl. After losing
the lease (etcd unreachable past the TTL) it grants a new one and writes
the key again; etcd unreachable at start is retried too (1s doubling to
30s), so an origin that boots before etcd comes up once etcd does. A key
deleted while it runs is put back at once, as is one put by hand without
a lease (it would outlive this process); a key put under another lease
(another heartbeat with the same --instance) is logged as an error and
put back once that one is gone. To take the instance out, stop this
process or drain the pool.
Heartbeats are liveness, not config: they bump no epoch.

With etcd authentication on, heartbeat needs nothing but readwrite on
<root>/routing/health/POOL/ (the role regiond-origin-POOL of regionctl auth
roles --origin POOL). It reads no other key, so it does not check that POOL
exists: regionctl get pools does. A refused write exits 1 naming the key
and the role.`,
		Example: `  regionctl heartbeat eu-central --instance fra-1a --addr 10.0.0.12:443 --ttl 10s`,
		Args:    exactArgs(1, "a pool id"),
	}
	f := cmd.Flags()
	f.StringVar(&o.instance, "instance", "", "instance id, unique within the pool (e.g. the host name)")
	f.StringVar(&o.addr, "addr", "", "address the instance serves on")
	f.DurationVar(&o.ttl, "ttl", 10*time.Second, "lease TTL: how long the key outlives a killed process")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		return a.runHeartbeat(ctx, args[0], o)
	})
	return cmd
}

func (a *app) runHeartbeat(ctx context.Context, pool string, o heartbeatOpts) error {
	if o.instance == "" || o.addr == "" {
		return usagef("heartbeat needs --instance and --addr")
	}
	if !routing.ValidPoolID(pool) {
		return usagef("pool %q: want a pool id (lower-case letters, digits, '.', '_', '-'), e.g. eu-central", pool)
	}
	if _, err := routing.ParseKey(routing.HealthKey(pool, o.instance)); err != nil {
		return usageError{err}
	}
	if msg := routing.CheckHost(o.addr); msg != "" {
		return usagef("--addr: %s", msg)
	}
	if o.ttl < time.Second {
		return usagef("--ttl %s: want at least 1s", o.ttl)
	}
	// The heartbeat touches its own key alone: probing the epoch or
	// reading the state would need more than the origin's role.
	rel := routing.HealthKey(pool, o.instance)
	a.probe = func(ks keyspace.Space) string { return ks.RoutingKey(rel) }
	a.probeNeeds = func(r store.Roles) []store.Grant { return []store.Grant{r.WriteNeed(r.Keyspace().RoutingKey(rel))} }
	st, err := a.heartbeatStore(ctx)
	if st == nil {
		return err
	}
	key := st.Keyspace().RoutingKey(rel)
	return st.Heartbeat(ctx, store.HeartbeatConfig{Pool: pool, Instance: o.instance, Addr: o.addr, TTL: o.ttl,
		OnUp: func(lease int64) {
			fmt.Fprintf(a.stdout, "heartbeat: %s alive under lease %x (ttl %s)\n", key, lease, o.ttl)
		}})
}

// heartbeatStore dials etcd for the heartbeat, retrying with backoff
// (1 s doubling to 30 s, jittered) while etcd is unreachable: an origin
// that boots before etcd (or its grpc-proxy) is reachable comes up once
// it is, instead of exiting into its unit's start limit. Anything else
// (a refused login, a permission denied, a usage error) is returned. A
// stop (SIGTERM) while it waits returns nil and no store: nothing was
// written, so there is nothing to revoke.
func (a *app) heartbeatStore(ctx context.Context) (*store.Store, error) {
	bo := backoff.New(time.Second, 30*time.Second)
	bo.Jitter = 0.5
	for {
		st, err := a.store(ctx)
		if ctx.Err() != nil {
			return nil, nil
		}
		var unreach *store.UnreachableError
		if !errors.As(err, &unreach) {
			return st, err
		}
		wait := bo.Next()
		a.log.Warn("heartbeat: etcd unreachable; retrying", "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
	}
}

package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

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
the key again. Heartbeats are liveness, not config: they bump no epoch.

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
	if _, err := routing.ParseKey(routing.HealthKey(pool, o.instance)); err != nil {
		return usageError{err}
	}
	if o.ttl < time.Second {
		return usagef("--ttl %s: want at least 1s", o.ttl)
	}
	// The heartbeat touches its own key alone: probing the epoch or
	// reading the state would need more than the origin's role.
	rel := routing.HealthKey(pool, o.instance)
	a.probe = func(ks keyspace.Space) string { return ks.RoutingKey(rel) }
	a.probeNeeds = func(r store.Roles) []store.Grant { return []store.Grant{r.WriteNeed(r.Keyspace().RoutingKey(rel))} }
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	key := st.Keyspace().RoutingKey(rel)
	return st.Heartbeat(ctx, store.HeartbeatConfig{Pool: pool, Instance: o.instance, Addr: o.addr, TTL: o.ttl,
		OnUp: func(lease int64) {
			fmt.Fprintf(a.stdout, "heartbeat: %s alive under lease %x (ttl %s)\n", key, lease, o.ttl)
		}})
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/internal/etcddiag"
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

At start, a key held under another live lease with another --addr exits
1 naming that lease and addr, writing nothing: two origins run with one
--instance, or this instance restarted with a new --addr and its old
lease ends within its TTL. Held with the same --addr (this instance
restarted after a crash, its old lease alive for up to a TTL) it is
taken over.

It reads <root>/routing/pools/POOL where it may: a pool that does not
exist exits 1 naming the nearest ids; a pool without health_check is
warned about (its health keys change nothing). A refused read (the
origin's role reads no pool) skips that check.

--ttl above 60s is warned about: a killed origin counts as live that long;
above 24h it is a usage error (exit 2).
etcd grants at least its minimum lease TTL (2s at its default election
timeout); the line "alive under lease" gives the TTL granted.

With etcd authentication on, heartbeat needs nothing but readwrite on
<root>/routing/health/POOL/ (the role regiond-origin-POOL of regionctl auth
roles --origin POOL). A refused write exits 1 naming the key and the role,
and asks whether POOL is the pool's id; when the user could read the pool
(it exists: an operator's user), it says that the user lacks that role.
A refusal after a lost lease (authentication turned on under a heartbeat
without credentials, a role revoked) is logged once at ERROR with what to
do, and retried (1s doubling to 30s) until etcd lets it.`,
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
	switch {
	case o.instance == "" && o.addr == "":
		return usagef("heartbeat needs --instance and --addr")
	case o.instance == "":
		return usagef("heartbeat needs --instance too (this origin's id within the pool, e.g. its host name)")
	case o.addr == "":
		return usagef("heartbeat needs --addr too (the address viewers are sent to, host:port)")
	}
	if !routing.ValidPoolID(pool) {
		return usagef("pool %q: want a pool id (lower-case letters, digits, '.', '_', '-'), e.g. eu-central", pool)
	}
	if !routing.ValidInstanceID(o.instance) {
		return usagef("--instance %q (%d bytes): want an instance id of 1 to %d letters, digits, '.', '_', ':' or '-', unique within the pool (e.g. the host name)",
			o.instance, len(o.instance), maxInstanceIDLen)
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
	if o.ttl > store.MaxHeartbeatTTL {
		return usagef("--ttl %s: want at most %s: a killed origin (SIGKILL, a crash, its host down) counts as live for up to --ttl, the agents sending viewers to it meanwhile; use %s or less (default 10s)",
			o.ttl, store.MaxHeartbeatTTL, maxQuietTTL)
	}
	if o.ttl > maxQuietTTL {
		fmt.Fprintf(a.stderr, "regionctl: warning: --ttl %s: an origin killed (SIGKILL, a crash, its host down) still counts as live for up to %s, the agents sending viewers to it meanwhile; a stop (SIGTERM) removes the key at once whatever the TTL. Use %s or less (default 10s)\n",
			o.ttl, o.ttl, maxQuietTTL)
	}
	if w := etcddiag.KeyFileExposed("--key", a.tlsKey); a.tlsKey != "" && w != "" {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", w) // a service's key: the auth review found it accepted silently
	}
	// The heartbeat writes its own key alone, and probes it: probing the
	// epoch or reading the state would need more than the origin's role
	// (its read of pools/POOL, to check the pool, is skipped when
	// refused).
	rel := routing.HealthKey(pool, o.instance)
	a.probe = func(ks keyspace.Space) string { return ks.RoutingKey(rel) }
	a.probeNeeds = func(r store.Roles) []store.Grant { return []store.Grant{r.WriteNeed(r.Keyspace().RoutingKey(rel))} }
	st, err := a.heartbeatStore(ctx)
	if st == nil {
		return a.heartbeatPermHint(err, pool, false)
	}
	exists, err := a.checkHeartbeatPool(ctx, st, pool)
	if err != nil {
		return err
	}
	a.warnViaProxy(ctx, st, "it does not renew a heartbeat's lease reliably (with authentication on, never), so the health key comes and goes and the agents send viewers away from this origin at each gap",
		"point the heartbeat at the members (REGIONCTL_ENDPOINTS in /etc/regiond/heartbeat.env)")
	key := st.Keyspace().RoutingKey(rel)
	err = st.Heartbeat(ctx, store.HeartbeatConfig{Pool: pool, Instance: o.instance, Addr: o.addr, TTL: o.ttl,
		OnUp: func(lease int64, granted time.Duration) {
			fmt.Fprintf(a.stdout, "heartbeat: %s alive under lease %x (ttl %s%s)\n", key, lease, granted, grantedNote(o.ttl, granted))
		},
		Explain: func(err error) error { return a.heartbeatRefusedHint(err, pool) }})
	return a.heartbeatPermHint(err, pool, exists)
}

// maxInstanceIDLen is the longest --instance routing.ValidInstanceID
// takes, in bytes.
const maxInstanceIDLen = 128

// maxQuietTTL is the largest --ttl heartbeat takes without a warning.
const maxQuietTTL = 60 * time.Second

// grantedNote explains a granted TTL other than the one asked for.
func grantedNote(asked, granted time.Duration) string {
	whole := (asked + time.Second - 1).Truncate(time.Second) // leases have whole seconds
	switch {
	case granted == asked:
		return ""
	case granted == whole:
		return fmt.Sprintf(", --ttl %s rounded up to whole seconds", asked)
	case granted > whole:
		return fmt.Sprintf(", granted by etcd for --ttl %s: its minimum lease TTL", asked)
	}
	return fmt.Sprintf(", granted by etcd for --ttl %s", asked)
}

// heartbeatPermHint adds to a refused heartbeat (its put, or the dial's
// read of its key) the question an origin's role raises: a pool id typo
// is refused by permission alone, since the role covers one pool. When
// the pool is known to exist (its key was read), the id is right: the
// user lacks the pool's origin role.
func (a *app) heartbeatPermHint(err error, pool string, exists bool) error {
	var pe *store.PermissionError
	if !errors.As(err, &pe) {
		return err
	}
	ks, kerr := keyspace.New(a.prefix)
	if kerr != nil {
		return err
	}
	if pe.ViaProxy {
		// The auth review: through a proxy etcd saw no user, and the
		// pool id was questioned; the refusal says why.
		return err
	}
	role := store.NewRoles(ks, a.rolePrefix).Origin(pool).Name
	if exists {
		return fmt.Errorf("%w; pool %s exists, so its id is right: user %s lacks the role %s, which alone writes its health keys: %s",
			err, pool, a.userName(), role, a.originRoleWay(pool, role))
	}
	return fmt.Errorf("%w; is %s the pool's id? the role %s covers only its own pool's health keys (regionctl get pools, as an operator or viewer, lists the ids)",
		err, pool, role)
}

// originRoleWay says how a heartbeat of pool comes to hold role, its
// origin role: run it as the pool's origin user, which auth apply makes
// (or grants the role again). Not a grant of the role to the user it ran
// as: that may be an operator's or an agent's, which would then hold a
// second job (the auth review: an operator could write health keys, and
// the next auth apply refused the user).
func (a *app) originRoleWay(pool, role string) string {
	apply := "regionctl"
	if a.prefix != keyspace.DefaultRoot {
		apply += " --prefix " + a.prefix
	}
	apply += " auth apply"
	if a.rolePrefix != "" && a.rolePrefix != store.DefaultRolePrefix {
		apply += " --role-prefix " + a.rolePrefix
	}
	return fmt.Sprintf("run the heartbeat as the pool's origin user (%s --origin %s makes user %s with that role alone, or grants it again; --origin %s=USER names another user), not as an operator's or an agent's user",
		apply, pool, role, pool)
}

// heartbeatRefusedHint adds to a refusal met by a running heartbeat,
// putting its key back after a lost lease, what to do about it: it ran,
// so the pool id is right and the cause is its credentials or its user's
// role (authentication turned on under it, a role revoked, a password
// changed).
func (a *app) heartbeatRefusedHint(err error, pool string) error {
	ks, kerr := keyspace.New(a.prefix)
	if kerr != nil {
		return err
	}
	role := store.NewRoles(ks, a.rolePrefix).Origin(pool).Name
	var pe *store.PermissionError
	switch {
	case errors.As(err, &pe) && pe.User == "":
		return fmt.Errorf("%w; etcd's authentication is on and this heartbeat has no credentials: put REGIONCTL_USER and REGIONCTL_PASSWORD of a user with the role %s (or REGIONCTL_CERT and REGIONCTL_KEY of a certificate whose common name is that user) in /etc/regiond/heartbeat.env and restart it (systemctl restart 'regiond-heartbeat@*')",
			err, role)
	case errors.As(err, &pe):
		return fmt.Errorf("%w; user %s lacks the role %s, which alone writes the pool's health keys: %s (this heartbeat picks a grant up at its next try)",
			err, pe.User, role, a.originRoleWay(pool, role))
	}
	return fmt.Errorf("%w; etcd no longer takes user %s's login (its password changed, or the user was removed): put its credentials in /etc/regiond/heartbeat.env and restart the heartbeat",
		err, a.userName())
}

// checkHeartbeatPool reads the pool's key, when the user may: a pool that
// does not exist is refused (its health keys would count for nothing),
// naming the nearest ids; a pool without health_check is warned about. A
// refused read (the origin's role reads no pool) skips the check, as any
// other failed read does, with a warning. exists reports that the key was
// read and holds the pool.
func (a *app) checkHeartbeatPool(ctx context.Context, st *store.Store, pool string) (exists bool, err error) {
	ks := st.Keyspace()
	key := ks.RoutingKey(routing.PoolKey(pool))
	rctx, cancel := context.WithTimeout(ctx, a.commandTimeout)
	defer cancel()
	resp, err := st.Client().Get(rctx, key)
	if err != nil {
		if !errors.Is(err, rpctypes.ErrPermissionDenied) && ctx.Err() == nil {
			fmt.Fprintf(a.stderr, "regionctl: warning: cannot check that pool %s exists (read %s: %v); heartbeat goes on\n", pool, key, err)
		}
		return false, nil
	}
	if len(resp.Kvs) == 0 {
		cfg := &routing.Config{Pools: map[string]routing.Pool{}}
		hint := ""
		prefix := ks.RoutingKey(routing.PoolKey(""))
		if all, err := st.Client().Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()); err == nil {
			for _, kv := range all.Kvs {
				cfg.Pools[strings.TrimPrefix(string(kv.Key), prefix)] = routing.Pool{}
			}
			hint = poolHint(cfg, pool)
		}
		sep := ". "
		if strings.HasSuffix(hint, "?") {
			sep = " "
		}
		return false, fmt.Errorf("heartbeat: no pool %s (%s does not exist): its health keys would count for nothing; nothing written%s%s"+
			"Fix POOL (REGIOND_POOL in /etc/regiond/heartbeat/INSTANCE.env under systemd), or create the pool first (regionctl pool set %s --host … --residency …, or apply)",
			pool, key, hint, sep, pool)
	}
	v, err := routing.DecodeValue(routing.PoolKey(pool), resp.Kvs[0].Value)
	if p, ok := v.(*routing.Pool); err == nil && ok && !p.HealthCheck {
		fmt.Fprintf(a.stderr, "regionctl: warning: pool %s has no health_check: the agents count it up whatever its health keys say, so this heartbeat changes nothing until it is turned on (regionctl pool set %s --health-check, once its heartbeats run)\n",
			pool, pool)
	}
	return true, nil
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

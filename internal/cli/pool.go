package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/didyoumean"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

func (a *app) poolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Create, change, drain or remove a pool",
		Example: `  regionctl pool set eu-central --host edge-fra-1.example.net:443 --residency eu --region eu-central
  regionctl pool drain eu-central --reason "kernel upgrade" --wait-converged`,
		RunE: groupRun,
	}
	cmd.AddCommand(a.poolSetCmd(), a.poolStatusCmd("drain", routing.StatusDraining),
		a.poolStatusCmd("undrain", routing.StatusActive), a.poolRmCmd())
	return cmd
}

// poolStatuses are the statuses a pool may have.
var poolStatuses = []string{routing.StatusActive, routing.StatusDraining, routing.StatusDown}

// poolSetOpts are the flags of pool set.
type poolSetOpts struct {
	host, residency, region, status string
	healthCheck                     bool
	attrs, unsetAttrs               []string
}

func (a *app) poolSetCmd() *cobra.Command {
	var (
		o poolSetOpts
		w writeOpts
	)
	cmd := &cobra.Command{
		Use:   "set ID",
		Short: "Create a pool, or change the given fields of an existing one",
		Long: `Create a pool (--host and --residency are required), or change the given
fields of an existing pool; fields not given are kept. A pool whose stored
value is invalid (a hand edit the agents skip) is replaced whole: give
--host, --residency and every other field it holds, or remove it with
pool rm.`,
		Example: `  regionctl pool set eu-east --host edge-waw-1.example.net:443 --residency eu --region eu-east --attr shard=eu-4
  regionctl pool set eu-central --attr max_rps=900 --reason "new hardware"`,
		Args: exactArgs(1, "a pool id"),
	}
	f := cmd.Flags()
	f.StringVar(&o.host, "host", "", "host name or IP, optional :port")
	f.StringVar(&o.residency, "residency", "", "residency class label (eu, us, apac, …)")
	f.StringVar(&o.region, "region", "", "region label")
	f.StringVar(&o.status, "status", "", "active, draining or down")
	f.BoolVar(&o.healthCheck, "health-check", false, "route only while a health key of the pool is alive")
	f.StringArrayVar(&o.attrs, "attr", nil, "attribute KEY=VALUE (repeatable)")
	f.StringArrayVar(&o.unsetAttrs, "unset-attr", nil, "remove attribute KEY (repeatable)")
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, cmd *cobra.Command, args []string) error {
		return a.runPoolSet(ctx, cmd, args[0], o, w)
	})
	return cmd
}

func (a *app) runPoolSet(ctx context.Context, cmd *cobra.Command, id string, o poolSetOpts, w writeOpts) error {
	changed := cmd.Flags().Changed
	return a.runWrite(ctx, w, configPlanWith(func(cur *store.State, cfg *routing.Config) error {
		p, exists := cfg.Pools[id]
		if !exists {
			if bad := invalidAt(cur, routing.PoolKey(id)); bad != nil {
				given := func(field string) bool { return changed(poolFlag[field]) }
				if missing := bad.missing(poolFields, given, o.attrs, o.unsetAttrs); len(missing) > 0 {
					return bad.refusal("pool set cannot change only some of its fields: give also "+strings.Join(missing, ", ")+" to replace it whole",
						"pool rm "+id)
				}
			} else if !changed("host") || !changed("residency") {
				return usagef("pool %s does not exist: creating it needs --host and --residency", id)
			}
		}
		if changed("host") {
			p.Host = o.host
		}
		if changed("residency") {
			p.Residency = o.residency
		}
		if changed("region") {
			p.Region = o.region
		}
		if changed("status") {
			p.Status = o.status
			if hint := valueHint(o.status, poolStatuses); hint != "" && !slices.Contains(poolStatuses, o.status) {
				return refusedError{routing.Errors{{Key: routing.PoolKey(id), Field: "status",
					Msg: fmt.Sprintf("must be active, draining or down, got %q%s", o.status, hint)}}}
			}
		}
		if changed("health-check") {
			if o.healthCheck && !p.HealthCheck && liveHealthKeys(cur, id) == 0 {
				a.warnAttempt("pool %s has no live health key: with --health-check the agents count it down once their grace window ends, "+
					"and its viewers go to other pools (or get no route); start its heartbeats first (regionctl heartbeat %s --instance …)", id, id)
			}
			p.HealthCheck = o.healthCheck
		}
		attrs, err := applyAttrs(p.Attrs, o.attrs, o.unsetAttrs)
		if err != nil {
			return err
		}
		p.Attrs = attrs
		cfg.Pools[id] = p
		return nil
	}))
}

func (a *app) poolStatusCmd(verb, status string) *cobra.Command {
	var w writeOpts
	short := map[string]string{
		"drain":   "Stop sending new viewers to a pool (status draining)",
		"undrain": "Send viewers to a pool again (status active)",
	}[verb]
	cmd := &cobra.Command{
		Use:     verb + " ID",
		Short:   short,
		Example: "  regionctl pool " + verb + " eu-central --reason \"kernel upgrade\" --wait-converged=30s",
		Args:    exactArgs(1, "a pool id"),
	}
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		return a.runPoolStatus(ctx, args[0], status, w)
	})
	return cmd
}

func (a *app) runPoolStatus(ctx context.Context, id, status string, w writeOpts) error {
	var boosted string
	w.warning = func() string { return boosted }
	return a.runWrite(ctx, w, configPlanWith(func(cur *store.State, cfg *routing.Config) error {
		boosted = ""
		if status != routing.StatusActive {
			boosted = boostsOfPool(cur, id, time.Now())
		}
		p, ok := cfg.Pools[id]
		if bad := invalidAt(cur, routing.PoolKey(id)); !ok && bad != nil {
			return bad.refusal(fmt.Sprintf("pool %s cannot change it: replace it whole with regionctl pool set %s giving %s",
				verbOfStatus(status), id, strings.Join(bad.missing(poolFields, func(string) bool { return false }, nil, nil), ", ")),
				"pool rm "+id)
		}
		if !ok {
			return refusef(routing.PoolKey(id), "pool does not exist%s", poolHint(cfg, id))
		}
		p.Status = status
		cfg.Pools[id] = p
		return nil
	}))
}

// verbOfStatus names the pool verb that sets status.
func verbOfStatus(status string) string {
	if status == routing.StatusDraining {
		return "drain"
	}
	return "undrain"
}

func (a *app) poolRmCmd() *cobra.Command {
	var w writeOpts
	cmd := &cobra.Command{
		Use:   "rm ID",
		Short: "Remove a pool (refused while a route still names it)",
		Long: `Remove a pool; refused while a route still names it. A pool key whose
stored value is invalid (a hand edit the agents skip) is removed too.
Health keys of the pool still alive are named in a warning: their
heartbeats keep running (stop them on the origins), and a pool created
again with this id would count them as its live instances.`,
		Example: `  regionctl pool rm eu-old --reason "decommissioned"`,
		Args:    exactArgs(1, "a pool id"),
	}
	addWriteFlags(cmd, &w)
	addIgnoreNotFoundFlag(cmd, &w.ignoreNotFound)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		id := args[0]
		rm := removeConfigKey(routing.PoolKey(id), a.routingKey(routing.PoolKey(id)), "pool "+id, "pool does not exist", func(cfg *routing.Config) bool {
			_, ok := cfg.Pools[id]
			delete(cfg.Pools, id)
			return ok
		})
		return a.runWrite(ctx, w, a.orIgnoreAbsent(w.ignoreNotFound, func(ctx context.Context, cur *store.State) (*store.Plan, error) {
			p, err := rm(ctx, cur)
			if err == nil {
				a.warnLiveHealth(cur, id)
			}
			return p, err
		}))
	})
	return cmd
}

// warnLiveHealth warns, for pool rm, of the pool's health keys alive in
// cur: their heartbeats go on writing them after the pool is gone (they
// read no pool once running), and a pool created again with the same id
// would count them. A key whose value does not decode is named too: the
// agents count it live whatever its value (as get pools and
// liveHealthKeys do).
func (a *app) warnLiveHealth(cur *store.State, pool string) {
	prefix := routing.HealthKey(pool, "")
	var keys []string
	for _, kv := range cur.KVs {
		if !strings.HasPrefix(kv.Key, prefix) {
			continue
		}
		addr := "its value does not decode"
		if h, ok := cur.Health[kv.Key]; ok {
			addr = "addr " + orDash(h.Addr)
		}
		keys = append(keys, fmt.Sprintf("%s (%s)", a.routingKey(kv.Key), addr))
	}
	if len(keys) == 0 {
		return
	}
	sort.Strings(keys)
	a.warnAttempt("pool %s has %d live health key(s): %s; their heartbeats keep running and keep them alive after the pool is gone, and a pool created again with id %s would count them as its live instances: stop them on the origins (systemctl disable --now regiond-heartbeat@INSTANCE)",
		pool, len(keys), strings.Join(keys, ", "), pool)
}

// configPlanWith is configPlan whose change also sees the state read (its
// stored values that do not decode).
func configPlanWith(change func(cur *store.State, cfg *routing.Config) error) buildFunc {
	return func(_ context.Context, cur *store.State) (*store.Plan, error) {
		cfg := cloneConfig(cur.Config)
		if err := change(cur, cfg); err != nil {
			return nil, err
		}
		return &store.Plan{Config: cfg}, nil
	}
}

// removeConfigKey is the build of pool rm and route rm: remove the object
// of key rel from the config (del reports whether it was there) or, when
// its stored value does not decode, delete that key alone, through the
// same checks and audit record; else refuse with absent (naming full, the
// key's etcd key, when the key is stored outside the grammar).
func removeConfigKey(rel, full, what, absent string, del func(cfg *routing.Config) bool) buildFunc {
	return func(_ context.Context, cur *store.State) (*store.Plan, error) {
		cfg := cloneConfig(cur.Config)
		if del(cfg) {
			return &store.Plan{Config: cfg}, nil
		}
		if invalidAt(cur, rel) == nil {
			for _, sk := range cur.Skipped {
				if sk.Key == rel { // outside the key grammar: no id regionctl can name
					return nil, refusef(rel, "%s, but a key by this name is stored outside the key grammar (%s): regionctl does not write such keys and the agents leave it out of their tables (each counts it as skipped); remove it with etcdctl del %s (regionctl get skipped lists it)",
						absent, sk.Error, full)
				}
			}
			return nil, absentf(rel, what, "%s", absent)
		}
		return &store.Plan{Config: cfg, DeleteInvalid: []string{rel}}, nil
	}
}

// storedInvalid is a config key whose stored value does not decode (a hand
// edit): the agents skip it and serve its last good value, and regionctl's
// config holds no object for it.
type storedInvalid struct {
	rel string
	raw []byte
	why error
}

// invalidAt returns the key rel of cur when its stored value does not
// decode, else nil.
func invalidAt(cur *store.State, rel string) *storedInvalid {
	raw, why, ok := cur.InvalidConfig(rel)
	if !ok {
		return nil
	}
	return &storedInvalid{rel: rel, raw: raw, why: why}
}

// maxShownValue bounds the stored value quoted in a refusal.
const maxShownValue = 300

// refusal refuses a verb on the invalid key: why the value is invalid,
// what the agents do with it, then fix (what the verb needs instead) and
// the regionctl command that removes it.
func (b *storedInvalid) refusal(fix, rm string) error {
	return refusef(b.rel, "the stored value is invalid (%s): the agents skip it and serve its last good value; %s, or remove it with regionctl %s; stored value: %s",
		invalidWhy(b.why), fix, rm, shownValue(b.raw))
}

// shownValue is a stored value as a refusal quotes it: compact JSON when
// it is JSON, cut at maxShownValue bytes.
func shownValue(raw []byte) string {
	var c bytes.Buffer
	if json.Compact(&c, raw) == nil {
		raw = c.Bytes()
	}
	if len(raw) <= maxShownValue {
		return strings.ToValidUTF8(string(raw), "?")
	}
	cut := maxShownValue
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	return strings.ToValidUTF8(string(raw[:cut]), "?") + "…"
}

// repairField is a top-level field of a stored value and the flag of the
// set verb that gives it.
type repairField struct {
	field, flag string
	required    bool // needed to create the object
}

// poolFields are the fields of a pool; attrs are given one by one.
var poolFields = []repairField{
	{field: "host", flag: "--host", required: true},
	{field: "residency", flag: "--residency", required: true},
	{field: "region", flag: "--region"},
	{field: "status", flag: "--status"},
	{field: "health_check", flag: "--health-check"},
}

// poolFlag maps a pool field to its pool set flag name.
var poolFlag = map[string]string{"host": "host", "residency": "residency", "region": "region", "status": "status", "health_check": "health-check"}

// missing lists the flags a set verb must still give to replace the
// invalid stored value whole without silently dropping what it holds:
// the fields an object needs, each field the stored JSON object holds
// (given reports whether its flag was given) and each of its attrs not
// named by --attr or --unset-attr.
func (b *storedInvalid) missing(fields []repairField, given func(field string) bool, set, unset []string) []string {
	var stored map[string]json.RawMessage
	_ = json.Unmarshal(b.raw, &stored) // not an object: nothing to keep
	var out []string
	for _, f := range fields {
		if _, ok := stored[f.field]; (f.required || ok) && !given(f.field) {
			out = append(out, f.flag)
		}
	}
	var attrs map[string]json.RawMessage
	if raw, ok := stored["attrs"]; ok {
		_ = json.Unmarshal(raw, &attrs) // not an object: nothing to keep
	}
	named := slices.Clone(unset)
	for _, s := range set {
		k, _, _ := strings.Cut(s, "=")
		named = append(named, k)
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		if !slices.Contains(named, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		var v string
		if json.Unmarshal(attrs[k], &v) != nil {
			v = "…"
		}
		out = append(out, "--attr "+k+"="+v)
	}
	return out
}

// liveHealthKeys counts the pool's health keys in cur, whatever their
// values (the agents count each as a live instance; a key whose lease
// ended is gone).
func liveHealthKeys(cur *store.State, pool string) int {
	n := 0
	prefix := routing.HealthKey(pool, "")
	for _, kv := range cur.KVs {
		if strings.HasPrefix(kv.Key, prefix) {
			n++
		}
	}
	return n
}

// poolHint helps with a pool id that names no pool of cfg: "; did you mean
// X?" for ids within two edits, else the pools there are (the first ten).
func poolHint(cfg *routing.Config, id string) string {
	ids := slices.Sorted(maps.Keys(cfg.Pools))
	near := didyoumean.Near(id, ids)
	switch {
	case len(near) > 0:
		return "; did you mean " + strings.Join(near, " or ") + "?"
	case len(ids) == 0:
		return " (no pool is stored: is --prefix right, and was a config applied?)"
	case len(ids) > 10:
		return fmt.Sprintf(" (pools: %s and %d more; regionctl get pools)", strings.Join(ids[:10], ", "), len(ids)-10)
	}
	return " (pools: " + strings.Join(ids, ", ") + ")"
}

// nearHint is "; did you mean X?" for the names within two edits of name
// (didyoumean.Near), "" for none.
func nearHint(name string, names []string) string {
	if near := didyoumean.Near(name, names); len(near) > 0 {
		return "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return ""
}

// valueHint is "; did you mean X?" for the values of a fixed set near
// value (didyoumean.NearValue: drained, draining), "" for none.
func valueHint(value string, values []string) string {
	if near := didyoumean.NearValue(value, values); len(near) > 0 {
		return "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return ""
}

// unknownPool refuses a reference (key's field) to a pool that does not
// exist in cur when pools near its id do, naming them; nil otherwise (the
// write's own checks refuse a pool near none, or whose stored value does
// not decode, as they do).
func unknownPool(cur *store.State, key, field, pool string) error {
	if _, ok := cur.Config.Pools[pool]; ok || invalidAt(cur, routing.PoolKey(pool)) != nil {
		return nil
	}
	hint := nearHint(pool, slices.Sorted(maps.Keys(cur.Config.Pools)))
	if hint == "" {
		return nil
	}
	return refusedError{routing.Errors{{Key: key, Field: field, Msg: fmt.Sprintf("pool %s does not exist%s", pool, hint)}}}
}

// unknownRoute refuses a reference (key's field) to a route that does not
// exist in cur when routes near its name do, naming them; nil otherwise
// (the write's own checks refuse a route near none, or whose stored value
// does not decode, as they do).
func unknownRoute(cur *store.State, key, field, route string) error {
	if _, ok := cur.Config.Routes[route]; ok || invalidAt(cur, routing.RouteKey(route)) != nil {
		return nil
	}
	near := didyoumean.Near(route, slices.Sorted(maps.Keys(cur.Config.Routes)))
	if len(near) == 0 {
		return nil
	}
	return refusedError{routing.Errors{{Key: key, Field: field, Msg: fmt.Sprintf("route %s does not exist; did you mean %s?", route, strings.Join(near, " or "))}}}
}

// boostsOfPool says, when live boosts in cur target pool id, which, and
// what draining it does to them ("" otherwise): a boost's targets replace
// its route's, so its viewers go to the route's fallback chain while the
// pool is out (regionctl boost warns of the reverse order).
func boostsOfPool(cur *store.State, id string, now time.Time) string {
	var named []string
	for _, bid := range cur.OverrideIDs() { // sorted
		ov := cur.Overrides[bid].Override
		if ov.Expired(now) {
			continue
		}
		for _, t := range ov.Targets {
			if t.Pool == id {
				named = append(named, fmt.Sprintf("%s (route %s)", bid, ov.Route))
				break
			}
		}
	}
	if len(named) == 0 {
		return ""
	}
	return fmt.Sprintf("pool %s is a target of live boost(s) %s: while it is out, their viewers go to the boost's other targets or the route's fallback chain (regionctl resolve ROUTE shows where; regionctl boost cancel ID ends one)",
		id, strings.Join(named, ", "))
}

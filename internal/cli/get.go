package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// getSections are what get can show.
var getSections = []string{"pools", "routes", "boosts", "health", "policy", "skipped"}

func (a *app) getCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get [pools|routes|boosts|health|policy|skipped]",
		Short: "Show the stored routing state (all sections by default)",
		Example: `  regionctl get
  regionctl get pools
  regionctl get routes -o json`,
		Args: cobra.MaximumNArgs(1),
	}
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		section := ""
		if len(args) == 1 {
			section = args[0]
		}
		return a.runGet(ctx, section)
	})
	return cmd
}

// getResult is the JSON/YAML output of get.
type getResult struct {
	Revision int64              `json:"revision"`
	Epoch    int64              `json:"epoch"`
	Policy   *routing.Residency `json:"policy,omitempty"`
	// PolicyDefault says Policy is the built-in default: no policy key
	// is stored (so a newer regionctl's default may differ).
	PolicyDefault bool                          `json:"policy_default,omitempty"`
	Pools         map[string]routing.Pool       `json:"pools,omitempty"`
	Routes        map[string]routing.Route      `json:"routes,omitempty"`
	Boosts        map[string]store.LiveOverride `json:"boosts,omitempty"`
	Health        map[string]routing.Health     `json:"health,omitempty"`
	Skipped       []routing.Skipped             `json:"skipped,omitempty"`
	// instances counts each pool's live health keys, whatever their
	// values (as the agents count them).
	instances map[string]int
	// healthTTLs are the health keys' leases' remaining lives by relative
	// key, for the table; a key absent from it has no lease. Nil: not
	// read.
	healthTTLs map[string]time.Duration
	// boostTTLs are the boosts' leases' remaining lives, for the table
	// (boost ls -o json has them as ttl_seconds).
	boostTTLs map[string]time.Duration
	// pools are the stored pools, for the health table's notes (Pools is
	// set only when the pools are shown).
	pools map[string]routing.Pool
	// shown are the sections asked for: in JSON and YAML each is present,
	// {} or [] when empty (a script's jq '.health[]' works on none), and
	// the others absent.
	shown func(string) bool
}

// MarshalJSON writes the sections shown, empty ones as {} or [].
func (r getResult) MarshalJSON() ([]byte, error) {
	var out struct {
		Revision      int64                          `json:"revision"`
		Epoch         int64                          `json:"epoch"`
		Policy        *routing.Residency             `json:"policy,omitempty"`
		PolicyDefault bool                           `json:"policy_default,omitempty"`
		Pools         *map[string]routing.Pool       `json:"pools,omitempty"`
		Routes        *map[string]routing.Route      `json:"routes,omitempty"`
		Boosts        *map[string]store.LiveOverride `json:"boosts,omitempty"`
		Health        *map[string]routing.Health     `json:"health,omitempty"`
		Skipped       *[]routing.Skipped             `json:"skipped,omitempty"`
	}
	out.Revision, out.Epoch, out.Policy, out.PolicyDefault = r.Revision, r.Epoch, r.Policy, r.PolicyDefault
	shown := r.shown
	if shown == nil {
		shown = func(string) bool { return true }
	}
	if shown("pools") {
		out.Pools = nonNilMap(r.Pools)
	}
	if shown("routes") {
		out.Routes = nonNilMap(r.Routes)
	}
	if shown("boosts") {
		out.Boosts = nonNilMap(r.Boosts)
	}
	if shown("health") {
		out.Health = nonNilMap(r.Health)
	}
	if shown("skipped") {
		sk := r.Skipped
		if sk == nil {
			sk = []routing.Skipped{}
		}
		out.Skipped = &sk
	}
	return json.Marshal(out)
}

// nonNilMap returns a pointer to m, or to an empty map when m is nil.
func nonNilMap[K comparable, V any](m map[K]V) *map[K]V {
	if m == nil {
		m = map[K]V{}
	}
	return &m
}

func (a *app) runGet(ctx context.Context, section string) error {
	if section != "" && !contains(getSections, section) {
		return usagef("get %q: want one of %s", section, strings.Join(getSections, ", "))
	}
	cur, err := a.load(ctx)
	if err != nil {
		return err
	}
	if cur.Epoch == 0 && len(cur.Config.Pools) == 0 && len(cur.Config.Routes) == 0 && len(cur.Overrides) == 0 && len(cur.Health) == 0 && len(cur.Skipped) == 0 {
		fmt.Fprintf(a.stderr, "regionctl: nothing is stored under %s/routing/ (epoch 0): is --prefix right, and was a config applied? (a policy shown is the built-in default)\n", a.prefix)
	}
	if around := cur.WrittenAround(); len(around) > 0 {
		fmt.Fprintf(a.stderr, "regionctl: warning: written after epoch %d's commit, so not by regionctl and with no audit record (etcdctl, or a script with the operator role?): %s\n",
			cur.Epoch, strings.Join(around, ", "))
	}
	show := func(s string) bool { return section == "" || section == s }
	out := getResult{Revision: cur.Revision, Epoch: cur.Epoch, instances: map[string]int{}, shown: show}
	if show("policy") {
		pol := cur.Config.ResidencyOrDefault()
		out.Policy, out.PolicyDefault = &pol, cur.Config.Policy.Residency == nil
	}
	if show("pools") {
		out.Pools = cur.Config.Pools
	}
	if show("routes") {
		out.Routes = cur.Config.Routes
	}
	if show("boosts") {
		out.Boosts = cur.Overrides
		if a.output == "table" {
			if out.boostTTLs, err = a.boostTTLs(ctx, cur); err != nil {
				return err
			}
		}
	}
	if show("health") {
		out.Health = cur.Health
		if a.output == "table" {
			if out.healthTTLs, err = a.healthTTLs(ctx, cur); err != nil {
				return err
			}
		}
	}
	if show("skipped") {
		out.Skipped = cur.Skipped
	} else if hidden := skippedOf(cur.Skipped, section); len(hidden) > 0 {
		// A section alone has no SKIPPED part: an invalid value there
		// must not read as an absent key.
		fmt.Fprintf(a.stderr, "regionctl: warning: %d stored value(s) of %s are invalid, so not shown (the agents serve each one's last good value, or nothing for a new key): %s; regionctl get skipped lists them\n",
			len(hidden), section, strings.Join(hidden, "; "))
	}
	for _, kv := range cur.KVs {
		if key, err := routing.ParseKey(kv.Key); err == nil && key.Kind == routing.KindHealth {
			out.instances[key.ID]++
		}
	}
	out.pools = cur.Config.Pools
	return a.printer().print(out, func(w io.Writer) { printGet(w, out, show) })
}

// skippedSection is the get section of each kind of routing key.
var skippedSection = map[string]string{"pools": "pools", "routes": "routes", "overrides": "boosts", "health": "health", "policy": "policy"}

// skippedOf returns the skipped keys of section, each with why it is
// skipped.
func skippedOf(skipped []routing.Skipped, section string) []string {
	var out []string
	for _, sk := range skipped {
		kind, _, _ := strings.Cut(sk.Key, "/")
		if skippedSection[kind] == section {
			out = append(out, sk.Key+" ("+sk.Error+")")
		}
	}
	return out
}

func printGet(w io.Writer, r getResult, show func(string) bool) {
	fmt.Fprintf(w, "epoch %d at revision %d\n", r.Epoch, r.Revision)
	if show("pools") {
		printPools(w, r)
	}
	if show("routes") {
		printRoutes(w, r.Routes)
	}
	if show("boosts") {
		fmt.Fprintln(w)
		printBoosts(w, r.Boosts, r.boostTTLs)
	}
	if show("health") {
		fmt.Fprintln(w)
		printHealth(w, r)
	}
	if show("policy") && r.Policy != nil {
		fmt.Fprintln(w)
		row(w, "CLASS", "COUNTRIES")
		for _, c := range sortedKeys(r.Policy.Classes) {
			row(w, c, strings.Join(r.Policy.Classes[c], " "))
		}
		row(w, "(unknown country)", r.Policy.UnknownCountryClass)
		if r.PolicyDefault {
			fmt.Fprintln(w, "(the built-in default: no policy key is stored; a newer regiond's default may differ: store one to pin it, docs/operations.md)")
		}
	}
	if show("skipped") && len(r.Skipped) > 0 {
		fmt.Fprintln(w)
		row(w, "SKIPPED KEY", "ERROR")
		for _, s := range r.Skipped {
			row(w, s.Key, strings.ReplaceAll(s.Error, "\n", "; "))
		}
	}
}

// printHealth prints the health keys, each with its lease's remaining
// life and a note when its pool does not exist or has no health_check
// (the key changes nothing), then a line for each health-checked pool
// with no live instance (the table has no row for it).
func printHealth(w io.Writer, r getResult) {
	row(w, "HEALTH KEY", "ADDR", "SINCE", "TTL", "NOTE")
	for _, k := range sortedKeys(r.Health) {
		ttl := "-"
		if d, ok := r.healthTTLs[k]; ok {
			ttl = d.String()
			if d == 0 {
				ttl = "ended"
			}
		} else if r.healthTTLs != nil {
			ttl = "no lease"
		}
		note := "-"
		key, _ := routing.ParseKey(k)
		if p, ok := r.pools[key.ID]; !ok {
			note = "no such pool"
		} else if !p.HealthCheck {
			note = "pool without health_check"
		}
		row(w, k, r.Health[k].Addr, orDash(r.Health[k].Since), ttl, note)
	}
	for _, id := range sortedKeys(r.pools) {
		if r.pools[id].HealthCheck && r.instances[id] == 0 {
			fmt.Fprintf(w, "(pool %s: health_check on, 0 live instances: down for the agents once their grace window ends; start its heartbeats, or drain it)\n", id)
		}
	}
}

// healthTTLs reads the leases of the health keys at cur's revision and
// each lease's remaining life (one request per lease), by relative key; a
// key without a lease is absent.
func (a *app) healthTTLs(ctx context.Context, cur *store.State) (map[string]time.Duration, error) {
	ks := a.st.Keyspace()
	prefix := ks.RoutingKey("health/")
	rctx, cancel := context.WithTimeout(ctx, a.commandTimeout)
	// Not WithKeysOnly: etcd 3.7 answers it from its index, with no
	// lease.
	resp, err := a.st.Client().Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(cur.Revision))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read the leases of the health keys %s: %w", prefix, err)
	}
	ttls, byLease := map[string]time.Duration{}, map[int64]time.Duration{}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 {
			continue
		}
		ttl, ok := byLease[kv.Lease]
		if !ok {
			if ttl, err = a.st.TTL(ctx, kv.Lease); err != nil {
				return nil, err
			}
			byLease[kv.Lease] = ttl
		}
		rel, _ := ks.Rel(string(kv.Key))
		ttls[rel] = ttl
	}
	return ttls, nil
}

func printPools(w io.Writer, r getResult) {
	fmt.Fprintln(w)
	row(w, "POOL", "STATUS", "RESIDENCY", "REGION", "HOST", "HEALTH", "ATTRS")
	for _, id := range sortedKeys(r.Pools) {
		p := r.Pools[id]
		health := "-"
		if p.HealthCheck {
			health = fmt.Sprintf("%d live", r.instances[id])
		}
		row(w, id, p.Status, p.Residency, orDash(p.Region), p.Host, health, kvList(p.Attrs))
	}
}

func printRoutes(w io.Writer, routes map[string]routing.Route) {
	fmt.Fprintln(w)
	row(w, "ROUTE", "TARGETS", "FALLBACK", "AFFINITY", "ATTRS")
	for _, name := range sortedKeys(routes) {
		rt := routes[name]
		row(w, name, targetList(rt.Targets), orDash(strings.Join(rt.Fallback, ",")), rt.Affinity, kvList(rt.Attrs))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

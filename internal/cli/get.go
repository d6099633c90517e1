package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

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
	// invalidPools are the pools whose stored value does not decode (not
	// in pools): the agents serve each one's last good value.
	invalidPools map[string]bool
	// provenance says where each pool that is not active got its status,
	// by id (pool_provenance in JSON); nil when not read (the pools not
	// shown) or a read failed (a warning said so).
	provenance map[string]poolProvenance
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
		// PoolProvenance is beside pools, not in their values: those are
		// the stored values.
		PoolProvenance *map[string]poolProvenance `json:"pool_provenance,omitempty"`
		// HealthTTLSeconds is beside health, as PoolProvenance: each
		// health key's lease's remaining life in whole seconds, null for
		// a key without a lease.
		HealthTTLSeconds *map[string]*int64 `json:"health_ttl_seconds,omitempty"`
	}
	out.Revision, out.Epoch, out.Policy, out.PolicyDefault = r.Revision, r.Epoch, r.Policy, r.PolicyDefault
	shown := r.shown
	if shown == nil {
		shown = func(string) bool { return true }
	}
	if shown("pools") {
		out.Pools = nonNilMap(r.Pools)
		if r.provenance != nil {
			out.PoolProvenance = &r.provenance
		}
	}
	if shown("routes") {
		out.Routes = nonNilMap(r.Routes)
	}
	if shown("boosts") {
		out.Boosts = nonNilMap(r.Boosts)
	}
	if shown("health") {
		out.Health = nonNilMap(r.Health)
		if r.healthTTLs != nil {
			ttls := map[string]*int64{}
			for k := range r.Health {
				ttls[k] = nil
				if d, ok := r.healthTTLs[k]; ok {
					s := int64(d / time.Second)
					ttls[k] = &s
				}
			}
			out.HealthTTLSeconds = &ttls
		}
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
		return usagef("get %q: want one of %s%s", section, strings.Join(getSections, ", "), valueHint(section, getSections))
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
	if _, _, refused := cur.InvalidConfig(routing.PolicyKey); show("policy") && !refused {
		// A refused policy is not shown as the built-in one: the agents
		// serve its last good value; it is named under SKIPPED.
		pol := cur.Config.ResidencyOrDefault()
		out.Policy, out.PolicyDefault = &pol, cur.Config.Policy.Residency == nil
	}
	if show("pools") {
		out.Pools = cur.Config.Pools
		if out.provenance, err = a.poolProvenance(ctx, cur); err != nil {
			fmt.Fprintf(a.stderr, "regionctl: warning: who set the status of the pools that are not active, when and why, is not shown: %v\n", err)
			out.provenance = nil
		}
	}
	if show("routes") {
		out.Routes = cur.Config.Routes
	}
	if show("boosts") {
		out.Boosts = cur.Overrides
		if a.output == "table" {
			if out.boostTTLs, err = a.boostTTLs(ctx, cur); err != nil {
				// The boosts are shown all the same (TTL "-"): their
				// values were read, as the health keys' are.
				a.warnBoostTTLs(err)
				out.boostTTLs = nil
			}
		}
	}
	if show("health") {
		out.Health = cur.Health
		if out.healthTTLs, err = a.healthTTLs(ctx, cur); err != nil {
			// The keys are shown all the same (TTL "-", no
			// health_ttl_seconds): their values were read.
			fmt.Fprintf(a.stderr, "regionctl: warning: the health keys' remaining lives are not shown: %v\n", err)
			out.healthTTLs = nil
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
	for _, rel := range cur.InvalidConfigKeys() {
		if id, ok := strings.CutPrefix(rel, "pools/"); ok {
			if out.invalidPools == nil {
				out.invalidPools = map[string]bool{}
			}
			out.invalidPools[id] = true
		}
	}
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
// (the key changes nothing) or its pool's stored value is invalid, then
// a line for each health-checked pool with no live instance (the table
// has no row for it).
func printHealth(w io.Writer, r getResult) {
	row(w, "HEALTH KEY", "ADDR", "SINCE", "TTL", "NOTE")
	for _, k := range sortedKeys(r.Health) {
		ttl := "-"
		if d, ok := r.healthTTLs[k]; ok {
			ttl = ttlText(d)
		} else if r.healthTTLs != nil {
			ttl = "no lease"
		}
		note := "-"
		key, _ := routing.ParseKey(k)
		if p, ok := r.pools[key.ID]; !ok && r.invalidPools[key.ID] {
			note = "its pool's stored value is invalid (the agents serve its last good value; regionctl get skipped)"
		} else if !ok {
			note = "no such pool"
		} else if !p.HealthCheck {
			note = "pool without health_check"
		} else if ttl == "no lease" {
			note = "no lease: live until deleted (as root)" // no heartbeat put it: a hand edit, or an origin's role used by hand
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
// each lease's remaining life (one request per lease, 16 at a time), by
// relative key; a key without a lease is absent.
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
	var leases []int64
	byLease := map[int64]time.Duration{}
	for _, kv := range resp.Kvs {
		if _, ok := byLease[kv.Lease]; kv.Lease != 0 && !ok {
			byLease[kv.Lease] = 0
			leases = append(leases, kv.Lease)
		}
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, lease := range leases {
		g.Go(func() error {
			ttl, err := a.st.TTL(gctx, lease)
			mu.Lock()
			byLease[lease] = ttl
			mu.Unlock()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	ttls := map[string]time.Duration{}
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 {
			rel, _ := ks.Rel(string(kv.Key))
			ttls[rel] = byLease[kv.Lease]
		}
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
	for _, id := range sortedKeys(r.provenance) {
		fmt.Fprintln(w, r.provenance[id].line(id))
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

// maxOriginWrites bounds the writes of a pool's key that get follows back
// to find the one that set its status (each a few reads).
const maxOriginWrites = 4

// poolProvenance is where a pool that is not active got its status: the
// write that set it (the newest of its key's writes that changed the
// status), as the audit trail knows it. pool_provenance in get -o json.
type poolProvenance struct {
	// Status is the pool's status now.
	Status string `json:"status"`
	// Revision is the etcd revision of the write.
	Revision int64 `json:"revision"`
	// Epoch is the regionctl epoch whose commit made the write; absent
	// when none did (WrittenAround) or it is not known (Note).
	Epoch int64 `json:"epoch,omitempty"`
	// At, User, Host, Reason and Command are the epoch's audit record's;
	// absent when it is no longer kept (Note).
	At      string `json:"at,omitempty"`
	User    string `json:"user,omitempty"`
	Host    string `json:"host,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Command string `json:"command,omitempty"`
	// Rewritten says the audit record was put again after its commit:
	// what it says may be the rewrite's (regionctl history names it).
	Rewritten bool `json:"rewritten,omitempty"`
	// WrittenAround says no regionctl commit made the write (etcdctl, a
	// script): no audit record says who, when or why.
	WrittenAround bool `json:"written_around,omitempty"`
	// OrEarlier says the pool had the status before this write too, and
	// the writes before it were not traced (Note says why): the status
	// dates from this write or an earlier one.
	OrEarlier bool `json:"or_earlier,omitempty"`
	// Note says what is not known, and why.
	Note string `json:"note,omitempty"`
}

// poolProvenance finds, for each pool of cur that is not active, the
// write that set its status (store.OriginOf: a few reads per pool, none
// for an active one). The first read that fails ends it: the error.
func (a *app) poolProvenance(ctx context.Context, cur *store.State) (map[string]poolProvenance, error) {
	out := map[string]poolProvenance{}
	modRevs := map[string]int64{}
	for _, kv := range cur.KVs {
		modRevs[kv.Key] = kv.ModRevision
	}
	for _, id := range sortedKeys(cur.Config.Pools) {
		status := cur.Config.Pools[id].Status
		rel := routing.PoolKey(id)
		if status == routing.StatusActive || modRevs[rel] == 0 {
			continue
		}
		had := func(value []byte) bool {
			v, err := routing.DecodeValue(rel, value)
			p, ok := v.(*routing.Pool)
			return err == nil && ok && p.Status == status
		}
		o, err := a.st.OriginOf(ctx, rel, modRevs[rel], cur, had, maxOriginWrites)
		if err != nil {
			return nil, err
		}
		out[id] = provenanceOf(status, o)
	}
	return out, nil
}

// provenanceOf is what get shows of a pool's status's origin.
func provenanceOf(status string, o store.KeyOrigin) poolProvenance {
	w := o.Write
	p := poolProvenance{Status: status, Revision: w.Revision, Epoch: w.Epoch, WrittenAround: w.Around, OrEarlier: !o.Set}
	var notes []string
	switch {
	case w.Record != nil:
		r := w.Record
		p.At, p.User, p.Host, p.Reason, p.Command, p.Rewritten = r.At, r.User, r.Host, r.Reason, r.Command, r.Rewritten
	case w.Epoch > 0:
		notes = append(notes, fmt.Sprintf("the audit record of epoch %d is no longer kept", w.Epoch))
	case w.Unknown != "":
		notes = append(notes, "whether regionctl wrote it is not known: "+w.Unknown)
	}
	if !o.Set {
		notes = append(notes, fmt.Sprintf("it was %s before that write too; %s", status, o.Stopped))
	}
	p.Note = strings.Join(notes, "; ")
	return p
}

// line is the pool's provenance as get's table shows it, under the pools:
// eu-west draining since epoch 11 (2026-12-06 02:40:03 UTC, alice@host: "disk failure").
func (p poolProvenance) line(id string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s since ", id, p.Status)
	if p.Epoch > 0 {
		fmt.Fprintf(&b, "epoch %d", p.Epoch)
	} else {
		fmt.Fprintf(&b, "revision %d", p.Revision)
	}
	if p.OrEarlier {
		b.WriteString(" or earlier")
	}
	var details []string
	switch {
	case p.WrittenAround:
		details = append(details, "written around regionctl, by etcdctl or a script: no audit record says who, when or why")
	case p.At != "" || p.User != "" || p.Command != "":
		who := orDash(oneLine(p.User))
		if p.Host != "" {
			who += "@" + oneLine(p.Host)
		}
		d := fmt.Sprintf("%s, %s: %q", auditTime(p.At), who, p.Reason)
		if p.Reason == "" {
			d = fmt.Sprintf("%s, %s, no --reason: %s", auditTime(p.At), who, oneLine(p.Command))
		}
		if p.Rewritten {
			d = "its audit record was put again after its commit and may not be its own: " + d
		}
		details = append(details, d)
	}
	if p.Note != "" {
		details = append(details, p.Note)
	}
	if len(details) > 0 {
		b.WriteString(" (" + strings.Join(details, "; ") + ")")
	}
	return b.String()
}

// auditTime shows an audit record's time (RFC 3339) as
// "2026-12-06 02:40:03 UTC"; one that does not parse as stored.
func auditTime(at string) string {
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return orDash(oneLine(at))
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// oneLine is s with its control characters escaped as Go quotes them
// (\n, \t), as row writes a cell: a value from etcd keeps its line.
func oneLine(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

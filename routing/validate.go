package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// MaxFallbackDepth is the longest allowed chain of fallback hops.
const MaxFallbackDepth = 8

// Validate checks a whole proposed config against the invariants of
// docs/keys-and-values.md and returns every problem found, sorted by key;
// nil means the config may be written. It never stops at the first
// problem. Each value's size is measured by the bytes regionctl writes
// for it (Values): the check of a config file, every value of which a
// write may put.
func Validate(cfg *Config) Errors {
	return validate(cfg, true)
}

// ValidateExceptSize is Validate without the size limit, for a caller
// that measures each value by its own bytes, as the agents do: the store
// measures the bytes a write puts (CheckWriteSize) and leaves a value the
// write does not change to its stored bytes, which decoding measured (a
// stored value over the limit does not decode). Validate's measure of
// such a value, its encoding as regionctl would write it, is not what
// etcd holds (a hand edit's "&" is 1 byte stored and 6 written as
// \u0026; a missing status is written "active").
func ValidateExceptSize(cfg *Config) Errors {
	return validate(cfg, false)
}

// validate is Validate, measuring each value's size when sized.
func validate(cfg *Config, sized bool) Errors {
	var errs Errors
	pol := cfg.ResidencyOrDefault()
	policyOK := true
	if cfg.Policy.Residency != nil {
		cp := *cfg.Policy.Residency
		perrs := checkValue(PolicyKey, &cp, cp.normalize, sized)
		errs = append(errs, perrs...)
		pol, policyOK = cp, len(perrs) == 0
	}
	for _, id := range sortedKeys(cfg.Pools) {
		p := cfg.Pools[id]
		if !ValidPoolID(id) {
			errs.add(PoolKey(id), "", "invalid pool id (want lower-case letters, digits, '.', '_', '-')")
		}
		errs = append(errs, checkValue(PoolKey(id), &p, p.normalize, sized)...)
	}
	for _, name := range sortedKeys(cfg.Routes) {
		r := cfg.Routes[name]
		if !ValidRouteName(name) {
			errs.add(RouteKey(name), "", "invalid route name (want an ISO 3166-1 alpha-2 code in upper case, _default, or a lower-case group name)%s", CountryHint(name))
		} else if cc := lookalikeCountry(name); cc != "" {
			errs.add(RouteKey(name), "", "group name %q spells the country %s: country routes are upper case (routes/%s)", name, cc, cc)
		}
		errs = append(errs, checkValue(RouteKey(name), &r, func() Errors { return r.normalize(name) }, sized)...)
		checkRouteRefs(&errs, cfg, name, &r, pol)
	}
	if _, ok := cfg.Routes[DefaultRoute]; !ok {
		errs.add(RouteKey(DefaultRoute), "", "missing: every config needs a _default route")
	}
	checkFallbackGraph(&errs, cfg)
	if policyOK {
		// Reachability is judged by class; a broken policy has no reliable
		// classes, and its own errors say what to fix first.
		checkReachability(&errs, cfg, pol)
	}
	errs.Sort()
	return errs
}

// checkValue runs a value's own checks and, when sized, its size limit
// on the bytes regionctl writes for it (encodeValue of the value as it
// is, before normalize fills in defaults: Values does not normalize).
func checkValue(key string, v any, normalize func() Errors, sized bool) Errors {
	var size Errors
	if sized {
		if b, err := encodeValue(v); err == nil {
			size = CheckWriteSize(key, b)
		}
	}
	errs := normalize().prefixed(key)
	return append(errs, size...)
}

// CheckWriteSize returns the size problem of value b that a write is
// about to put at key (relative to <root>/routing/), measured as the
// agents measure a stored value: by its bytes. nil when b is within
// MaxValueSize.
func CheckWriteSize(key string, b []byte) Errors {
	if len(b) <= MaxValueSize {
		return nil
	}
	var errs Errors
	note := ""
	if bytes.Contains(b, []byte(`\u0026`)) || bytes.Contains(b, []byte(`\u003c`)) || bytes.Contains(b, []byte(`\u003e`)) {
		note = ` (as regionctl writes it: each "&", "<" and ">" as \u0026, \u003c and \u003e, 6 bytes)`
	}
	errs.add(key, "", "value is %d bytes%s, larger than the %d-byte limit", len(b), note, MaxValueSize)
	return errs
}

// checkRouteRefs checks that a route's targets and fallbacks exist and that
// a country route's own targets are allowed for the country's class.
func checkRouteRefs(errs *Errors, cfg *Config, name string, r *Route, pol Residency) {
	checkTargetRefs(errs, cfg, RouteKey(name), name, r.Targets, pol)
	for i, f := range r.Fallback {
		if _, ok := cfg.Routes[f]; !ok && ValidRouteName(f) {
			errs.add(RouteKey(name), fmt.Sprintf("fallback[%d]", i), "route %s does not exist", f)
		}
	}
}

// checkTargetRefs checks that targets name existing pools and, when route is
// a country, that every pool is allowed for the country's residency class.
func checkTargetRefs(errs *Errors, cfg *Config, key, route string, targets []Target, pol Residency) {
	class, isCountry := classFor(pol, route)
	for i, tg := range targets {
		field := fmt.Sprintf("targets[%d].pool", i)
		p, ok := cfg.Pools[tg.Pool]
		switch {
		case !ok:
			if ValidPoolID(tg.Pool) {
				errs.add(key, field, "pool %s does not exist", tg.Pool)
			}
		case isCountry && class != "" && p.Residency != class:
			errs.add(key, field, "pool %s has residency %s, not allowed for %s (class %s: %s)", tg.Pool, p.Residency, route, class, allowedPools(cfg, class))
		}
	}
}

// allowedPools names, for a residency error, the pools a route of class
// may name: the first three ids of residency class in order and how many
// more, or that there is none. One pass, not a sort: a config of many
// pools with many such errors stays cheap to validate.
func allowedPools(cfg *Config, class string) string {
	const shown = 3
	var first []string // the smallest ids seen, in order
	n := 0
	for id, p := range cfg.Pools {
		if p.Residency != class {
			continue
		}
		n++
		i, _ := slices.BinarySearch(first, id)
		if i < shown {
			first = slices.Insert(first, i, id)
			if len(first) > shown {
				first = first[:shown]
			}
		}
	}
	switch {
	case n == 0:
		return "no pool has residency " + class
	case n > shown:
		return fmt.Sprintf("its pools are %s and %d more", strings.Join(first, ", "), n-shown)
	case n == 1:
		return "its pool is " + first[0]
	}
	return "its pools are " + strings.Join(first, ", ")
}

// lookalikeCountry returns the country code a lower-case group name spells
// ("pl" -> "PL"), or "".
func lookalikeCountry(name string) string {
	if len(name) != 2 { // every country code is two letters: no ToUpper copy for a group name
		return ""
	}
	if up := strings.ToUpper(name); up != name && IsCountry(up) {
		return up
	}
	return ""
}

// classFor returns the residency class of a route name that is a country,
// and whether it is one.
func classFor(pol Residency, name string) (string, bool) {
	if !IsCountry(name) {
		return "", false
	}
	for class, ccs := range pol.Classes {
		for _, cc := range ccs {
			if cc == name {
				return class, true
			}
		}
	}
	return "", true
}

// checkFallbackGraph refuses fallback cycles and chains deeper than
// MaxFallbackDepth.
func checkFallbackGraph(errs *Errors, cfg *Config) {
	const (
		unvisited = iota
		active
		done
	)
	state := map[string]int{}
	depth := map[string]int{}
	var visit func(name string, path []string) int
	visit = func(name string, path []string) int {
		switch state[name] {
		case active:
			i := indexOf(path, name)
			errs.add(RouteKey(name), "fallback", "cycle: %s", strings.Join(append(path[i:], name), " → "))
			return 0
		case done:
			return depth[name]
		}
		state[name] = active
		d := 0
		for _, f := range cfg.Routes[name].Fallback {
			if _, ok := cfg.Routes[f]; ok {
				d = max(d, 1+visit(f, append(path, name)))
			}
		}
		state[name], depth[name] = done, d
		return d
	}
	for _, name := range sortedKeys(cfg.Routes) {
		if d := visit(name, nil); d > MaxFallbackDepth {
			errs.add(RouteKey(name), "fallback", "chain is %d hops deep, more than %d", d, MaxFallbackDepth)
		}
	}
}

func indexOf(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return 0
}

// checkReachability refuses a config in which some country (or the unknown
// country) can reach no allowed pool along its route chain.
func checkReachability(errs *Errors, cfg *Config, pol Residency) {
	t := compileConfigTable(cfg, pol)
	type group struct {
		chain     string
		class     string
		countries []string
	}
	groups := map[string]*group{}
	for id := 0; id <= len(countries); id++ {
		own, cc := "", Unknown
		if id < len(countries) {
			own, cc = countries[id], countries[id]
		}
		class := t.classOf[id]
		if staticallyReachable(t, own, class) {
			continue
		}
		rd := newReader(t, time.Time{})
		if _, ok := t.routes[own]; !ok {
			own = "" // the chain as it matters: from _default
		}
		chain := strings.Join(rd.chain(own), " → ")
		k := chain + "|" + class
		if groups[k] == nil {
			groups[k] = &group{chain: chain, class: class}
		}
		groups[k].countries = append(groups[k].countries, cc)
	}
	for _, g := range groups {
		key := RouteKey(strings.Fields(strings.ReplaceAll(g.chain, " → ", " "))[0])
		cls := g.class
		if cls == "" {
			cls = "(none)"
		}
		errs.add(key, "residency", "%s (class %s) can reach no allowed pool along %s", listCountries(g.countries), cls, g.chain)
	}
}

// staticallyReachable reports whether some target with weight > 0 along the
// chain names an existing pool allowed for class, whatever its status: the
// rules' walk, with the pool's status and health not counted against it.
func staticallyReachable(t *Table, own, class string) bool {
	var r reachTracer
	newReader(t, time.Time{}).walk(own, class, &r)
	return r.reachable
}

// reachTracer watches a walk for a target that only the pool's status or
// health keeps from being a candidate.
type reachTracer struct{ reachable bool }

func (r *reachTracer) route(string, int, bool) {}

func (r *reachTracer) target(tg Target, why Reason) {
	switch why {
	case "", ReasonPoolDown, ReasonPoolDraining, ReasonPoolUnhealthy:
		r.reachable = r.reachable || tg.Weight > 0
	}
}

func listCountries(ccs []string) string {
	sort.Strings(ccs)
	if len(ccs) == 1 {
		return "country " + ccs[0]
	}
	if len(ccs) > 8 {
		return fmt.Sprintf("countries %s and %d more", strings.Join(ccs[:8], ", "), len(ccs)-8)
	}
	return "countries " + strings.Join(ccs, ", ")
}

// compileConfigTable builds the pools/routes/policy of a table from a config
// without computing effective entries.
func compileConfigTable(cfg *Config, pol Residency) *Table {
	t := &Table{tableState: tableState{policy: pol, routes: map[string]*Route{}}}
	for id, p := range cfg.Pools {
		t.pools.set(id, &PoolState{Pool: &p})
	}
	for name, r := range cfg.Routes {
		r := r
		t.routes[name] = &r
	}
	t.classOf = make([]string, len(countries)+1)
	for class, ccs := range pol.Classes {
		for _, cc := range ccs {
			if id := countryID(cc); id >= 0 {
				t.classOf[id] = class
			}
		}
	}
	t.classOf[len(countries)] = pol.UnknownCountryClass
	return t
}

// ValidateOverride checks an override against a config: the route exists,
// its targets name existing pools, and for a country route every target is
// allowed for the country's class. id is the override id. Its size is not
// measured: the writer measures the bytes it puts (CheckWriteSize), and a
// stored boost's bytes were measured when it was decoded.
func ValidateOverride(cfg *Config, id string, o Override) Errors {
	key := OverrideKey(id)
	var errs Errors
	if !ValidOverrideID(id) {
		errs.add(key, "", "invalid override id")
	}
	errs = append(errs, checkValue(key, &o, o.normalize, false)...)
	if _, ok := cfg.Routes[o.Route]; !ok {
		if up := lookalikeCountry(o.Route); up != "" {
			errs.add(key, "route", "route %s does not exist (country codes are upper case: %s)", o.Route, up)
		} else {
			errs.add(key, "route", "route %s does not exist", o.Route)
		}
	}
	pol := cfg.ResidencyOrDefault()
	pol.normalize() // a nil class list means the built-in eu class
	checkTargetRefs(&errs, cfg, key, o.Route, o.Targets, pol)
	errs.Sort()
	return errs
}

// StoredOverride is a live override with the revision it was written at:
// of several overrides of one route, the newest wins (ties: the larger id,
// as for keys written in one transaction).
type StoredOverride struct {
	// Override is the boost's value.
	Override Override
	// ModRevision is the etcd revision the boost was last written at.
	ModRevision int64
}

// CompileConfig builds a table from a config and live overrides, as the
// agent would from etcd: for dry runs (`regionctl resolve -f`, `--down`)
// and regionctl's checks of a write.
func CompileConfig(cfg *Config, overrides map[string]StoredOverride, opts CompileOptions) (*Table, error) {
	vals, err := cfg.Values()
	if err != nil {
		return nil, err
	}
	kvs := make([]KV, 0, len(vals)+len(overrides))
	for k, v := range vals {
		kvs = append(kvs, KV{Key: k, Value: v})
	}
	for _, id := range sortedKeys(overrides) {
		b, err := json.Marshal(overrides[id].Override)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", OverrideKey(id), err)
		}
		kvs = append(kvs, KV{Key: OverrideKey(id), Value: b, ModRevision: overrides[id].ModRevision})
	}
	return Compile(0, kvs, nil, opts), nil
}

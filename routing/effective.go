package routing

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Effective is the precomputed answer for one country: the winning route,
// its eligible candidates (status, health and residency already filtered),
// the attrs of the route chain and the reasons the answer is degraded. An
// empty Candidates list means NoRoute, and Degraded then holds the reasons.
type Effective struct {
	Route         string            `json:"route"`
	FallbackDepth int               `json:"fallback_depth"`
	Affinity      string            `json:"affinity"`
	Candidates    []Candidate       `json:"candidates"`
	Attrs         map[string]string `json:"attrs"`
	Degraded      []string          `json:"degraded"`
	// js is the entry's JSON, encoded once when the entry is built; entries
	// equal to the previous table's are reused with their encoding.
	js []byte
	// routeDeps and poolDeps are the routes and pools the entry was computed
	// from: when none changed, the next table reuses the entry as it is.
	routeDeps, poolDeps []string
	// sum is the entry's digest (see digest), set when it is encoded.
	sum uint64
}

// Candidate is an eligible pool of an Effective entry.
type Candidate struct {
	Pool   string `json:"pool"`
	Host   string `json:"host"`
	Weight int    `json:"weight"`
	// attrs is the pool's attrs overlaid by Effective.Attrs.
	attrs map[string]string
	// pad is the pool id padded for the sticky hash (see poolPad).
	pad *poolPad
}

// maxChain bounds the route chain even for a table whose fallbacks were
// never validated.
const maxChain = 64

// chain returns the route names tried for a viewer whose own route is own
// ("" for the unknown country): own, then its fallbacks depth-first in
// order, then _default; each name once.
func (t *Table) chain(own string) []string {
	out := make([]string, 0, 4)
	seen := map[string]bool{}
	var visit func(name string, depth int)
	visit = func(name string, depth int) {
		if seen[name] || len(out) >= maxChain || depth > maxChain {
			return
		}
		seen[name] = true
		out = append(out, name)
		if r, ok := t.routes[name]; ok {
			for _, f := range r.Fallback {
				visit(f, depth+1)
			}
		}
	}
	if own != "" {
		visit(own, 0)
	}
	if !seen[DefaultRoute] {
		out = append(out, DefaultRoute)
	}
	return out
}

// ineligible returns why a pool cannot serve a viewer of class at now, or
// "" when it can.
func (t *Table) ineligible(pool, class string, now time.Time) string {
	p, ok := t.pools[pool]
	switch {
	case !ok:
		return "dangling-pool:" + pool
	case class != "" && p.Residency != class:
		return "residency-blocked:" + pool
	case p.down || p.Status == StatusDown:
		return "pool-down:" + pool
	case p.Status == StatusDraining:
		return "pool-draining:" + pool
	case !t.healthy(p, now):
		return "pool-unhealthy:" + pool
	}
	return ""
}

// pad returns the padded id of a pool (nil for an unknown pool). The map
// is filled by build before any effective entry is computed and only read
// afterwards, also by Resolve.
func (t *Table) pad(pool string) *poolPad { return t.pads[pool] }

// reasons is an ordered set of reason codes.
type reasons []string

func (rs *reasons) add(r string) {
	for _, x := range *rs {
		if x == r {
			return
		}
	}
	*rs = append(*rs, r)
}

// computeEffective resolves the route chain of a viewer whose own route is
// own ("" for the unknown country) and whose residency class is class.
func (t *Table) computeEffective(own, class string, now time.Time) *Effective {
	e := &Effective{Candidates: []Candidate{}, Attrs: map[string]string{}}
	rs := reasons{}
	chain := t.chain(own)
	e.routeDeps = chain
	win := -1
	for depth, name := range chain {
		r, ok := t.routes[name]
		if !ok {
			if name != own {
				rs.add("no-route:" + name)
			}
			continue
		}
		for _, tg := range r.Targets {
			if tg.Weight == 0 {
				continue
			}
			e.poolDeps = append(e.poolDeps, tg.Pool)
			if why := t.ineligible(tg.Pool, class, now); why != "" {
				rs.add(why)
				continue
			}
			e.Candidates = append(e.Candidates, Candidate{Pool: tg.Pool, Host: t.pools[tg.Pool].Host, Weight: tg.Weight, pad: t.pad(tg.Pool)})
		}
		if len(e.Candidates) > 0 {
			win = depth
			e.Route, e.FallbackDepth, e.Affinity = name, depth, r.Affinity
			break
		}
	}
	if win < 0 {
		if own != "" {
			if _, ok := t.routes[own]; !ok {
				rs = append(reasons{"no-route:" + own}, rs...)
			}
		}
	} else {
		t.mergeAttrs(e, chain[:win+1])
	}
	if t.stale {
		rs.add("stale-table")
	}
	e.Degraded = []string(rs)
	sortCandidates(e.Candidates)
	return e
}

// mergeAttrs fills e.Attrs with the attrs of the routes of chain from the
// winner (last) back to the country's own route (first), which wins, and
// each candidate's attrs with its pool's attrs overlaid by e.Attrs.
func (t *Table) mergeAttrs(e *Effective, chain []string) {
	for i := len(chain) - 1; i >= 0; i-- {
		if r, ok := t.routes[chain[i]]; ok {
			for k, v := range r.Attrs {
				e.Attrs[k] = v
			}
		}
	}
	for i := range e.Candidates {
		c := &e.Candidates[i]
		pa := t.pools[c.Pool].Attrs
		m := make(map[string]string, len(pa)+len(e.Attrs))
		for k, v := range pa {
			m[k] = v
		}
		for k, v := range e.Attrs {
			m[k] = v
		}
		c.attrs = m
	}
}

func sortCandidates(cs []Candidate) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].Pool < cs[j-1].Pool; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

// build computes the residency class and effective entry of every country
// and the unknown country, evaluated at now.
func (t *Table) build(now time.Time, prev *Table) {
	n := len(countries)
	if prev != nil && len(prev.good) > 0 && prev.classOf != nil && t.sameGoodOrAbsent(prev, PolicyKey) {
		t.classOf = prev.classOf // same policy: same classes (the slice is never changed)
	} else {
		t.classOf = make([]string, n+1)
		for class, ccs := range t.policy.Classes {
			for _, cc := range ccs {
				if id := countryID(cc); id >= 0 {
					t.classOf[id] = class
				}
			}
		}
		t.classOf[n] = t.policy.UnknownCountryClass
	}
	t.pads = make(map[string]*poolPad, len(t.pools))
	for id := range t.pools {
		t.pads[id] = newPoolPad(id)
	}
	t.eligibleAt = make(map[string]bool, len(t.pools))
	for id, p := range t.pools {
		t.eligibleAt[id] = !p.down && t.healthy(p, now)
	}
	t.eff = make([]*Effective, n+1)
	shared := make(map[[2]string]*Effective, 64)
	deps := make(map[*Effective]bool, 64)
	for id := 0; id <= n; id++ {
		name, key := "", ""
		if id < n {
			name, key = countries[id], countries[id]
			if _, ok := t.routes[name]; !ok {
				key = "\x00" // countries without a route share their class's entry
			}
		}
		k := [2]string{key, t.classOf[id]}
		e, ok := shared[k]
		if !ok && t.canReuse(prev, id, deps) {
			e, ok = prev.eff[id], true
			if key != "\x00" || len(e.Candidates) > 0 {
				shared[k] = e
			}
		}
		if !ok {
			e = t.computeEffective(name, t.classOf[id], now)
			// A NoRoute entry names the country ("no-route:BR"): not shared.
			if key != "\x00" || len(e.Candidates) > 0 {
				shared[k] = e
			}
		}
		t.eff[id] = e
	}
	t.reuseEffective(prev)
	t.validUntil = time.Time{}
	for _, p := range t.pools {
		if p.HealthCheck && p.Instances == 0 && p.fixedHealthy == nil {
			if d := p.since.Add(t.grace); d.After(now) && (t.validUntil.IsZero() || d.Before(t.validUntil)) {
				t.validUntil = d
			}
		}
	}
	t.checksum = t.computeChecksum(false)
	t.enc = newEncoded(prev)
}

// canReuse reports whether the previous table's entry for country id holds
// unchanged here: same class, same stale flag, same own route, and none of
// the routes and pools it was computed from changed (values, existence,
// health). deps memoizes the route and pool check per entry.
func (t *Table) canReuse(prev *Table, id int, deps map[*Effective]bool) bool {
	if prev == nil || len(prev.eff) != len(t.eff) || prev.stale != t.stale || len(prev.good) == 0 ||
		prev.classOf[id] != t.classOf[id] || prev.eff[id] == nil {
		return false
	}
	e := prev.eff[id]
	if id < len(countries) && !sameRoute(t, prev, countries[id]) {
		return false
	}
	ok, seen := deps[e]
	if !seen {
		ok = t.sameDeps(prev, e)
		deps[e] = ok
	}
	return ok
}

// sameDeps reports whether the routes and pools an entry was computed from
// are unchanged.
func (t *Table) sameDeps(prev *Table, e *Effective) bool {
	for _, r := range e.routeDeps {
		if !sameRoute(t, prev, r) {
			return false
		}
	}
	for _, p := range e.poolDeps {
		tp, tok := t.pools[p]
		pp, pok := prev.pools[p]
		if tok != pok || (tok && (tp.src == nil || tp.src != pp.src || tp.down != pp.down ||
			t.eligibleAt[p] != prev.eligibleAt[p])) {
			return false
		}
	}
	return true
}

// sameGoodOrAbsent reports whether key holds the very same decoded value
// in both tables, or is absent from both.
func (t *Table) sameGoodOrAbsent(prev *Table, key string) bool {
	a, aok := t.good[key]
	b, bok := prev.good[key]
	return aok == bok && (!aok || a.val == b.val)
}

// sameRoute reports whether a route is the very same decoded value (or
// absent) in both tables. Routes changed by an override are fresh copies:
// never the same.
func sameRoute(t, prev *Table, name string) bool {
	a, aok := t.routes[name]
	b, bok := prev.routes[name]
	return aok == bok && a == b
}

// reuseEffective replaces each effective entry equal to the previous
// table's entry for the same country by that entry, so its JSON encoding is
// reused, and encodes the entries that are new.
func (t *Table) reuseEffective(prev *Table) {
	swap := map[*Effective]*Effective{}
	for id, e := range t.eff {
		if r, done := swap[e]; done {
			t.eff[id] = r
			continue
		}
		r := e
		if prev != nil && len(prev.eff) == len(t.eff) && equalEffective(prev.eff[id], e) {
			r = prev.eff[id]
		} else {
			e.js, _ = json.Marshal(e)
			e.sum = e.digest()
		}
		swap[e] = r
		t.eff[id] = r
	}
}

// equalEffective reports whether two entries answer every viewer alike.
func equalEffective(a, b *Effective) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil || a.Route != b.Route || a.FallbackDepth != b.FallbackDepth ||
		a.Affinity != b.Affinity || len(a.Candidates) != len(b.Candidates) ||
		!maps.Equal(a.Attrs, b.Attrs) || !slices.Equal(a.Degraded, b.Degraded) {
		return false
	}
	for i := range a.Candidates {
		ca, cb := &a.Candidates[i], &b.Candidates[i]
		if ca.Pool != cb.Pool || ca.Host != cb.Host || ca.Weight != cb.Weight || !maps.Equal(ca.attrs, cb.attrs) {
			return false
		}
	}
	return true
}

// computeChecksum digests the effective entries. Each entry's digest is
// computed once when the entry is built (sum); VerifyChecksum recomputes
// them from the entries' contents (fresh).
func (t *Table) computeChecksum(fresh bool) uint64 {
	var h uint64 = 1469598103934665603
	for id, e := range t.eff {
		s := e.sum
		if fresh || s == 0 {
			s = e.digest()
		}
		h = (h ^ s ^ uint64(id)) * 1099511628211
	}
	return h
}

// digest hashes what an entry answers.
func (e *Effective) digest() uint64 {
	d := xxhash.New()
	d.WriteString(e.Route)
	d.WriteString("\x00")
	for _, c := range e.Candidates {
		d.WriteString(c.Pool)
		d.WriteString("\x01")
		d.WriteString(c.Host)
		d.Write([]byte{byte(c.Weight)})
	}
	for _, r := range e.Degraded {
		d.WriteString(r)
	}
	return d.Sum64() | 1
}

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
	t.classOf = make([]string, n+1)
	for class, ccs := range t.policy.Classes {
		for _, cc := range ccs {
			if id := countryID(cc); id >= 0 {
				t.classOf[id] = class
			}
		}
	}
	t.classOf[n] = t.policy.UnknownCountryClass
	t.pads = make(map[string]*poolPad, len(t.pools))
	for id := range t.pools {
		t.pads[id] = newPoolPad(id)
	}
	t.eff = make([]*Effective, n+1)
	shared := map[[2]string]*Effective{}
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
	t.checksum = t.computeChecksum()
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

// computeChecksum digests the effective entries.
func (t *Table) computeChecksum() uint64 {
	d := xxhash.New()
	for _, e := range t.eff {
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
	}
	return d.Sum64()
}

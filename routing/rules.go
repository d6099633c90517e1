package routing

import (
	"slices"
	"strings"
	"time"
)

// This file is the resolution rules of docs/resolution.md, steps 3 and 4
// and the Decision's attrs: the route chain, a target's eligibility, the
// walk that finds the winning route and the attrs merge, and the reason
// codes. It is the only walk of the chain: the table's entries (the memo
// engine, memo.go), the entries between rebuilds (Resolve), Explain and
// the static reachability check of Validate all run walk.
//
// The rules read the table only through a reader, which records every
// route and pool they read: an entry's dependencies are what its walk
// read, so a rule that reads something new cannot forget to declare it.

// Reason is the code of why a route or pool was passed over
// (docs/resolution.md, Reason codes). A reason is listed as its code and
// the route or pool it is about ("pool-down:eu-central", see On), except
// ReasonStaleTable, which is about the whole table.
type Reason string

// The reason codes, in the order a pool is tested (the first that applies
// is reported), then the codes about routes and tables.
const (
	// ReasonDanglingPool: a target names a pool that does not exist.
	ReasonDanglingPool Reason = "dangling-pool"
	// ReasonResidencyBlocked: the pool's residency is not the viewer's class.
	ReasonResidencyBlocked Reason = "residency-blocked"
	// ReasonPoolDown: the pool's status is down (or down in a what-if).
	ReasonPoolDown Reason = "pool-down"
	// ReasonPoolDraining: the pool's status is draining.
	ReasonPoolDraining Reason = "pool-draining"
	// ReasonPoolUnhealthy: the pool has health_check and no live health
	// key past the grace window.
	ReasonPoolUnhealthy Reason = "pool-unhealthy"
	// ReasonWeightZero: an otherwise eligible target has weight 0. It is
	// never a candidate, and shown only by Explain, never in degraded.
	ReasonWeightZero Reason = "weight-0"
	// ReasonNoRoute: a fallback name is missing from the table, or the
	// viewer's own route is missing and the answer is NoRoute.
	ReasonNoRoute Reason = "no-route"
	// ReasonStaleTable: the table is the snapshot file's, not yet
	// confirmed against etcd.
	ReasonStaleTable Reason = "stale-table"
)

// On returns the reason as listed about the route or pool name
// ("pool-down:eu-central").
func (r Reason) On(name string) string { return string(r) + ":" + name }

// ReasonOf returns the code of a listed reason: ReasonPoolDown for
// "pool-down:eu-central", ReasonStaleTable for "stale-table".
func ReasonOf(listed string) Reason {
	code, _, _ := strings.Cut(listed, ":")
	return Reason(code)
}

// reasons is an ordered set of listed reasons.
type reasons []string

func (rs *reasons) add(r string) {
	if !slices.Contains(*rs, r) {
		*rs = append(*rs, r)
	}
}

// maxChain bounds the route chain even for a table whose fallbacks were
// never validated.
const maxChain = 64

// reader is the table state the rules read, evaluated at now, and the
// record of what they read: the routes and pools, each once, in the order
// first read. Besides those, the rules read only table-wide inputs (the
// viewer's class, the stale flag, the health grace), on which every entry
// depends.
type reader struct {
	t      *Table
	now    time.Time
	routes []string
	pools  []string
}

// newReader returns a reader of t at now with an empty record.
func newReader(t *Table, now time.Time) *reader { return &reader{t: t, now: now} }

// route returns the route name (with its live overrides applied).
func (rd *reader) route(name string) (*Route, bool) {
	if !slices.Contains(rd.routes, name) {
		rd.routes = append(rd.routes, name)
	}
	r, ok := rd.t.routes[name]
	return r, ok
}

// pool returns the state of pool id.
func (rd *reader) pool(id string) (*PoolState, bool) {
	if !slices.Contains(rd.pools, id) {
		rd.pools = append(rd.pools, id)
	}
	p, ok := rd.t.pools.get(id)
	return p, ok
}

// chain returns the route names tried for a viewer whose own route is own
// ("" for the unknown country): own, then its fallbacks depth-first in
// order, then _default; each name once.
func (rd *reader) chain(own string) []string {
	out := make([]string, 0, 4) // also the names seen: chains are short
	if own != "" {
		out = rd.visit(out, own, 0)
	}
	if !slices.Contains(out, DefaultRoute) {
		out = append(out, DefaultRoute)
	}
	return out
}

// visit appends name and then its fallbacks, depth-first, to the chain out.
func (rd *reader) visit(out []string, name string, depth int) []string {
	if len(out) >= maxChain || depth > maxChain || slices.Contains(out, name) {
		return out
	}
	out = append(out, name)
	if r, ok := rd.route(name); ok {
		for _, f := range r.Fallback {
			out = rd.visit(out, f, depth+1)
		}
	}
	return out
}

// judge returns why target tg cannot be a candidate for a viewer of
// class, or "" when it is one. The pool is tested first, in the order of
// the reason codes; a target of an eligible pool with weight 0 is
// ReasonWeightZero.
func (rd *reader) judge(tg Target, class string) Reason {
	p, ok := rd.pool(tg.Pool)
	switch {
	case !ok:
		return ReasonDanglingPool
	case class != "" && p.Residency != class:
		return ReasonResidencyBlocked
	case p.down || p.Status == StatusDown:
		return ReasonPoolDown
	case p.Status == StatusDraining:
		return ReasonPoolDraining
	case !rd.t.healthy(p, rd.now):
		return ReasonPoolUnhealthy
	case tg.Weight == 0:
		return ReasonWeightZero
	}
	return ""
}

// tracer is told of every step of a walk: each route of the chain as it
// is tried, and each of its targets with why it is not a candidate ("" when
// it is one). The walk stops after the winning route.
type tracer interface {
	route(name string, depth int, exists bool)
	target(tg Target, why Reason)
}

// walk resolves the route chain of a viewer whose own route is own ("" for
// the unknown country) and whose residency class is class: the first route
// of the chain with a candidate wins; the candidates are its targets with
// an eligible pool and weight > 0, sorted by pool id. Everything passed
// over on the way is listed in Degraded, in the order met and each once;
// weight-0 targets are not. tr, when not nil, is told of every step.
func (rd *reader) walk(own, class string, tr tracer) *Effective {
	e := &Effective{Candidates: []Candidate{}, Attrs: map[string]string{}}
	rs := reasons{}
	chain := rd.chain(own)
	win := -1
	for depth, name := range chain {
		r, ok := rd.route(name)
		if tr != nil {
			tr.route(name, depth, ok)
		}
		if !ok {
			if name != own {
				rs.add(ReasonNoRoute.On(name))
			}
			continue
		}
		for _, tg := range r.Targets {
			why := rd.judge(tg, class)
			if tr != nil {
				tr.target(tg, why)
			}
			switch why {
			case "":
				p, _ := rd.pool(tg.Pool)
				e.Candidates = append(e.Candidates, Candidate{Pool: tg.Pool, Host: p.Host, Weight: tg.Weight, pad: rd.t.padOf(tg.Pool)})
			case ReasonWeightZero: // listed, never a candidate, not a degradation
			default:
				if tg.Weight > 0 {
					rs.add(why.On(tg.Pool))
				}
			}
		}
		if len(e.Candidates) > 0 {
			win = depth
			e.Route, e.FallbackDepth, e.Affinity = name, depth, r.Affinity
			break
		}
	}
	if win >= 0 {
		rd.mergeAttrs(e, chain[:win+1])
	} else if own != "" {
		if _, ok := rd.route(own); !ok {
			rs = append(reasons{ReasonNoRoute.On(own)}, rs...)
		}
	}
	if rd.t.stale {
		rs.add(string(ReasonStaleTable))
	}
	e.Degraded = []string(rs)
	sortCandidates(e.Candidates)
	return e
}

// mergeAttrs fills e.Attrs with the attrs of the routes of chain from the
// winner (last) back to the country's own route (first), which wins, and
// each candidate's attrs with its pool's attrs overlaid by e.Attrs.
func (rd *reader) mergeAttrs(e *Effective, chain []string) {
	for i := len(chain) - 1; i >= 0; i-- {
		if r, ok := rd.route(chain[i]); ok {
			for k, v := range r.Attrs {
				e.Attrs[k] = v
			}
		}
	}
	for i := range e.Candidates {
		c := &e.Candidates[i]
		p, _ := rd.pool(c.Pool)
		m := make(map[string]string, len(p.Attrs)+len(e.Attrs))
		for k, v := range p.Attrs {
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

// computeEffective is the entry of a viewer whose own route is own and
// whose class is class at now, with the routes and pools it read as its
// dependencies.
func (t *Table) computeEffective(own, class string, now time.Time) *Effective {
	// The record becomes the entry's dependencies: room for a usual chain.
	rd := reader{t: t, now: now, routes: make([]string, 0, 4), pools: make([]string, 0, 4)}
	e := rd.walk(own, class, nil)
	e.routeDeps, e.poolDeps = rd.routes, rd.pools
	for _, name := range e.routeDeps {
		e.mask.add(name)
	}
	for _, name := range e.poolDeps {
		e.mask.add(name)
	}
	return e
}

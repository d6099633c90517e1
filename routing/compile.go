package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// CompileOptions are the inputs of Compile that do not come from etcd.
type CompileOptions struct {
	// Now is the compile time, used by the health clock.
	Now time.Time
	// Start is when the agent started: a pool with health_check that never
	// had a health key counts its grace window from here. Zero means Now.
	Start time.Time
	// Grace is the health grace window; zero means DefaultHealthGrace.
	Grace time.Duration
	// Down lists pools to treat as down ("what if fra drains?").
	Down []string
	// Stale marks the table as not confirmed against etcd.
	Stale bool
	// ClusterID is the etcd cluster the values were read from (0: unknown).
	ClusterID uint64
}

// Compile builds a table from every key/value of <root>/routing/ at one
// revision. A value that does not parse or fails its own checks is listed in
// Skipped; if prev had a good value for that key, that value is kept (last
// good wins). Values whose bytes equal prev's are not decoded again.
// Compile never fails: whole-config rules (DESIGN §3) are enforced by
// writers, and the resolver copes with whatever is left.
func Compile(revision int64, kvs []KV, prev *Table, opts CompileOptions) *Table {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.Start.IsZero() {
		opts.Start = opts.Now
		if prev != nil && !prev.start.IsZero() {
			opts.Start = prev.start
		}
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultHealthGrace
	}
	t := &Table{
		revision:  revision,
		stale:     opts.Stale,
		clusterID: opts.ClusterID,
		grace:     opts.Grace,
		start:     opts.Start,
		builtAt:   opts.Now,
		policy:    DefaultResidency(),
		pools:     map[string]*PoolState{},
		routes:    map[string]*Route{},
		overrides: map[string]*Override{},
		applied:   map[string][]string{},
		good:      make(map[string]goodValue, len(kvs)),
	}
	var prevGood map[string]goodValue
	if prev != nil {
		prevGood = prev.good
	}
	instances := map[string]int{}
	for _, kv := range kvs {
		// A health key is a live instance whatever its value says: the
		// key exists only while its lease does. Its value is only checked
		// to be a JSON object (and reported otherwise), never decoded:
		// thousands of them must not slow a compile down.
		if k, err := ParseKey(kv.Key); err == nil && k.Kind == KindHealth {
			instances[k.ID]++
			if msg := checkHealthValue(kv.Value); msg != "" {
				t.skipped = append(t.skipped, Skipped{Key: kv.Key, Error: kv.Key + ": " + msg})
			}
			continue
		}
		t.addKV(kv, prevGood)
	}
	t.assemble(prev, instances, opts)
	sort.Slice(t.skipped, func(i, j int) bool { return t.skipped[i].Key < t.skipped[j].Key })
	t.build(opts.Now, prev)
	return t
}

// checkHealthValue returns why a health value is refused, or "".
func checkHealthValue(raw []byte) string {
	if len(raw) > MaxValueSize {
		return fmt.Sprintf("value is %d bytes, larger than the %d-byte limit", len(raw), MaxValueSize)
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return fmt.Sprintf("value must be a JSON object, got %q", truncate(raw))
	}
	return ""
}

// addKV decodes one key (or reuses prev's decoding of the same bytes) and
// records it as good, or as skipped keeping prev's good value.
func (t *Table) addKV(kv KV, prevGood map[string]goodValue) {
	if g, ok := prevGood[kv.Key]; ok && bytes.Equal(g.raw, kv.Value) {
		t.good[kv.Key] = goodValue{raw: g.raw, val: g.val, rev: kv.ModRevision}
		return
	}
	v, err := DecodeValue(kv.Key, kv.Value)
	if err != nil {
		t.skipped = append(t.skipped, Skipped{Key: kv.Key, Error: err.Error()})
		if g, ok := prevGood[kv.Key]; ok {
			t.good[kv.Key] = g
		}
		return
	}
	t.good[kv.Key] = goodValue{raw: kv.Value, val: v, rev: kv.ModRevision}
}

type overrideAt struct {
	id  string
	rev int64
	o   *Override
}

// assemble turns the good values into pools, routes, policy and overrides.
func (t *Table) assemble(prev *Table, instances map[string]int, opts CompileOptions) {
	var ovs []overrideAt
	for key, g := range t.good {
		k, _ := ParseKey(key)
		switch k.Kind {
		case KindPool:
			t.pools[k.ID] = &PoolState{Pool: *g.val.(*Pool), src: g.val.(*Pool)}
		case KindRoute:
			t.routes[k.ID] = g.val.(*Route)
		case KindPolicy:
			t.policy = *g.val.(*Residency)
		case KindOverride:
			o := g.val.(*Override)
			t.overrides[k.ID] = o
			ovs = append(ovs, overrideAt{id: k.ID, rev: g.rev, o: o})
		case KindEpoch:
			t.epoch = g.val.(int64)
		}
	}
	for id, p := range t.pools {
		p.Instances = instances[id]
		p.since = t.start
		if prev != nil {
			if pp, ok := prev.pools[id]; ok {
				switch {
				case pp.Instances > 0:
					p.since = opts.Now
				case pp.fixedHealthy == nil:
					p.since = pp.since
				}
			}
		}
	}
	for _, id := range opts.Down {
		if p, ok := t.pools[id]; ok {
			cp := *p
			cp.down = true
			t.pools[id] = &cp
		}
	}
	t.applyOverrides(ovs)
}

// applyOverrides replaces targets and merges attrs of the routes named by
// live overrides, oldest first (by ModRevision), so the newest override
// wins. An override of a route that does not exist is not applied (it would
// create a route nobody configured) and is listed in Skipped.
func (t *Table) applyOverrides(ovs []overrideAt) {
	sort.Slice(ovs, func(i, j int) bool {
		if ovs[i].rev != ovs[j].rev {
			return ovs[i].rev < ovs[j].rev
		}
		return ovs[i].id < ovs[j].id
	})
	for _, ov := range ovs {
		base, ok := t.routes[ov.o.Route]
		if !ok {
			t.skipped = append(t.skipped, Skipped{Key: OverrideKey(ov.id),
				Error: fmt.Sprintf("%s: route: route %s does not exist; the override is not applied", OverrideKey(ov.id), ov.o.Route)})
			continue
		}
		cp := *base
		r := &cp
		if len(ov.o.Targets) > 0 {
			r.Targets = ov.o.Targets
		}
		if len(ov.o.Attrs) > 0 {
			merged := make(map[string]string, len(r.Attrs)+len(ov.o.Attrs))
			for k, v := range r.Attrs {
				merged[k] = v
			}
			for k, v := range ov.o.Attrs {
				merged[k] = v
			}
			r.Attrs = merged
		}
		t.routes[ov.o.Route] = r
		t.applied[ov.o.Route] = append(t.applied[ov.o.Route], ov.id)
	}
}

// At returns a table equal to t but with health evaluated at now. It returns
// t itself when no grace window has ended since t was built.
func (t *Table) At(now time.Time) *Table {
	if t.validUntil.IsZero() || now.Before(t.validUntil) {
		return t
	}
	cp := *t
	cp.build(now, t)
	return &cp
}

// WithRevision returns a copy of t marked current at a later revision (a
// progress notification) and confirmed against etcd.
func (t *Table) WithRevision(rev int64) *Table {
	cp := *t
	cp.revision = rev
	if cp.stale {
		cp.stale = false
		cp.build(t.builtAt, t)
	}
	return &cp
}

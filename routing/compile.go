package routing

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
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
	// Earlier holds, for keys whose current value is refused, the newest
	// good value written before it to the same incarnation of the key, as
	// read from etcd's history (the mirror does after a relist). Compile
	// keeps it as the key's last good value, so a table compiled after a
	// gap (a relist, a restart) keeps what one updated event by event
	// kept. Without it, Compile can only keep prev's last good value of
	// the same incarnation.
	Earlier map[string]KV
	// Decoded holds kvs' values decoded ahead (Decoded.Decode of the same
	// KVs in the same order: a mirror decodes each page of a list while
	// it reads the next); Compile decodes only the values it lacks.
	Decoded *Decoded
}

// withDefaults fills in Now, Start (from prev when it has one) and Grace.
func (o CompileOptions) withDefaults(prev *Table) CompileOptions {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Start.IsZero() {
		o.Start = o.Now
		if prev != nil && !prev.start.IsZero() {
			o.Start = prev.start
		}
	}
	if o.Grace <= 0 {
		o.Grace = DefaultHealthGrace
	}
	return o
}

// Compile builds a table from every key/value of <root>/routing/ at one
// revision. A value that does not parse or fails its own checks is listed in
// Skipped; the key keeps its last good value (last good wins) of the same
// incarnation: opts.Earlier's, else prev's if prev's was written to that
// incarnation (a key deleted and written again starts afresh). Values whose
// bytes equal prev's are not decoded again. The table keeps the kvs'
// values (see KV): they must not be changed afterwards.
// Compile never fails: whole-config rules (docs/keys-and-values.md, invariants) are enforced by
// writers, and the resolver copes with whatever is left.
func Compile(revision int64, kvs []KV, prev *Table, opts CompileOptions) *Table {
	opts = opts.withDefaults(prev)
	t := &Table{tableState: tableState{
		revision:  revision,
		changed:   revision,
		stale:     opts.Stale,
		clusterID: opts.ClusterID,
		grace:     opts.Grace,
		start:     opts.Start,
		builtAt:   opts.Now,
		compiled:  len(opts.Down) == 0,
		policy:    DefaultResidency(),
	}, memo: memo{instances: map[string]int{}}}
	good := make(map[string]goodValue, len(kvs))
	var prevGood *goodValues
	if prev != nil {
		prevGood = &prev.good
	}
	ahead := opts.Decoded.of(kvs)
	if ahead == nil {
		ahead = predecode(kvs, prev).of(kvs)
	}
	for i, kv := range kvs {
		// A health key is a live instance whatever its value says: the
		// key exists only while its lease does. Its value is only checked
		// to be a JSON object (and reported otherwise), never decoded:
		// thousands of them must not slow a compile down.
		if k, err := ParseKey(kv.Key); err == nil && k.Kind == KindHealth {
			t.instances[k.ID]++
			t.setInvalid(kv.Key, kv.healthError())
			continue
		}
		var d *decoded
		if ahead != nil {
			d = ahead.at(i)
		}
		t.addKV(good, kv, prevGood, opts.Earlier, d)
	}
	t.good = newGoodValues(good)
	t.trackLost(prev, opts.Now)
	pools := make(map[string]*PoolState, len(good))
	for key, g := range good {
		k, _ := ParseKey(key)
		switch k.Kind {
		case KindPool:
			pools[k.ID] = t.newPoolState(k.ID, g.val.(*Pool))
		case KindPolicy:
			t.policy = *g.val.(*Residency)
		case KindEpoch:
			t.epoch = g.val.(int64)
		}
	}
	for _, id := range opts.Down {
		if p, ok := pools[id]; ok {
			cp := *p
			cp.down = true
			pools[id] = &cp
		}
	}
	t.pools = newLayered(pools)
	t.assembleRoutes(opts.Now)
	t.collectSkipped()
	t.build(opts.Now, prev, nil)
	return t
}

// Event is one key's new state for Update: a put of KV, or its deletion.
type Event struct {
	KV
	// Deleted means the key was deleted; Value is then ignored.
	Deleted bool
	// Created means a put of a key that did not exist before it. Update
	// counts health keys with it (a pool's live instances).
	Created bool
}

// newPoolState makes the state of pool id from its stored value, with its
// live instances and when it lost its last one.
func (t *Table) newPoolState(id string, val *Pool) *PoolState {
	p := &PoolState{Pool: val, src: val, Instances: t.instances[id], since: t.start}
	if at, ok := t.lost[id]; ok {
		p.since = at
	}
	return p
}

// trackLost records, per pool id, when its last health key went: from
// prev's record, and now for the ids whose count dropped to zero.
// Whether the pool's own key existed meanwhile does not matter.
func (t *Table) trackLost(prev *Table, now time.Time) {
	t.lost = map[string]time.Time{}
	if prev == nil {
		return
	}
	for id, at := range prev.lost {
		// Once the grace windows from both the loss and the agent start
		// are over, the record changes no answer.
		if t.instances[id] == 0 && (at.Add(t.grace).After(now) || t.start.Add(t.grace).After(now)) {
			t.lost[id] = at
		}
	}
	for id, n := range prev.instances {
		if n > 0 && t.instances[id] == 0 {
			t.lost[id] = now
		}
	}
	// A table loaded from a snapshot file knows which pools its writer
	// judged unhealthy. One still without a health key is unhealthy at
	// once, not healthy for the grace window from this agent's start:
	// a fleet restarted (a package upgrade) sent viewers to a dead
	// origin for that window on every node (the docs review). A pool the
	// file has healthy gets the window, as before: when its keys went is
	// not known.
	if !prev.start.IsZero() || prev.clusterID != 0 && t.clusterID != 0 && prev.clusterID != t.clusterID {
		return // compiled, not loaded (no pool has a fixed health), or another cluster's file
	}
	for id, p := range prev.pools.all() {
		if p.fixedHealthy != nil && !*p.fixedHealthy && t.instances[id] == 0 {
			if _, ok := t.lost[id]; !ok {
				t.lost[id] = t.start.Add(-t.grace)
			}
		}
	}
}

// checkHealthValue returns why a health value is refused, or "".
func checkHealthValue(key string, raw []byte) string {
	if len(raw) > MaxValueSize {
		return fmt.Sprintf("%s: value is %d bytes, larger than the %d-byte limit", key, len(raw), MaxValueSize)
	}
	if !utf8.Valid(raw) {
		return key + ": " + notUTF8(raw)
	}
	t := bytes.TrimSpace(raw)
	ok, depth, lone := false, 0, -1
	if len(t) > 0 && t[0] == '{' {
		ok, depth, lone = validJSONCheck(t)
	}
	if !ok {
		return fmt.Sprintf("%s: value must be a JSON object, got %q", key, truncate(raw))
	}
	if depth > MaxValueDepth {
		return fmt.Sprintf("%s: value is nested %d levels deep (objects and lists), more than the %d accepted", key, depth, MaxValueDepth)
	}
	if lone >= 0 {
		return key + ": " + loneSurrogate(t, lone, cap(raw)-cap(t))
	}
	// The case-twin rule of the decoder (decodeFields), without decoding.
	var buf [8]jsonMember
	for _, m := range splitObjectInto(buf[:0], t, false) {
		if twin := caseTwin(healthFields, m.key); twin != "" && fieldNamed(healthFields, m.key) == nil {
			return fmt.Sprintf("%s: %s: differs from the field %q only by case; refused (a reader matching names without case would take it for %q)", key, m.key, twin, twin)
		}
	}
	return ""
}

// setInvalid records why key's current value is refused, or clears it
// when msg is "".
func (t *Table) setInvalid(key, msg string) {
	if msg == "" {
		delete(t.invalid, key)
		return
	}
	if t.invalid == nil {
		t.invalid = map[string]string{}
	}
	t.invalid[key] = msg
}

// addKV decodes one key (or reuses prev's decoding of the same bytes) and
// records it in good, or as refused keeping its last good value of the same
// incarnation: earlier's, else prev's.
func (t *Table) addKV(good map[string]goodValue, kv KV, prevGood *goodValues, earlier map[string]KV, pre *decoded) {
	if g, ok := prevGood.get(kv.Key); ok && bytes.Equal(g.raw, kv.Value) {
		good[kv.Key] = goodValue{raw: g.raw, val: g.val, rev: kv.ModRevision, create: kv.CreateRevision}
		return
	}
	var v any
	var err error
	if pre != nil && pre.done && pre.of(kv) {
		v, err = pre.v, pre.err
	} else {
		v, err = decodeKept(kv.Key, kv.Value)
	}
	if err != nil {
		t.setInvalid(kv.Key, err.Error())
		if e, ok := earlier[kv.Key]; ok && e.CreateRevision == kv.CreateRevision {
			if ev, err := decodeKept(e.Key, e.Value); err == nil {
				good[kv.Key] = goodValue{raw: e.Value, val: ev, rev: e.ModRevision, create: e.CreateRevision}
				return
			}
		}
		if g, ok := prevGood.get(kv.Key); ok && g.sameIncarnation(kv) {
			good[kv.Key] = g
		}
		return
	}
	good[kv.Key] = goodValue{raw: kv.Value, val: v, rev: kv.ModRevision, create: kv.CreateRevision}
}

// decoded is a value decoded ahead of addKV (predecode, Decoded): key's,
// from the n bytes at raw.
type decoded struct {
	v    any
	err  error
	key  string
	raw  *byte
	n    int32
	done bool
}

// decodedFrom returns kv's value decoded, noting what from.
func decodedFrom(kv *KV) decoded {
	d := decoded{key: kv.Key, n: int32(len(kv.Value)), done: true}
	if len(kv.Value) > 0 {
		d.raw = &kv.Value[0]
	}
	d.v, d.err = decodeKept(kv.Key, kv.Value)
	return d
}

// of reports whether d was decoded from kv: its key, and its value's very
// bytes in memory, not merely equal ones.
func (d *decoded) of(kv KV) bool {
	return d.key == kv.Key && int(d.n) == len(kv.Value) && (len(kv.Value) == 0 || d.raw == &kv.Value[0])
}

// Decoded holds values decoded ahead of a Compile, by their KVs' order
// (see CompileOptions.Decoded): only values Compile decodes, so the health
// keys that make up most large prefixes cost nothing here. The zero value
// is empty, ready for Decode. One Compile at a time may use it.
type Decoded struct {
	n    int       // KVs given to Decode
	idx  []int32   // idx[j]: the index, among them, of the KV of vals[j]
	vals []decoded // in the order of idx
	cur  int       // at's cursor: Compile asks in order
}

// Decode decodes the values of kvs across CPUs and appends them to d,
// which then holds the values of every KV given to Decode, in order. It
// leaves out what Compile does not decode: health keys, and values whose
// bytes equal their key's last good value in prev (nil: none), the table
// Compile will be given. prev is only read.
func (d *Decoded) Decode(kvs []KV, prev *Table) {
	base, start := d.n, len(d.idx)
	d.n += len(kvs)
	for i := range kvs {
		kv := &kvs[i]
		if strings.HasPrefix(kv.Key, "health/") {
			continue
		}
		if prev != nil {
			if g, ok := prev.good.get(kv.Key); ok && bytes.Equal(g.raw, kv.Value) {
				continue
			}
		}
		d.idx = append(d.idx, int32(base+i))
	}
	d.vals = append(d.vals, make([]decoded, len(d.idx)-start)...)
	ids, out := d.idx[start:], d.vals[start:]
	inParallel(len(ids), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			out[j] = decodedFrom(&kvs[int(ids[j])-base])
		}
	})
}

// of returns d when it holds the values of as many KVs as kvs, ready to be
// asked for them in order (at); else nil.
func (d *Decoded) of(kvs []KV) *Decoded {
	if d == nil || d.n != len(kvs) || len(kvs) == 0 {
		return nil
	}
	d.cur = 0
	return d
}

// at returns the value decoded for KV i, or nil; calls must come in the
// order of i.
func (d *Decoded) at(i int) *decoded {
	for d.cur < len(d.idx) && int(d.idx[d.cur]) < i {
		d.cur++
	}
	if d.cur < len(d.idx) && int(d.idx[d.cur]) == i {
		return &d.vals[d.cur]
	}
	return nil
}

// predecode decodes, across CPUs, the values Compile will decode (see
// Decoded.Decode) when there are enough of them to split (splits); else it
// returns nil and Compile decodes each value itself.
func predecode(kvs []KV, prev *Table) *Decoded {
	values := 0 // keys that may be decoded: not health keys (a prefix test)
	for i := range kvs {
		if !strings.HasPrefix(kvs[i].Key, "health/") {
			values++
		}
	}
	if !splits(values) {
		return nil
	}
	d := new(Decoded)
	d.Decode(kvs, prev)
	return d
}

type overrideAt struct {
	id  string
	rev int64
	o   *Override
}

// assembleRoutes builds the routes and live overrides from the good
// values, and applies the overrides. An override whose expires_at has
// passed at now is not live (its lease outlived it); the first expires_at
// to come is the table's ovUntil.
func (t *Table) assembleRoutes(now time.Time) {
	t.routes = map[string]*Route{}
	t.overrides = map[string]*Override{}
	t.applied = map[string][]string{}
	t.ovSkipped = nil
	t.ovUntil, t.ovExpired = time.Time{}, time.Time{}
	var ovs []overrideAt
	for key, g := range t.good.all() {
		k, _ := ParseKey(key)
		switch k.Kind {
		case KindRoute:
			t.routes[k.ID] = g.val.(*Route)
		case KindOverride:
			o := g.val.(*Override)
			if end := o.Expiry(); !end.IsZero() {
				if !now.Before(end) {
					if end.After(t.ovExpired) {
						t.ovExpired = end
					}
					continue
				}
				if t.ovUntil.IsZero() || end.Before(t.ovUntil) {
					t.ovUntil = end
				}
			}
			t.overrides[k.ID] = o
			ovs = append(ovs, overrideAt{id: k.ID, rev: g.rev, o: o})
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
			t.ovSkipped = append(t.ovSkipped, Skipped{Key: OverrideKey(ov.id),
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

// collectSkipped lists the refused values and the overrides not applied,
// by key.
func (t *Table) collectSkipped() {
	t.skipped = nil
	for key, msg := range t.invalid {
		t.skipped = append(t.skipped, Skipped{Key: key, Error: msg})
	}
	t.skipped = append(t.skipped, t.ovSkipped...)
	// A key can be listed twice (an override whose new value is refused
	// while its last good value's route is missing): order by error too.
	sort.Slice(t.skipped, func(i, j int) bool {
		a, b := t.skipped[i], t.skipped[j]
		return a.Key < b.Key || a.Key == b.Key && a.Error < b.Error
	})
}

// At returns a table equal to t but with health evaluated at now and
// with the overrides live at now. It returns t itself when no grace
// window has ended, no override expired since t was built, and none t
// left out as expired is live again at now (the wall clock stepped back).
func (t *Table) At(now time.Time) *Table {
	moved := t.overridesMoved(now)
	if until := t.ValidUntil(); !moved && (until.IsZero() || now.Before(until)) {
		return t
	}
	cp := *t
	cp.builtAt = now // health is evaluated at now: what the next update compares its clock with
	d := &diff{known: true}
	if moved {
		cp.assembleRoutes(now)
		cp.collectSkipped()
		d = nil // the routes an expiry changed are found by comparing with t's
	}
	cp.build(now, t, d)
	return &cp
}

// WithRevision returns a copy of t marked current at a later revision (a
// progress notification) and confirmed against etcd.
func (t *Table) WithRevision(rev int64) *Table {
	cp := *t
	cp.revision = rev
	if cp.stale {
		cp.stale = false
		cp.build(t.builtAt, t, nil)
	}
	return &cp
}

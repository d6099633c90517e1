package routing

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultHealthGrace is how long a pool with health_check stays healthy
// after its last health key is gone (docs/resolution.md).
const DefaultHealthGrace = 5 * time.Second

// KV is one key/value of the routing prefix at some revision; Key is
// relative to <root>/routing/ ("pools/eu-central"). CreateRevision and
// Version are etcd's: the revision that created this incarnation of the
// key (a delete ends it) and the number of puts to it since. Zero means
// unknown (values not read from etcd). A table built from a KV keeps its
// Value, and the strings it decodes from it share its memory: the caller
// must never change those bytes afterwards (etcd's client gives each value
// its own).
type KV struct {
	// Key is the key relative to <root>/routing/.
	Key string
	// Value is the stored value as etcd holds it (JSON for a valid key).
	Value []byte
	// ModRevision is the revision of the key's last put: of several live
	// boosts of one route, the one with the newest wins.
	ModRevision int64
	// CreateRevision is the revision that created this incarnation of the
	// key.
	CreateRevision int64
	// Version is the number of puts to this incarnation of the key.
	Version int64

	// verdict, when not nil, means Value is a stand-in (see Keep), and
	// tells why the value it stands for was refused ("" if it was not).
	verdict *string
}

// healthStandIn stands for a health value that passed its check; passed
// is its verdict.
var (
	healthStandIn = []byte("{}")
	passed        = new(string)
)

// Keep returns what a mirror needs to keep of kv. A health key's value is
// checked now (see checkHealthValue) and replaced by a stand-in carrying
// the verdict: a table never reads it past that check (the key alone is a
// live instance). A key outside the grammar keeps no value: the key alone
// is refused. Any other key is kept as it is. Compile and Update take a
// kept KV as they take the KV it was made from. An origin's role may write
// any number of large values under its pool's health/, which every agent
// would otherwise hold.
func Keep(kv KV) KV {
	if kv.verdict != nil {
		return kv
	}
	k, err := ParseKey(kv.Key)
	switch {
	case err != nil:
		kv.verdict, kv.Value = passed, nil // refused by its key
	case k.Kind == KindHealth:
		if msg := checkHealthValue(kv.Key, kv.Value); msg != "" {
			kv.verdict, kv.Value = &msg, nil
		} else {
			kv.verdict, kv.Value = passed, healthStandIn
		}
	}
	return kv
}

// KeepAll replaces each of kvs with Keep's, in place, across CPUs when
// there are many.
func KeepAll(kvs []KV) {
	inParallel(len(kvs), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			kvs[i] = Keep(kvs[i])
		}
	})
}

// healthError returns why kv's health value is refused, or "".
func (kv *KV) healthError() string {
	if kv.verdict != nil {
		return *kv.verdict
	}
	return checkHealthValue(kv.Key, kv.Value)
}

// SameValue reports whether kv and o hold the same value, or stand-ins for
// values with the same verdict (Keep).
func (kv KV) SameValue(o KV) bool {
	if (kv.verdict == nil) != (o.verdict == nil) || kv.verdict != nil && *kv.verdict != *o.verdict {
		return false
	}
	return bytes.Equal(kv.Value, o.Value)
}

// Skipped names a key whose current value was refused, and why. The table
// keeps the key's last good value of the same incarnation (see
// CompileOptions.Earlier), if it had one.
type Skipped struct {
	// Key is the key relative to <root>/routing/.
	Key string `json:"key"`
	// Error says why the value is refused (or the boost not applied),
	// naming the key and the field.
	Error string `json:"error"`
}

// PoolState is a pool as the table sees it: the stored value plus its live
// health.
type PoolState struct {
	// Pool is the stored value, shared with the table's last good value
	// of the key (never changed).
	*Pool
	// Instances is the number of live health keys of the pool.
	Instances int
	// down is set for what-if resolution (regionctl resolve --down).
	down bool
	// since is when the pool id last lost its last health key (or the
	// agent start when none was ever seen); meaningful when Instances == 0.
	since time.Time
	// fixedHealthy is used for tables loaded from a snapshot file.
	fixedHealthy *bool
	// src is the decoded stored value the pool was made from: the same
	// pointer in two tables means the same value.
	src *Pool
}

// Table is an immutable compiled routing table: everything needed to resolve
// a viewer without I/O. A Table is safe for concurrent use; it is never
// changed after Compile returns it. Nothing it returns may be modified
// either (a Decision's Attrs and Degraded, an Effective, a PoolState, a
// Route, the maps and slices of Overrides, Skipped, PoolIDs): they are
// shared with the tables built from it, so a change would corrupt every
// later answer. Copy what you change (maps.Clone).
//
// The rest of this comment is about its insides.
//
// It is three parts: the state it was built from (tableState), what it
// answers (answers: the classes and effective entries), and how it is kept
// up to date from one table to the next (memo), besides the render cache
// (enc). A table built from another may share any map or slice of these
// with it: none is written once the table is built (Update copies a small
// map before its first write, see sharedMap, and forks the large ones, see
// layered; padsOpen marks the only time pads is written: while building).
type Table struct {
	tableState
	answers
	memo
	// enc holds the JSON encodings of the pools and routes, made on first
	// use (off the compile path) and shared by copies of the table.
	enc *encoded
}

// tableState is what a table was built from: etcd's values at a revision
// (with live overrides applied) and the health clock's inputs.
type tableState struct {
	revision int64
	// changed is the revision of the table's last change of content: a
	// list or events (Compile, Update), whatever they did; WithRevision
	// (a progress notification) leaves it.
	changed   int64
	epoch     int64
	stale     bool
	clusterID uint64
	grace     time.Duration
	start     time.Time
	builtAt   time.Time

	policy    Residency
	pools     layered[*PoolState]
	routes    map[string]*Route    // with live overrides applied
	overrides map[string]*Override // live: not expired at builtAt
	applied   map[string][]string  // route -> override ids applied, in order
	// ovUntil is the first expires_at of a live override: the table must
	// be built again then (At), without it. Zero if none has one.
	ovUntil time.Time
	// ovExpired is the latest expires_at of an override left out as
	// expired at builtAt: live again if the wall clock steps back before
	// it (At). Zero if none was left out.
	ovExpired time.Time
	skipped   []Skipped
	// compiled: built by Compile or Update from etcd's values (not loaded
	// from a snapshot file, not a what-if), so Update can follow it.
	compiled bool
}

// answers is what a table answers: the residency class and effective
// entry of every country.
type answers struct {
	// classOf holds the residency class of each country, by country id;
	// the last slot is the unknown country.
	classOf []string
	// eff holds the effective entry of each country, by country id; the
	// last slot is the unknown country.
	eff []*Effective
	// validUntil is the first instant at which a pool's health changes by
	// the clock alone (a grace window ending); zero if never.
	validUntil time.Time
}

// memo is how a table is kept up to date: the last good values, refused
// values and health bookkeeping Update follows, and what the memo engine
// (memo.go) compares to reuse the previous table's entries.
type memo struct {
	good goodValues
	// invalid holds why each refused value was refused, by key.
	invalid map[string]string
	// ovSkipped lists the overrides not applied.
	ovSkipped []Skipped
	// instances counts the live health keys of each pool id; lost holds
	// when a pool id's last health key went (pool key or not).
	instances map[string]int
	lost      map[string]time.Time
	// masks holds each entry's dependency mask (with the country's own
	// route name added), by country id.
	masks []depMask
	// arrays is where eff and masks live (see effArrays): shared with
	// the table built from, and so with earlier ones, when the build
	// changed no entry.
	arrays *effArrays
	// eligibleAt tells, per pool, whether it was up and healthy at build
	// time (status aside).
	eligibleAt layered[bool]
	// pads holds the padded pool ids of the candidates (see poolPad);
	// padsOpen: the table is being built, and padOf adds to pads.
	pads     layered[*poolPad]
	padsOpen bool
	// inGrace lists the pools whose health grace window ends after the
	// table was built (validUntil is the first of those ends), so an
	// update finds the next one from the pools it changed.
	inGrace []string
}

// Revision returns the etcd revision the table is current at.
func (t *Table) Revision() int64 { return t.revision }

// ChangeRevision returns the revision of the list or events the table was
// last built from (its Revision before progress notifications moved it):
// a table built from events that left every value as it was still has a
// ChangeRevision of its own.
func (t *Table) ChangeRevision() int64 { return t.changed }

// ClusterID returns the etcd cluster the table was read from (0: unknown).
// Revisions of different clusters are unrelated.
func (t *Table) ClusterID() uint64 { return t.clusterID }

// Epoch returns the config epoch of the table.
func (t *Table) Epoch() int64 { return t.epoch }

// Stale reports whether the table was loaded from a snapshot file and has
// not been confirmed against etcd.
func (t *Table) Stale() bool { return t.stale }

// Skipped returns the keys whose current value was refused (shared: do
// not modify).
func (t *Table) Skipped() []Skipped { return t.skipped }

// Policy returns the residency policy in force.
func (t *Table) Policy() Residency { return t.policy }

// Pool returns the state of a pool (shared: do not modify).
func (t *Table) Pool(id string) (*PoolState, bool) {
	return t.pools.get(id)
}

// PoolIDs returns the pool ids in order (shared: do not modify).
func (t *Table) PoolIDs() []string { return t.pools.keys() }

// NumPools returns the number of pools in the table.
func (t *Table) NumPools() int { return t.pools.len() }

// Route returns a route with its live overrides applied (shared: do not
// modify).
func (t *Table) Route(name string) (*Route, bool) {
	r, ok := t.routes[name]
	return r, ok
}

// RouteNames returns the route names in order.
func (t *Table) RouteNames() []string { return sortedKeys(t.routes) }

// Overrides returns the live overrides by id: those whose expires_at had
// not passed when the table was built (shared: do not modify).
func (t *Table) Overrides() map[string]*Override { return t.overrides }

// ValidUntil returns the first instant at which the table changes by the
// clock alone, a health grace window ending or a live override's
// expires_at passing: the table must be rebuilt with At then. Zero when
// no such instant exists.
func (t *Table) ValidUntil() time.Time {
	if t.ovUntil.IsZero() || !t.validUntil.IsZero() && t.validUntil.Before(t.ovUntil) {
		return t.validUntil
	}
	return t.ovUntil
}

// overridesMoved reports whether the live overrides at now differ from
// t's: one has expired, or one t left out as expired is live again (the
// wall clock stepped back before its expires_at, an NTP step correcting
// one forward). Wall times: expires_at is one.
func (t *Table) overridesMoved(now time.Time) bool {
	now = now.Round(0)
	return !t.ovUntil.IsZero() && !now.Before(t.ovUntil) || now.Before(t.ovExpired)
}

// Checksum returns a digest of what the table's effective entries answer,
// computed from the entries on each call: tests compare tables by it, and
// nothing on the agent's path calls it (building a table digests
// nothing).
func (t *Table) Checksum() uint64 { return t.computeChecksum() }

// VerifyChecksum reports whether every effective entry still encodes as it
// did when it was built (the JSON made then, which the table renders):
// false only if an entry was changed after it was built.
func (t *Table) VerifyChecksum() bool { return t.verifyEncodings() }

// Healthy reports whether the pool passes its health check at now.
func (t *Table) Healthy(id string, now time.Time) bool {
	p, ok := t.pools.get(id)
	return ok && t.healthy(p, now)
}

func (t *Table) healthy(p *PoolState, now time.Time) bool {
	if p.fixedHealthy != nil {
		return *p.fixedHealthy
	}
	if !p.HealthCheck || p.Instances > 0 {
		return true
	}
	return now.Before(p.since.Add(t.grace))
}

// ClassOf returns the residency class of a normalized country code (or
// Unknown); "" means the country is in no class and may use any pool.
func (t *Table) ClassOf(country string) string {
	if country == Unknown {
		return t.classOf[len(countries)]
	}
	if id := countryID(country); id >= 0 {
		return t.classOf[id]
	}
	return t.classOf[len(countries)]
}

// Effective returns the precomputed entry of a normalized country code (or
// Unknown).
func (t *Table) Effective(country string) *Effective {
	if id := countryID(country); id >= 0 {
		return t.eff[id]
	}
	return t.eff[len(countries)]
}

// encoded holds the JSON of a table's sections, made once, reusing the
// previous table's encoding of every unchanged value and section.
type encoded struct {
	once sync.Once
	done atomic.Bool
	// prev is the reuse source until this table is encoded: the latest
	// encoded table it was built after (the previous table, or, when that
	// one was never encoded, its own reuse source), so a writer that skips
	// tables (paced) still reuses what did not change. Only an encoded
	// table is held: never a chain.
	prev atomic.Pointer[Table]
	// poolNames are the pool ids in order; poolMembers[i] is the member
	// `,"id":{…}` of the pool poolNames[i] in the pools section, made from
	// poolSrc[i] with health poolUp[i] (what tells whether a later table
	// may reuse it). The section is `,"pools":{`, the members (the first
	// without its comma), `}`: written as segments, joined only when a
	// caller wants one buffer (pools).
	poolNames   []string
	poolMembers [][]byte
	poolSrc     []*Pool
	poolUp      []bool
	poolsOnce   sync.Once
	poolsJoined []byte
	// routeNames are the route names in order; routeJS[i] is the JSON of
	// the route routeNames[i].
	routeNames []string
	routeJS    [][]byte
	// routes and policy are whole sections (`,"routes":{…}`).
	routes, policy []byte
	// eff holds the member of each country id in the effective section
	// (`,"PL":{…}`), as pieces of shared, never changed byte arrays.
	eff []effPart
}

// effPart is a member of the effective section: buf[start:end].
type effPart struct {
	buf        []byte
	start, end int32
}

// newEncoded prepares the encodings of a table built after prev.
func newEncoded(prev *Table) *encoded {
	e := &encoded{}
	if prev != nil && prev.enc != nil {
		if prev.enc.done.Load() {
			e.prev.Store(prev)
		} else if src := prev.enc.prev.Load(); src != nil {
			e.prev.Store(src) // encoded (only encoded tables are stored)
		}
	}
	return e
}

// encodings returns the table's encodings, making them on first use.
func (t *Table) encodings() *encoded {
	t.enc.once.Do(func() {
		t.encodeValues(t.enc.prev.Load())
		t.enc.done.Store(true)
		t.enc.prev.Store(nil) // never keep old tables alive
	})
	return t.enc
}

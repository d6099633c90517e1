package routing

import (
	"testing"
	"time"
)

// Gap tests from a mutation review of update.go, memo.go, layered.go and
// good.go: each pins a case the random sequences of TestUpdateEqualsCompile
// and TestUpdateFollowsResidencyChanges did not reach, comparing Update
// with Compile of the same keys from the same previous table.

// evStore is an etcd keyspace in miniature: revisions, incarnations, and
// the events a watch would deliver since the last flush.
type evStore struct {
	rev    int64
	kvs    map[string]KV
	events []Event
}

// newEvStore holds vals, written at revision 1.
func newEvStore(vals map[string]string) *evStore {
	s := &evStore{rev: 1, kvs: map[string]KV{}}
	for k, v := range vals {
		s.kvs[k] = KV{Key: k, Value: []byte(v), ModRevision: 1, CreateRevision: 1, Version: 1}
	}
	return s
}

// put writes v to key at the next revision.
func (s *evStore) put(key, v string) {
	s.rev++
	old, ok := s.kvs[key]
	kv := KV{Key: key, Value: []byte(v), ModRevision: s.rev, CreateRevision: old.CreateRevision, Version: old.Version + 1}
	if !ok {
		kv.CreateRevision, kv.Version = s.rev, 1
	}
	s.kvs[key] = kv
	s.events = append(s.events, Event{KV: kv, Created: !ok})
}

// del deletes key at the next revision.
func (s *evStore) del(key string) {
	s.rev++
	delete(s.kvs, key)
	s.events = append(s.events, Event{KV: KV{Key: key, ModRevision: s.rev}, Deleted: true})
}

// list returns the keyspace, sorted.
func (s *evStore) list() []KV {
	out := make([]KV, 0, len(s.kvs))
	for _, k := range sortedKeys(s.kvs) {
		out = append(out, s.kvs[k])
	}
	return out
}

// flush returns the events since the last flush.
func (s *evStore) flush() []Event {
	evs := s.events
	s.events = nil
	return evs
}

// pair follows one keyspace with two tables: one updated by the events
// (Update), one compiled from the whole state with the previous compiled
// table (Compile), which the contract says Update equals.
type pair struct {
	t         *testing.T
	s         *evStore
	upd, comp *Table
	// noFresh: the keys hold refused values, which a fresh compile has no
	// last good values for.
	noFresh bool
}

func newPair(t *testing.T, s *evStore, opts CompileOptions) *pair {
	t.Helper()
	tb := Compile(s.rev, s.list(), nil, opts)
	return &pair{t: t, s: s, upd: tb, comp: tb}
}

// step applies the events since the last step to both tables at opts and
// fails the test when their JSON differs.
func (p *pair) step(what string, opts CompileOptions) {
	p.t.Helper()
	evs := p.s.flush()
	upd := Update(p.upd, p.s.rev, evs, opts)
	if upd == nil {
		p.t.Fatalf("%s: Update refused", what)
	}
	p.upd = upd
	p.comp = Compile(p.s.rev, p.s.list(), p.comp, opts)
	a, err := p.upd.JSON(opts.Now)
	if err != nil {
		p.t.Fatal(err)
	}
	b, err := p.comp.JSON(opts.Now)
	if err != nil {
		p.t.Fatal(err)
	}
	if d := firstDiffAll(a, b); d != "" {
		p.t.Fatalf("%s: Update differs from Compile: %s", what, d)
	}
	if !p.noFresh {
		// Compile shares the memo engine: a fresh compile shares nothing.
		c, err := Compile(p.s.rev, p.s.list(), nil, opts).JSON(opts.Now)
		if err != nil {
			p.t.Fatal(err)
		}
		if d := firstDiffAll(a, c); d != "" {
			p.t.Fatalf("%s: Update differs from a fresh Compile: %s", what, d)
		}
	}
}

// firstPool returns the first candidate pool of country's entry in tb, or "" for NoRoute.
func firstPool(tb *Table, country string) string {
	if e := tb.Effective(country); len(e.Candidates) > 0 {
		return e.Candidates[0].Pool
	}
	return ""
}

// TestOverrideRewrittenWithTheSameBytesMovesLast: overrides apply in the
// order of their revisions, the later winning; an override written again
// with the very same bytes is now the latest and wins (the value is
// unchanged, its revision is not). Mutants: the unchanged-bytes path of
// addKV keeping the old revision, or changes ignoring an override's new
// revision; both kept serving the other override's targets.
func TestOverrideRewrittenWithTheSameBytesMovesLast(t *testing.T) {
	s := newEvStore(map[string]string{
		"pools/p1":        `{"host":"p1.example","residency":"eu"}`,
		"pools/p2":        `{"host":"p2.example","residency":"eu"}`,
		"routes/_default": `{"targets":[{"pool":"p1","weight":100}]}`,
		"routes/DE":       `{"targets":[{"pool":"p1","weight":100}]}`,
	})
	opts := CompileOptions{Now: t0, Start: t0}
	p := newPair(t, s, opts)
	oa := `{"route":"DE","targets":[{"pool":"p2","weight":100}]}`
	s.put("overrides/a", oa)
	s.put("overrides/b", `{"route":"DE","targets":[{"pool":"p1","weight":100}]}`)
	p.step("two overrides", opts)
	if got := firstPool(p.upd, "DE"); got != "p1" {
		t.Fatalf("DE with b the later override: %q, want p1", got)
	}
	s.put("overrides/a", oa) // the same bytes, a later revision
	p.step("a written again", opts)
	if got := firstPool(p.upd, "DE"); got != "p2" {
		t.Fatalf("DE with a written again (now the later): %q, want p2", got)
	}
}

// TestRouteOfTheLastCountryAppears: a country without a route shares its
// class's entry, whose deps do not name the country; the entry's mask gets
// the country's own bit, so that the country's route appearing rebuilds
// it. Every country has that bit, the last one (ZW) too. Mutant: the bit
// added for ids below numCountries-1 (ZW kept serving _default).
func TestRouteOfTheLastCountryAppears(t *testing.T) {
	last := countries[len(countries)-1]
	s := newEvStore(map[string]string{
		"pools/p1":        `{"host":"p1.example","residency":"eu"}`,
		"pools/p2":        `{"host":"p2.example","residency":"eu"}`,
		"routes/_default": `{"targets":[{"pool":"p1","weight":100}]}`,
	})
	opts := CompileOptions{Now: t0, Start: t0}
	p := newPair(t, s, opts)
	s.put(RouteKey(last), `{"targets":[{"pool":"p2","weight":100}]}`)
	p.step("route of "+last+" put", opts)
	if got := firstPool(p.upd, last); got != "p2" {
		t.Fatalf("%s with its own route: %q, want p2", last, got)
	}
}

// TestNewIncarnationWithTheSameBytes: a put that begins a new incarnation
// of a key (a CreateRevision other than its good value's) with the very
// bytes of that value takes the new incarnation; a refused value of that
// incarnation then keeps it (docs/keys-and-values.md, Refused values and
// last good values), as Compile does. Mutant: the unchanged-bytes path of
// addKV keeping the old create revision (the refused value then dropped
// the route as of an incarnation that ended).
func TestNewIncarnationWithTheSameBytes(t *testing.T) {
	s := newEvStore(map[string]string{
		"pools/p1":        `{"host":"p1.example","residency":"eu"}`,
		"pools/p2":        `{"host":"p2.example","residency":"eu"}`,
		"routes/_default": `{"targets":[{"pool":"p1","weight":100}]}`,
		"routes/DE":       `{"targets":[{"pool":"p2","weight":100}]}`,
	})
	opts := CompileOptions{Now: t0, Start: t0}
	p := newPair(t, s, opts)
	p.noFresh = true
	// Deleted and written again with the same bytes, the delete unseen:
	// one put event of a new incarnation.
	s.rev++
	kv := KV{Key: "routes/DE", Value: []byte(`{"targets":[{"pool":"p2","weight":100}]}`), ModRevision: s.rev, CreateRevision: s.rev, Version: 1}
	s.kvs[kv.Key] = kv
	s.events = append(s.events, Event{KV: kv, Created: true})
	p.step("DE's new incarnation", opts)
	s.put("routes/DE", `{"targets":[{"pool":"p2","weight":130}]}`) // refused
	p.step("DE refused", opts)
	if got := firstPool(p.upd, "DE"); got != "p2" {
		t.Fatalf("DE after a refused value of its incarnation: %q, want p2 (its last good value)", got)
	}
}

// TestRefusedValueOfANewIncarnationDropsTheOld: a refused value of a key's
// new incarnation keeps nothing of the previous incarnation, even when the
// delete between them was not seen: the key is served as absent. Mutant:
// the good value of the ended incarnation kept.
func TestRefusedValueOfANewIncarnationDropsTheOld(t *testing.T) {
	s := newEvStore(map[string]string{
		"pools/p1":        `{"host":"p1.example","residency":"eu"}`,
		"pools/p2":        `{"host":"p2.example","residency":"eu"}`,
		"routes/_default": `{"targets":[{"pool":"p1","weight":100}]}`,
		"routes/DE":       `{"targets":[{"pool":"p2","weight":100}]}`,
	})
	opts := CompileOptions{Now: t0, Start: t0}
	p := newPair(t, s, opts)
	s.rev++
	kv := KV{Key: "routes/DE", Value: []byte(`{"targets":[{"pool":"p2","weight":130}]}`), ModRevision: s.rev, CreateRevision: s.rev, Version: 1}
	s.kvs[kv.Key] = kv
	s.events = append(s.events, Event{KV: kv, Created: true})
	p.step("DE's new incarnation, refused", opts)
	if got := firstPool(p.upd, "DE"); got != "p1" {
		t.Fatalf("DE refused in a new incarnation: %q, want p1 (_default: the key is absent)", got)
	}
}

// TestGraceShortenedMovesValidUntil: a table's ValidUntil is the end of
// the first grace window after its build, by the table's grace. Built
// with a shorter grace, while a pool is in its window and stays in it (no
// pool's answer changes, so no pool is among the changes), the window ends
// sooner: ValidUntil must follow, or the table (and At, which rebuilds
// only at ValidUntil) serves the pool as healthy past its window. Mutant:
// prev's ValidUntil kept whenever no pool changed.
func TestGraceShortenedMovesValidUntil(t *testing.T) {
	s := newEvStore(map[string]string{
		"pools/p1":        `{"host":"p1.example","residency":"eu","health_check":true}`,
		"pools/p2":        `{"host":"p2.example","residency":"eu"}`,
		"routes/_default": `{"targets":[{"pool":"p2","weight":100}]}`,
		"routes/DE":       `{"targets":[{"pool":"p1","weight":100}],"fallback":["_default"]}`,
		"health/p1/h1":    `{"addr":"10.0.0.1:443"}`,
	})
	opts := CompileOptions{Now: t0, Start: t0.Add(-time.Hour), Grace: 10 * time.Second}
	p := newPair(t, s, opts)
	p.noFresh = true // a fresh compile does not know when p1's key went
	s.del("health/p1/h1")
	p.step("p1's last health key gone", opts)
	if !p.upd.ValidUntil().Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("valid until %v in p1's grace window, want t0+10s", p.upd.ValidUntil())
	}
	opts.Now, opts.Grace = t0.Add(time.Second), 5*time.Second
	s.put("routes/GB", `{"targets":[{"pool":"p2","weight":100}]}`) // any change
	p.step("grace shortened to 5s", opts)
	if got := p.upd.ValidUntil(); !got.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("valid until %v with a 5s grace, want t0+5s", got)
	}
	at := t0.Add(6 * time.Second)
	if got := firstPool(p.upd.At(at), "DE"); got != "p2" {
		t.Fatalf("DE at t0+6s, past p1's 5s window: %q, want p2 (_default)", got)
	}
}

// TestLoadedUnhealthyPoolStaysUnhealthyAfterAPrune: a table compiled from
// one loaded from a snapshot file records a pool the file has unhealthy,
// still without a health key, as lost at start-grace (unhealthy at once).
// That record changes answers until the start's grace window is over, so
// an update that prunes the lost records (another pool lost its last
// health key) keeps it, as Compile's trackLost does. Mutant: the prune
// ignoring the start's window (the pool, rebuilt later, was healthy in a
// grace window from the start: viewers sent to a dead origin).
func TestLoadedUnhealthyPoolStaysUnhealthyAfterAPrune(t *testing.T) {
	vals := map[string]string{
		"pools/p1":        `{"host":"p1.example","residency":"eu","health_check":true}`,
		"pools/p2":        `{"host":"p2.example","residency":"eu","health_check":true}`,
		"pools/p3":        `{"host":"p3.example","residency":"eu"}`,
		"routes/_default": `{"targets":[{"pool":"p3","weight":100}]}`,
		"routes/DE":       `{"targets":[{"pool":"p1","weight":100}],"fallback":["_default"]}`,
		"routes/PL":       `{"targets":[{"pool":"p2","weight":100}],"fallback":["_default"]}`,
		"health/p2/h1":    `{"addr":"10.0.0.2:443"}`,
	}
	s := newEvStore(vals)
	// The file's writer: p1 without a health key long past its start.
	old := Compile(1, s.list(), nil, CompileOptions{Now: t0, Start: t0.Add(-time.Hour), Grace: 5 * time.Second})
	b, err := old.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	loaded, _, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	start := t0.Add(time.Minute) // this agent's start, from the file
	opts := CompileOptions{Now: start.Add(time.Second), Start: start, Grace: 5 * time.Second}
	first := Compile(s.rev, s.list(), loaded, opts)
	if got := firstPool(first, "DE"); got != "p3" {
		t.Fatalf("DE after the start from the file: %q, want p3 (p1 unhealthy in the file)", got)
	}
	p := &pair{t: t, s: s, upd: first, comp: first, noFresh: true}
	s.del("health/p2/h1") // a loss: the lost records are pruned
	p.step("p2's last health key gone", opts)
	s.put("pools/p1", `{"host":"p1.example","residency":"eu","health_check":true,"attrs":{"a":"b"}}`)
	p.step("p1 changed", opts)
	if got := firstPool(p.upd, "DE"); got != "p3" {
		t.Fatalf("DE after p1 changed: %q, want p3 (p1 still without a health key)", got)
	}
}

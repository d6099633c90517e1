package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestUpdateEqualsCompile: a table updated event by event equals the table
// compiled from the whole state, over a long random sequence of puts and
// deletes (pools, routes, overrides, policy, epoch, health keys, refused
// values, routes without targets or with fallbacks only, batches of up to
// 20 events), with the clock moving through health grace windows; three seeds.
// TestReusedEntryKeepsItsDeps and TestHealthKeyComingAndGoingInOneBatch
// pin the two bugs a review found through such sequences.
func TestUpdateEqualsCompile(t *testing.T) {
	steps := 1000
	if raceEnabled {
		steps = 200
	}
	for _, seed := range [][2]uint64{{3, 4}, {9, 64}, {12, 85}} {
		t.Run(fmt.Sprintf("seed=%d,%d", seed[0], seed[1]), func(t *testing.T) { testUpdateEqualsCompile(t, seed, steps) })
	}
}

func testUpdateEqualsCompile(t *testing.T, seed [2]uint64, steps int) {
	cfg := exampleConfig(t)
	store := map[string]KV{}
	rev := int64(1)
	history := map[string][]KV{} // every value of a key's current incarnation, oldest first
	for _, kv := range kvsOf(t, cfg) {
		kv.ModRevision, kv.CreateRevision, kv.Version = rev, rev, 1
		store[kv.Key] = kv
		history[kv.Key] = []KV{kv}
	}
	pools := sortedKeys(cfg.Pools)
	routes := []string{"PL", "DE", "KR", "JP", "US", "BR", "GB", "eu-general", "apac-general", "_default", "HU", "ZA", "AD", "grpx", "grpy"}
	groups := []string{"eu-general", "apac-general", "grpx", "grpy"}
	rng := rand.New(rand.NewPCG(seed[0], seed[1]))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	// The overrides' expiries draw from their own source: the sequence of
	// changes and clock steps is the one the seeds were chosen for.
	exp := rand.New(rand.NewPCG(seed[1], seed[0]))
	var events []Event
	now := t0
	put := func(key string, value []byte) {
		rev++
		old, existed := store[key]
		kv := KV{Key: key, Value: value, ModRevision: rev, CreateRevision: old.CreateRevision, Version: old.Version + 1}
		if !existed {
			kv.CreateRevision, history[key] = rev, nil
		}
		store[key] = kv
		history[key] = append(history[key], kv)
		events = append(events, Event{KV: kv, Created: !existed})
	}
	del := func(key string) {
		if _, ok := store[key]; !ok {
			return // etcd sends no event for a key that is not there
		}
		rev++
		delete(store, key)
		delete(history, key)
		events = append(events, Event{KV: KV{Key: key, ModRevision: rev}, Deleted: true})
	}
	mutations := []func(){
		func() { // reweight or repoint a route
			put(RouteKey(pick(routes)), randomRouteValue(rng, pools))
		},
		func() { del(RouteKey(pick(routes))) },
		func() { // pool status and health checking
			id := pick(pools)
			st := []string{"active", "draining", "down"}[rng.IntN(3)]
			put(PoolKey(id), fmt.Appendf(nil, `{"host":"%s.example.net","residency":%q,"status":%q,"health_check":%v,"attrs":{"s":"%d"}}`,
				id, cfg.Pools[id].Residency, st, rng.IntN(3) > 0, rng.IntN(2)))
		},
		func() { del(PoolKey(pick(pools))) },
		func() { // a health key comes or is refreshed
			put(fmt.Sprintf("health/%s/i%d", pick(pools), rng.IntN(2)), []byte(`{"addr":"10.0.0.1:443"}`))
		},
		func() { // a health key goes (its lease ended)
			var live []string
			for k := range store {
				if strings.HasPrefix(k, "health/") {
					live = append(live, k)
				}
			}
			if len(live) > 0 {
				slices.Sort(live)
				del(pick(live))
			}
		},
		func() { // refused, still an instance
			bad := []string{`nope`, `{"addr":"a","ADDR":"b"}`, `{"x":` + strings.Repeat("[", MaxValueDepth) + strings.Repeat("]", MaxValueDepth) + `}`}
			put(fmt.Sprintf("health/%s/bad", pick(pools)), []byte(pick(bad)))
		},
		func() { // an override, one in two ending by the clock within 5s
			expires := ""
			if exp.IntN(2) == 0 {
				expires = fmt.Sprintf(`,"expires_at":%q`, now.Add(time.Duration(exp.IntN(5000))*time.Millisecond).Format(time.RFC3339Nano))
			}
			put(OverrideKey(fmt.Sprint("b", rng.IntN(2))), fmt.Appendf(nil, `{"route":%q,"targets":[{"pool":%q,"weight":100}]%s}`, pick(routes), pick(pools), expires))
		},
		func() { del(OverrideKey(fmt.Sprint("b", rng.IntN(2)))) },
		func() { // policy
			if rng.IntN(2) == 0 {
				put(PolicyKey, []byte(`{"classes":{"eu":["PL","DE","HU"],"apac":["KR"]},"unknown_country_class":"eu"}`))
			} else {
				del(PolicyKey)
			}
		},
		func() { put(EpochKey, fmt.Appendf(nil, "%d", rng.IntN(100))) },
		func() { put(RouteKey(pick(routes)), []byte(`{"targets":[{"pool":"eu-west","weight":130}]}`)) }, // refused
		func() { put(RouteKey(pick(groups)), []byte(`{}`)) },                                            // no targets: leaves no trace in an answer
		func() { // fallbacks only (refused when it names itself or a route twice)
			put(RouteKey(pick(routes)), fmt.Appendf(nil, `{"fallback":[%q,%q]}`, pick(groups), pick(groups)))
		},
		func() { put(PoolKey(pick(pools)), []byte(`{"host":""}`)) }, // refused
		func() { put("routes/Not A Name", []byte(`{}`)) },           // refused key
		func() { // the same bytes again: a new revision only
			for _, k := range sortedKeys(store) {
				if rng.IntN(8) == 0 {
					put(k, store[k].Value)
					return
				}
			}
		},
	}
	// The compiled side replays the events one revision at a time, as
	// the mirror applied them (a delete ends a key's last good value).
	replay := map[string]KV{}
	for k, kv := range store {
		replay[k] = kv
	}
	kvs := func() []KV {
		var out []KV
		for _, k := range sortedKeys(replay) {
			out = append(out, replay[k])
		}
		return out
	}
	opts := func() CompileOptions { return CompileOptions{Now: now, Start: t0, Grace: 5 * time.Second} }
	full := Compile(rev, kvs(), nil, opts())
	upd := full
	// The relisted side is an agent cut off between its relists (or
	// restarted, with no table): it compiles the whole state with the
	// newest good earlier values of refused keys, as the mirror reads them
	// from etcd's history.
	relisted := full
	relists, keptEarlier := 0, 0
	updates, graceWindows, expiries := 0, 0, 0
	for step := 1; step <= steps; step++ {
		events = events[:0]
		batch := rng.IntN(4) + 1
		if rng.IntN(10) == 0 {
			batch = 20
		}
		for n := batch; n > 0 || len(events) == 0; n-- {
			mutations[rng.IntN(len(mutations))]()
		}
		dt := time.Duration(rng.IntN(3000)) * time.Millisecond
		if rng.IntN(3) == 0 {
			// Between changes the mirror's health loop swaps in the table
			// re-evaluated when a grace window ends; the next update starts
			// from that table.
			upd = upd.At(now.Add(time.Duration(rng.Int64N(int64(dt) + 1))))
		}
		now = now.Add(dt)
		for _, ev := range events {
			if ev.Deleted {
				delete(replay, ev.Key)
			} else {
				replay[ev.Key] = ev.KV
			}
			full = Compile(ev.ModRevision, kvs(), full, opts())
		}
		// The updated and the relisted sides take health values as the
		// mirror keeps them (Keep); the compiled side, raw.
		checked := make([]Event, len(events))
		for i, ev := range events {
			checked[i] = ev
			checked[i].KV = Keep(ev.KV)
		}
		next := Update(upd, rev, checked, opts())
		if next == nil {
			t.Fatalf("step %d: Update refused a compiled table", step)
		}
		upd = next
		updates++
		if rng.IntN(5) == 0 {
			var all []KV
			for _, k := range sortedKeys(store) {
				all = append(all, Keep(store[k]))
			}
			o := opts()
			o.Earlier = earlierGood(store, history)
			keptEarlier += len(o.Earlier)
			prev := relisted
			if rng.IntN(3) == 0 {
				prev = nil // a restart: nothing but etcd's history to go by
			}
			relisted = Compile(rev, all, prev, o)
			relists++
			// Compared once every grace window has ended: an agent cut
			// off cannot know when a health key went while it was away.
			later := now.Add(time.Hour)
			a, _ := relisted.JSON(later)
			b, _ := upd.JSON(later)
			if d := firstDiffAll(a, b); d != "" {
				t.Fatalf("step %d: a relist after a gap differs from the table updated event by event: %s", step, d)
			}
			if !reflect.DeepEqual(relisted.Skipped(), upd.Skipped()) {
				t.Fatalf("step %d: skipped %v after a relist, %v updated", step, relisted.Skipped(), upd.Skipped())
			}
		}

		if !reflect.DeepEqual(full.Skipped(), upd.Skipped()) {
			t.Fatalf("step %d: skipped %v compiled, %v updated", step, full.Skipped(), upd.Skipped())
		}
		for _, p := range upd.pools.all() {
			if p.HealthCheck && p.Instances == 0 && now.Before(p.since.Add(upd.grace)) {
				graceWindows++
			}
		}
		// One table in three is not rendered, as a paced writer skips
		// tables: the next one's encoding reuses an older table's.
		for _, at := range []time.Time{now, now.Add(2 * time.Second), now.Add(6 * time.Second)} {
			if rng.IntN(3) == 0 {
				break
			}
			a, _ := upd.JSON(at)
			b, _ := full.JSON(at)
			if d := firstDiffAll(a, b); d != "" {
				t.Fatalf("step %d (events %v): updated table differs from the compiled one at +%v: %s",
					step, eventKeys(events), at.Sub(now), d)
			}
		}
		if len(upd.At(now.Add(6*time.Second)).Overrides()) < len(upd.Overrides()) {
			expiries++
		}
		for _, at := range []time.Time{now, now.Add(6 * time.Second)} {
			if msg := checkAgainstRecompute(upd.At(at), at, store); msg != "" {
				t.Fatalf("step %d (events %v), at +%v: %s", step, eventKeys(events), at.Sub(now), msg)
			}
		}
		if upd.ValidUntil() != full.ValidUntil() || upd.Checksum() != full.Checksum() || !upd.VerifyChecksum() {
			t.Fatalf("step %d: valid until %v / %v, checksum %x / %x", step, upd.ValidUntil(), full.ValidUntil(), upd.Checksum(), full.Checksum())
		}
		for _, cc := range []string{"PL", "ZA", "US", Unknown} {
			for _, key := range []string{"a", "b", "c"} {
				da, erra := upd.Resolve(cc, key, now)
				db, errb := full.Resolve(cc, key, now)
				if (erra == nil) != (errb == nil) || da.Pool != db.Pool || da.Host != db.Host {
					t.Fatalf("step %d: resolve %s/%s: %+v %v vs %+v %v", step, cc, key, da, erra, db, errb)
				}
			}
		}
	}
	if updates < steps || graceWindows < steps/30 || relists < steps/10 || keptEarlier < relists/4 || expiries < steps/50 {
		t.Fatalf("only %d updates, %d pool-steps in a grace window, %d relists keeping %d earlier values, %d steps with an override to expire: the sequence misses cases",
			updates, graceWindows, relists, keptEarlier, expiries)
	}
}

// earlierGood is what the mirror reads from etcd's history after a relist:
// for each key whose current value is refused, the newest good value
// written before it to the same incarnation.
func earlierGood(store map[string]KV, history map[string][]KV) map[string]KV {
	out := map[string]KV{}
	for key, kv := range store {
		if k, err := ParseKey(key); err == nil && k.Kind == KindHealth {
			continue // never decoded: no last good value
		}
		if _, err := DecodeValue(key, kv.Value); err == nil {
			continue
		}
		h := history[key]
		for i := len(h) - 2; i >= 0; i-- {
			if _, err := DecodeValue(key, h[i].Value); err == nil {
				out[key] = h[i]
				break
			}
		}
	}
	return out
}

// TestUpdateRefuses: tables that do not come from etcd's values, and
// stale or what-if requests, are not updated (the caller compiles).
func TestUpdateRefuses(t *testing.T) {
	kvs := kvsOf(t, exampleConfig(t))
	good := Compile(1, kvs, nil, CompileOptions{Now: t0})
	b, err := good.JSON(t0)
	if err != nil {
		t.Fatal(err)
	}
	loaded, _, err := LoadTableJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	ev := []Event{{KV: KV{Key: EpochKey, Value: []byte("7"), ModRevision: 2}}}
	for name, tc := range map[string]struct {
		prev *Table
		opts CompileOptions
	}{
		"nil":        {nil, CompileOptions{}},
		"loaded":     {loaded, CompileOptions{}},
		"advanced":   {loaded.WithRevision(5), CompileOptions{}},
		"what-if":    {Compile(1, kvs, nil, CompileOptions{Down: []string{"eu-west"}}), CompileOptions{}},
		"stale opts": {good, CompileOptions{Stale: true}},
		"down opts":  {good, CompileOptions{Down: []string{"eu-west"}}},
	} {
		if got := Update(tc.prev, 2, ev, tc.opts); got != nil {
			t.Errorf("%s: Update returned a table", name)
		}
	}
	if got := Update(good, 2, ev, CompileOptions{Now: t0}); got == nil || got.Epoch() != 7 || good.Epoch() == 7 {
		t.Fatalf("Update of a compiled table: %v", got)
	}
}

// checkAgainstRecompute checks a table against its own values without the
// reuse machinery: every effective entry equals one computed afresh, and
// every pool's health follows its live health keys in store (the rule of
// docs/resolution.md, written out again here).
func checkAgainstRecompute(tb *Table, at time.Time, store map[string]KV) string {
	// The JSON reuses the previous table's sections: render once afresh.
	cp := *tb
	cp.enc = &encoded{}
	spliced, _ := tb.JSON(at)
	plain, _ := cp.JSON(at)
	if d := firstDiffAll(spliced, plain); d != "" || !bytes.Equal(spliced, plain) {
		return "the JSON differs from a fresh render: " + d
	}
	for id, e := range tb.eff {
		name := Unknown
		own := ""
		if id < len(countries) {
			name, own = countries[id], countries[id]
		}
		want, _ := json.Marshal(tb.computeEffective(own, tb.classOf[id], at))
		if !bytes.Equal(want, e.js) {
			return fmt.Sprintf("effective %s is\n %s\nrecomputed\n %s", name, e.js, want)
		}
	}
	// The live overrides: the stored ones whose expires_at has not passed.
	for k, kv := range store {
		if !strings.HasPrefix(k, "overrides/") {
			continue
		}
		var o Override
		if err := json.Unmarshal(kv.Value, &o); err != nil {
			return fmt.Sprintf("%s: %v", k, err)
		}
		id := strings.TrimPrefix(k, "overrides/")
		if _, live := tb.overrides[id]; live != (o.ExpiresAt == "" || at.Before(o.Expiry())) {
			return fmt.Sprintf("%s (expires_at %q) live %v at %v", k, o.ExpiresAt, live, at)
		}
	}
	for id, p := range tb.pools.all() {
		live := 0
		for k := range store {
			if strings.HasPrefix(k, "health/"+id+"/") {
				live++
			}
		}
		want := !p.HealthCheck || live > 0 || at.Before(p.since.Add(tb.grace))
		if p.Instances != live || tb.eligibleOf(id) != want {
			return fmt.Sprintf("pool %s: %d instances (store: %d), eligible %v, want %v", id, p.Instances, live, tb.eligibleOf(id), want)
		}
	}
	return ""
}

func eventKeys(evs []Event) []string {
	var out []string
	for _, e := range evs {
		op := "put"
		if e.Deleted {
			op = "del"
		} else if e.Created {
			op = "create"
		}
		out = append(out, op+" "+e.Key)
	}
	return out
}

// BenchmarkUpdateOneChange updates the example fleet's table after one
// route changed: the agent's work per isolated put (compare
// BenchmarkCompileOneChange).
func BenchmarkUpdateOneChange(b *testing.B) {
	prev := Compile(1, kvsOf(b, exampleConfig(b)), nil, CompileOptions{Now: t0})
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		w := n % 101
		ev := []Event{{KV: KV{Key: "routes/PL", Value: fmt.Appendf(nil, `{"targets":[{"pool":"eu-central","weight":%d},{"pool":"eu-west","weight":%d}]}`, w, 100-w), ModRevision: int64(n + 2)}}}
		prev = Update(prev, int64(n+2), ev, CompileOptions{Now: t0})
	}
}

// BenchmarkUpdateAndRender is the agent's whole work per isolated change
// with a snapshot file: update the table after one route changed, then
// render its JSON into a reused buffer.
func BenchmarkUpdateAndRender(b *testing.B) {
	prev := Compile(1, kvsOf(b, exampleConfig(b)), nil, CompileOptions{Now: t0})
	buf, _ := prev.JSONInto(nil, t0)
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		w := n % 101
		ev := []Event{{KV: KV{Key: "routes/PL", Value: fmt.Appendf(nil, `{"targets":[{"pool":"eu-central","weight":%d},{"pool":"eu-west","weight":%d}]}`, w, 100-w), ModRevision: int64(n + 2)}}}
		prev = Update(prev, int64(n+2), ev, CompileOptions{Now: t0})
		buf, _ = prev.JSONInto(buf, t0)
	}
}

// TestReusedEntryKeepsItsDeps: an entry rebuilt with the same answer but
// from other routes (a route in the chain that leaves no trace: no
// targets) must carry the new routes as deps, or a later change to that
// route is missed. Found in review; the old Compile(prev) had it too.
func TestReusedEntryKeepsItsDeps(t *testing.T) {
	st := map[string]string{
		"pools/p1":        `{"host":"p1.example","residency":"eu"}`,
		"pools/p2":        `{"host":"p2.example","residency":"eu"}`,
		"routes/_default": `{"targets":[{"pool":"p1","weight":100}]}`,
		"routes/grpb":     `{"targets":[{"pool":"p1","weight":100}]}`,
		"routes/grpx":     `{}`,
		"routes/grpy":     `{}`,
		"routes/DE":       `{"fallback":["grpx","grpb"]}`,
	}
	kvs := func(rev int64) []KV {
		var out []KV
		for _, k := range sortedKeys(st) {
			out = append(out, KV{Key: k, Value: []byte(st[k]), ModRevision: rev})
		}
		return out
	}
	opts := CompileOptions{Now: t0, Start: t0}
	full := Compile(1, kvs(1), nil, opts)
	upd := full
	for rev, ch := range []struct{ key, val string }{
		{"routes/DE", `{"fallback":["grpy","grpb"]}`}, // same answer (grpb), other chain
		{"routes/grpy", `{"targets":[{"pool":"p2","weight":100}]}`},
	} {
		st[ch.key] = ch.val
		r := int64(rev + 2)
		full = Compile(r, kvs(r), full, opts)
		upd = Update(upd, r, []Event{{KV: KV{Key: ch.key, Value: []byte(ch.val), ModRevision: r}}}, opts)
	}
	fresh := Compile(3, kvs(3), nil, opts)
	for name, tb := range map[string]*Table{"Update": upd, "Compile(prev)": full, "fresh": fresh} {
		if e := tb.Effective("DE"); e.Route != "grpy" || e.FallbackDepth != 1 || e.Candidates[0].Pool != "p2" {
			t.Errorf("%s: DE -> %s depth %d %v, want grpy depth 1 p2", name, e.Route, e.FallbackDepth, e.Candidates)
		}
	}
}

// TestHealthKeyComingAndGoingInOneBatch: a health key created and deleted
// in the same batch of events is a loss at that time: the pool gets its
// grace window, as when the events are applied one revision at a time.
func TestHealthKeyComingAndGoingInOneBatch(t *testing.T) {
	kvs := checkedPoolStore()
	now := t0.Add(time.Minute) // the start's grace window is long over
	opts := CompileOptions{Now: now, Start: t0, Grace: 5 * time.Second}
	prev := Compile(1, kvs, nil, opts)
	if prev.Healthy("p1", now) {
		t.Fatal("p1 healthy without health keys a minute after start")
	}
	key := "health/p1/i0"
	upd := Update(prev, 3, []Event{
		{KV: KV{Key: key, Value: []byte(`{"addr":"10.0.0.1:443"}`), ModRevision: 2}, Created: true},
		{KV: KV{Key: key, ModRevision: 3}, Deleted: true},
	}, opts)
	if !upd.Healthy("p1", now) || !upd.ValidUntil().Equal(now.Add(5*time.Second)) {
		t.Fatalf("after a health key came and went: healthy %v, valid until %v; want healthy until now+5s",
			upd.Healthy("p1", now), upd.ValidUntil())
	}
	if upd.Healthy("p1", now.Add(6*time.Second)) {
		t.Fatal("p1 still healthy after the grace window")
	}
}

// TestSkippedOrderIsStable: a key listed twice in Skipped (a refused new
// value of an override whose last good value names a missing route) is
// listed in one order, whatever the map order.
func TestSkippedOrderIsStable(t *testing.T) {
	st := map[string]string{
		"pools/p1":        `{"host":"p1.example","residency":"eu"}`,
		"routes/_default": `{"targets":[{"pool":"p1","weight":100}]}`,
	}
	for i := 0; i < 20; i++ {
		st[fmt.Sprintf("overrides/o%02d", i)] = `{"route":"nope","targets":[{"pool":"p1","weight":100}]}`
	}
	kvs := func(rev int64) []KV {
		var out []KV
		for _, k := range sortedKeys(st) {
			out = append(out, KV{Key: k, Value: []byte(st[k]), ModRevision: rev})
		}
		return out
	}
	opts := CompileOptions{Now: t0}
	base := Compile(1, kvs(1), nil, opts)
	for i := 0; i < 20; i++ {
		st[fmt.Sprintf("overrides/o%02d", i)] = `{"route":1}`
	}
	want := fmt.Sprint(Compile(2, kvs(2), base, opts).Skipped())
	for i := 0; i < 30; i++ {
		if got := fmt.Sprint(Compile(2, kvs(2), base, opts).Skipped()); got != want {
			t.Fatalf("skipped order changed between compiles of the same state:\n%.300s\n%.300s", got, want)
		}
	}
}

// BenchmarkUpdateAfterIdle is the agent's work per isolated change as the
// agent meets it: after 15 ms idle (the bench's put spacing), when caches,
// branch predictors and TLBs have gone cold (on the project's 2-core VM
// several times the cost in a loop). Per change: the update after one
// route changed, then the snapshot's JSON segments. The idle time is not
// counted.
func BenchmarkUpdateAfterIdle(b *testing.B) {
	prev := Compile(1, kvsOf(b, exampleConfig(b)), nil, CompileOptions{Now: t0})
	segs, scratch, _ := prev.JSONSegments(nil, nil, t0)
	vals := [2][]byte{
		[]byte(`{"targets":[{"pool":"eu-central","weight":70},{"pool":"eu-west","weight":30}]}`),
		[]byte(`{"targets":[{"pool":"eu-central","weight":30},{"pool":"eu-west","weight":70}]}`),
	}
	for n := 0; b.Loop(); n++ {
		b.StopTimer()
		time.Sleep(15 * time.Millisecond)
		ev := []Event{{KV: KV{Key: "routes/PL", Value: vals[n%2], ModRevision: int64(n + 2)}}}
		b.StartTimer()
		prev = Update(prev, int64(n+2), ev, CompileOptions{Now: t0})
		segs, scratch, _ = prev.JSONSegments(segs, scratch, t0)
	}
}

// TestTablesStayUnchanged: a table never changes once built, while it is
// updated several times (directly, through At and through WithRevision)
// and other goroutines read every table built so far: each table's good
// values and JSON at the end are what they were when it was built. Run
// with -race.
func TestTablesStayUnchanged(t *testing.T) {
	cfg := exampleConfig(t)
	pools := sortedKeys(cfg.Pools)
	routes := []string{"PL", "DE", "KR", "JP", "US", "BR", "GB", "eu-general", "apac-general", "_default", "HU", "ZA", "AD"}
	rng := rand.New(rand.NewPCG(5, 6))
	rev := int64(1)
	now := t0
	opts := CompileOptions{Now: now, Start: t0}
	type built struct {
		t    *Table
		good []KV
		js   []byte
	}
	snap := func(tb *Table) built {
		js, err := tb.JSON(now)
		if err != nil {
			t.Fatal(err)
		}
		return built{tb, goodKVs(tb), js}
	}
	all := []built{snap(Compile(rev, kvsOf(t, cfg), nil, opts))}
	const readers = 4
	var wg sync.WaitGroup
	stop := make(chan struct{})
	tables := make(chan *Table, 1024)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen []*Table
			for {
				select {
				case <-stop:
					return
				case tb := <-tables:
					seen = append(seen, tb)
				default:
				}
				for _, tb := range seen {
					_ = goodKVs(tb)
					tb.Resolve("PL", "k", now)
				}
			}
		}()
	}
	steps := 300
	if raceEnabled {
		steps = 120
	}
	for step := range steps {
		parent := all[rng.IntN(len(all))].t
		switch rng.IntN(4) {
		case 0:
			parent = parent.At(now.Add(time.Duration(rng.IntN(20)) * time.Second))
		case 1:
			parent = parent.WithRevision(parent.Revision())
		}
		var events []Event
		for range rng.IntN(25) + 1 {
			rev++
			route := routes[rng.IntN(len(routes))]
			switch rng.IntN(4) {
			case 0:
				events = append(events, Event{KV: KV{Key: RouteKey(route), ModRevision: rev}, Deleted: true})
			case 1:
				events = append(events, Event{KV: KV{Key: OverrideKey("o" + strconv.Itoa(rng.IntN(3))), ModRevision: rev,
					Value: fmt.Appendf(nil, `{"route":%q,"targets":[{"pool":%q,"weight":100}]}`, route, pools[rng.IntN(len(pools))])}})
			case 2:
				events = append(events, Event{KV: KV{Key: RouteKey("X" + strconv.Itoa(rng.IntN(40))), ModRevision: rev,
					Value: randomRouteValue(rng, pools)}})
			default:
				events = append(events, Event{KV: KV{Key: RouteKey(route), ModRevision: rev, Value: randomRouteValue(rng, pools)}})
			}
		}
		next := Update(parent, rev, events, opts)
		if next == nil {
			t.Fatalf("step %d: Update refused", step)
		}
		all = append(all, snap(next))
		for range readers {
			tables <- next
		}
	}
	close(stop)
	wg.Wait()
	for i, b := range all {
		if got := goodKVs(b.t); !reflect.DeepEqual(got, b.good) {
			t.Fatalf("table %d: good values changed after it was built", i)
		}
		js, _ := b.t.JSON(now)
		if d := firstDiffAll(js, b.js); d != "" {
			t.Fatalf("table %d: JSON changed after it was built: %s", i, d)
		}
	}
}

// BenchmarkUpdateManyPools is the mirror's work per watch response in the
// change-path harness's burst (bench/README.md): a table of N pools gets
// one new pool. Each iteration updates the same table, so N stays N.
func BenchmarkUpdateManyPools(b *testing.B) {
	for _, n := range []int{100, 2000, 20000} {
		b.Run(fmt.Sprintf("pools=%d", n), func(b *testing.B) {
			val := func(i int) []byte {
				return fmt.Appendf(nil, `{"host":"bench.example.net","region":"bench","residency":"global","status":"active","attrs":{"m":"QB%06dQ"}}`, i)
			}
			kvs := make([]KV, 0, n)
			for i := range n {
				kvs = append(kvs, KV{Key: fmt.Sprintf("pools/base%06d", i), Value: val(i), ModRevision: 1, CreateRevision: 1, Version: 1})
			}
			opts := CompileOptions{Now: t0, Start: t0}
			prev := Compile(1, kvs, nil, opts)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rev := int64(i + 2)
				ev := []Event{{KV: KV{Key: fmt.Sprintf("pools/new%06d", i), Value: val(i), ModRevision: rev, CreateRevision: rev, Version: 1}, Created: true}}
				if Update(prev, rev, ev, opts) == nil {
					b.Fatal("Update refused the table")
				}
			}
		})
	}
}

// TestUnchangedEntriesShareArrays: a change no entry depends on (a pool no
// route names) builds a table that shares its per-entry arrays with the
// previous one instead of copying them; a change an entry depends on gives
// the new table arrays of its own and leaves the previous one's as they were.
func TestUnchangedEntriesShareArrays(t *testing.T) {
	cfg := exampleConfig(t)
	opts := CompileOptions{Now: t0, Start: t0}
	prev := Compile(1, kvsOf(t, cfg), nil, opts)
	if prev.arrays == nil {
		t.Fatal("a compiled table has no arrays")
	}
	lone := Update(prev, 2, []Event{{KV: KV{Key: PoolKey("lone"), ModRevision: 2,
		Value: []byte(`{"host":"lone.example.net","residency":"eu"}`)}}}, opts)
	if lone == nil || !lone.pools.has("lone") {
		t.Fatal("Update did not take the new pool")
	}
	if lone.arrays != prev.arrays {
		t.Error("a pool no route names copied the per-entry arrays; want them shared")
	}
	before := *prev.arrays
	pl := prev.Effective("PL")
	moved := Update(lone, 3, []Event{{KV: KV{Key: RouteKey("PL"), ModRevision: 3,
		Value: []byte(`{"targets":[{"pool":"lone","weight":100}]}`)}}}, opts)
	if moved == nil || moved.arrays == prev.arrays {
		t.Fatal("a route change shares the previous table's arrays; want its own")
	}
	if got := moved.Effective("PL"); len(got.Candidates) != 1 || got.Candidates[0].Pool != "lone" {
		t.Errorf("PL after the change: %+v, want the pool lone", got.Candidates)
	}
	if *prev.arrays != before || prev.Effective("PL") != pl || lone.Effective("PL") != pl {
		t.Error("the route change wrote into the tables it was built from")
	}
}

// TestLostRecordsArePruned: the record of when a pool id lost its last
// health key is kept by Update only while it changes an answer (its grace
// window), as Compile keeps it: an agent that never relists saw 1,000
// ids come and go (removed pools, instances renamed) and kept a record of
// each for its life, copied whole at each later loss (the soak review).
// The pool that has a record in its window keeps it, and its health. Each
// step is checked against a Compile of the same store.
func TestLostRecordsArePruned(t *testing.T) {
	kvs := checkedPoolStore()
	opts := func(now time.Time) CompileOptions { return CompileOptions{Now: now, Start: t0, Grace: 5 * time.Second} }
	at := t0.Add(time.Minute)
	tbl := Compile(1, kvs, nil, opts(at))
	rev := int64(1)
	// comeAndGo puts a health key of id, then deletes it, each in its own
	// watch response, and checks the loss records against a Compile of
	// the same store from the same previous table.
	comeAndGo := func(id string, now time.Time) {
		key := "health/" + id + "/i0"
		tbl = Update(tbl, rev+1, []Event{
			{KV: KV{Key: key, Value: []byte(`{"addr":"10.0.0.1:443"}`), ModRevision: rev + 1}, Created: true},
		}, opts(now))
		before := tbl
		tbl = Update(tbl, rev+2, []Event{{KV: KV{Key: key, ModRevision: rev + 2}, Deleted: true}}, opts(now))
		rev += 2
		if want := Compile(rev, kvs, before, opts(now)); !maps.Equal(tbl.lost, want.lost) {
			t.Fatalf("after %s lost its health key: Update keeps %d loss records, Compile %d", id, len(tbl.lost), len(want.lost))
		}
	}
	for i := range 1000 {
		comeAndGo(fmt.Sprintf("gone-%d", i), at)
	}
	if n := len(tbl.lost); n != 1000 {
		t.Fatalf("%d loss records within their grace window, want 1000", n)
	}
	later := at.Add(time.Minute)
	comeAndGo("p1", later)
	if n := len(tbl.lost); n != 1 || !tbl.Healthy("p1", later) || tbl.Healthy("p1", later.Add(6*time.Second)) {
		t.Fatalf("a minute later, after p1's loss: %d loss records (want p1's alone), p1 healthy %v, after its window %v",
			n, tbl.Healthy("p1", later), tbl.Healthy("p1", later.Add(6*time.Second)))
	}
	comeAndGo("gone-x", later.Add(time.Minute))
	if n := len(tbl.lost); n != 1 {
		t.Fatalf("after p1's window and another loss: %d loss records, want the new one's", n)
	}
}

// checkedPoolStore is one pool with health_check, p1, and a _default
// route to it, each at revision 1.
func checkedPoolStore() []KV {
	return []KV{
		{Key: "pools/p1", Value: []byte(`{"host":"p1.example","residency":"eu","health_check":true}`), ModRevision: 1},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"p1","weight":100}]}`), ModRevision: 1},
	}
}

package routing

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestUpdateFollowsResidencyChanges: Update over random event batches that
// change pools' residency, the policy's membership (territories, GB, CH,
// a refused policy whose last good value stays), health keys and boosts
// with expiries equals, after each batch and grace windows later, a
// Compile that replays the batch event by event as the mirror sees it,
// and no decision leaves its country's class (the residency review: the
// other incremental tests keep each pool's residency fixed).
func TestUpdateFollowsResidencyChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pools := []string{"p0", "p1", "p2", "p3", "p4", "p5"}
	res := []string{"eu", "us", "uk", "apac", "global"}
	routes := []string{"_default", "g0", "g1", "PL", "DE", "GB", "CH", "RE", "AX", "US", "JP", "HU"}
	store := map[string]KV{}
	rev := int64(1)
	var events []Event
	now := t0
	put := func(k, v string) {
		rev++
		old, ok := store[k]
		kv := KV{Key: k, Value: []byte(v), ModRevision: rev, CreateRevision: old.CreateRevision, Version: old.Version + 1}
		if !ok {
			kv.CreateRevision = rev
		}
		store[k] = kv
		events = append(events, Event{KV: kv, Created: !ok})
	}
	del := func(k string) {
		if _, ok := store[k]; !ok {
			return
		}
		rev++
		delete(store, k)
		events = append(events, Event{KV: KV{Key: k, ModRevision: rev}, Deleted: true})
	}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	targets := func() string {
		a, b := pick(pools), pick(pools)
		if a == b {
			return fmt.Sprintf(`[{"pool":%q,"weight":100}]`, a)
		}
		w := rng.IntN(101)
		return fmt.Sprintf(`[{"pool":%q,"weight":%d},{"pool":%q,"weight":%d}]`, a, w, b, 100-w)
	}
	policy := func() string {
		classes := map[string][]string{}
		for _, cc := range []string{"PL", "DE", "HU", "RE", "AX", "GB", "CH", "JP", "US", "FR", "MT"} {
			if rng.IntN(3) > 0 {
				c := pick(res)
				classes[c] = append(classes[c], cc)
			}
		}
		return fmt.Sprintf(`{"classes":%s,"unknown_country_class":%q}`, mustJSON(classes), pick(res))
	}
	for _, p := range pools {
		put(PoolKey(p), fmt.Sprintf(`{"host":"%s.example.net","residency":%q}`, p, pick(res)))
	}
	for _, r := range routes {
		put(RouteKey(r), fmt.Sprintf(`{"targets":%s,"fallback":[%q]}`, targets(), pick([]string{"g0", "g1", "_default", "PL"})))
	}
	muts := []func(){
		func() { // a pool changes residency, status, health_check
			p := pick(pools)
			put(PoolKey(p), fmt.Sprintf(`{"host":"%s.example.net","residency":%q,"status":%q,"health_check":%v}`, p, pick(res),
				pick([]string{"active", "active", "draining", "down"}), rng.IntN(3) == 0))
		},
		func() { put(PolicyKey, policy()) },
		func() { del(PolicyKey) },
		func() { put(PolicyKey, `{"classes":{"eu":["pl"]}}`) }, // refused: last good stays
		func() {
			r := pick(routes)
			put(RouteKey(r), fmt.Sprintf(`{"targets":%s,"fallback":[%q]}`, targets(), pick([]string{"g0", "g1", "_default", "PL", "GB"})))
		},
		func() { del(RouteKey(pick(routes))) },
		func() { put(HealthKey(pick(pools), fmt.Sprint("i", rng.IntN(2))), `{}`) },
		func() {
			for k := range store {
				if strings.HasPrefix(k, "health/") && rng.IntN(2) == 0 {
					del(k)
					return
				}
			}
		},
		func() {
			exp := ""
			if rng.IntN(2) == 0 {
				exp = fmt.Sprintf(`,"expires_at":%q`, now.Add(time.Duration(rng.IntN(4000))*time.Millisecond).Format(time.RFC3339Nano))
			}
			put(OverrideKey(fmt.Sprint("b", rng.IntN(3))), fmt.Sprintf(`{"route":%q,"targets":%s%s}`, pick(routes), targets(), exp))
		},
		func() { del(OverrideKey(fmt.Sprint("b", rng.IntN(3)))) },
	}
	kvs := func() []KV {
		var out []KV
		for _, k := range sortedKeys(store) {
			out = append(out, Keep(store[k]))
		}
		return out
	}
	opts := func() CompileOptions { return CompileOptions{Now: now, Start: t0, Grace: 2 * time.Second} }
	events = nil
	upd := Compile(rev, kvs(), nil, opts())
	full := upd
	fullStore := map[string]KV{}
	for k, kv := range store {
		fullStore[k] = kv
	}
	steps := 3000
	if raceEnabled {
		steps = 300
	}
	for step := range steps {
		events = events[:0]
		for n := 1 + rng.IntN(3); n > 0; n-- {
			muts[rng.IntN(len(muts))]()
		}
		now = now.Add(time.Duration(rng.IntN(2500)) * time.Millisecond)
		if rng.IntN(3) == 0 {
			upd = upd.At(now)
		}
		checked := make([]Event, len(events))
		for i, ev := range events {
			checked[i] = ev
			checked[i].KV = Keep(ev.KV)
		}
		upd = Update(upd, rev, checked, opts())
		// The compiled side replays the batch one event at a time, as the
		// mirror sees it (a refused value keeps the good one before it).
		replay := map[string]KV{}
		for k, kv := range fullStore {
			replay[k] = kv
		}
		for _, ev := range events {
			if ev.Deleted {
				delete(replay, ev.Key)
			} else {
				replay[ev.Key] = ev.KV
			}
			var rk []KV
			for _, k := range sortedKeys(replay) {
				rk = append(rk, Keep(replay[k]))
			}
			full = Compile(ev.ModRevision, rk, full, opts())
		}
		fullStore = replay
		for _, at := range []time.Time{now, now.Add(3 * time.Second)} {
			a, _ := upd.JSON(at)
			b, _ := full.JSON(at)
			if d := firstDiffAll(a, b); d != "" {
				for _, ev := range events {
					t.Logf("event %s deleted=%v create=%d mod=%d %s", ev.Key, ev.Deleted, ev.CreateRevision, ev.ModRevision, ev.Value)
				}
				t.Logf("upd policy %+v unknown class %q; full policy %+v unknown class %q; skipped upd %v full %v", upd.Policy(), upd.ClassOf(Unknown), full.Policy(), full.ClassOf(Unknown), upd.Skipped(), full.Skipped())
				t.Fatalf("step %d at +%v: %s", step, at.Sub(now), d)
			}
			for _, cc := range append([]string{"XX", "pl"}, Countries()...) {
				d, err := upd.Resolve(cc, "k", at)
				if err != nil {
					continue
				}
				class := upd.ClassOf(NormalizeCountry(cc))
				p, _ := upd.Pool(d.Pool)
				if class != "" && p.Residency != class {
					t.Fatalf("step %d: RESIDENCY %s class %s -> %s (%s)", step, cc, class, d.Pool, p.Residency)
				}
			}
		}
	}
}

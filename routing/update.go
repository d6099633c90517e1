package routing

import (
	"bytes"
	"maps"
	"time"
)

// Update returns the table of prev's state with events applied in order,
// at revision: the table Compile would build from the whole resulting
// state with prev, in time that follows the events, not of the
// table. It returns nil when prev cannot be updated (nil, loaded from a
// snapshot file, or compiled with Down) or opts asks for a stale or
// what-if table: compile the whole state then. Like Compile, it keeps the
// events' values, which must not be changed afterwards.
func Update(prev *Table, revision int64, events []Event, opts CompileOptions) *Table {
	if prev == nil || !prev.compiled || prev.stale || opts.Stale || len(opts.Down) > 0 {
		return nil
	}
	opts = opts.withDefaults(prev)
	u := &updater{prev: prev, t: prevState(prev, revision, opts),
		invalid: shareMap(prev.invalid), instances: shareMap(prev.instances), lost: shareMap(prev.lost),
		routes: shareMap(prev.routes)}
	for _, ev := range events {
		u.apply(ev)
	}
	d := u.changes()
	u.countLive(opts)
	u.rebuildPools(&d)
	recollect := u.rebuildRoutes(&d, opts.Now)
	t := u.t
	t.invalid, t.instances, t.lost = u.invalid.m, u.instances.m, u.lost.m
	if recollect || u.invalid.own {
		t.collectSkipped()
	}
	t.build(opts.Now, prev, &d)
	return t
}

// prevState returns a new table at revision holding prev's state, every
// map still prev's (the updater copies a map before its first write).
func prevState(prev *Table, revision int64, opts CompileOptions) *Table {
	t := &Table{}
	t.revision, t.changed, t.clusterID, t.grace, t.start, t.builtAt = revision, revision, opts.ClusterID, opts.Grace, opts.Start, opts.Now
	t.compiled, t.epoch, t.policy = true, prev.epoch, prev.policy
	t.pools, t.routes, t.overrides, t.applied, t.ovUntil = prev.pools.fork(), prev.routes, prev.overrides, prev.applied, prev.ovUntil
	t.ovExpired = prev.ovExpired
	t.good, t.invalid, t.instances, t.lost = prev.good.fork(), prev.invalid, prev.instances, prev.lost
	t.skipped, t.ovSkipped = prev.skipped, prev.ovSkipped
	return t
}

// sharedMap is a map a table being updated shares with the table it is
// updated from, which is never changed: write copies it once, at the
// first write, and own tells whether it was.
type sharedMap[K comparable, V any] struct {
	m   map[K]V
	own bool
}

// shareMap shares m until the first write.
func shareMap[K comparable, V any](m map[K]V) sharedMap[K, V] { return sharedMap[K, V]{m: m} }

// write returns the map to change: the shared map's copy, made once.
func (s *sharedMap[K, V]) write() map[K]V {
	if !s.own {
		s.m, s.own = maps.Clone(s.m), true
		if s.m == nil {
			s.m = map[K]V{}
		}
	}
	return s.m
}

// updater applies a batch of events to a table made from prev.
type updater struct {
	prev, t *Table
	// invalid, instances, lost and routes are prev's maps until first
	// written (the pools are t's fork of prev's).
	invalid   sharedMap[string, string]
	instances sharedMap[string, int]
	lost      sharedMap[string, time.Time]
	routes    sharedMap[string, *Route]
	// touched lists the keys of the events, health keys aside.
	touched []string
	// live counts each pool's health keys event by event; lostHere marks
	// the pools whose count fell to zero at some event (the loss is then
	// now, even when a key came back or the batch ends where it began).
	live     map[string]int
	lostHere map[string]bool
	// dirty pools (their state must be made again), and whether routes
	// or overrides changed.
	dirtyPools           []string
	routesDirty, ovDirty bool
}

// apply applies one event to the good values and the refused values.
func (u *updater) apply(ev Event) {
	if k, err := ParseKey(ev.Key); err == nil && k.Kind == KindHealth {
		if ev.Deleted || ev.Created {
			u.countHealth(k.ID, ev.Deleted)
		}
		msg := ""
		if !ev.Deleted {
			msg = ev.healthError()
		}
		u.setInvalid(ev.Key, msg)
		return
	}
	u.touched = append(u.touched, ev.Key)
	if ev.Deleted {
		u.t.good.del(ev.Key)
		u.setInvalid(ev.Key, "")
		return
	}
	u.addKV(ev.KV)
}

// countHealth counts a health key of pool id created or deleted.
func (u *updater) countHealth(id string, deleted bool) {
	if u.live == nil {
		u.live, u.lostHere = map[string]int{}, map[string]bool{}
	}
	n, seen := u.live[id]
	if !seen {
		n = u.prev.instances[id]
	}
	if deleted {
		if n--; n == 0 {
			u.lostHere[id] = true
		}
	} else {
		n++
	}
	u.live[id] = n
}

// setInvalid records why key's current value is refused, or clears it
// when msg is "".
func (u *updater) setInvalid(key, msg string) {
	if _, ok := u.invalid.m[key]; !ok && msg == "" {
		return // nothing to clear
	}
	if msg == "" {
		delete(u.invalid.write(), key)
		return
	}
	u.invalid.write()[key] = msg
}

// addKV is Compile's addKV for an update: t.good already holds the last
// good values.
func (u *updater) addKV(kv KV) {
	good := &u.t.good
	if g, ok := good.get(kv.Key); ok && bytes.Equal(g.raw, kv.Value) {
		good.set(kv.Key, goodValue{raw: g.raw, val: g.val, rev: kv.ModRevision, create: kv.CreateRevision})
		u.setInvalid(kv.Key, "")
		return
	}
	v, err := decodeKept(kv.Key, kv.Value)
	if err != nil {
		u.setInvalid(kv.Key, err.Error())
		if g, ok := good.get(kv.Key); ok && !g.sameIncarnation(kv) {
			good.del(kv.Key) // of an incarnation that ended unseen
		}
		return // the last good value of this incarnation, if any, stays
	}
	good.set(kv.Key, goodValue{raw: kv.Value, val: v, rev: kv.ModRevision, create: kv.CreateRevision})
	u.setInvalid(kv.Key, "")
}

// changes compares the good values of the touched keys with prev's and
// returns the routes that changed; it notes the pools, routes and
// overrides that did, and takes the new policy and epoch.
func (u *updater) changes() diff {
	d := diff{known: true}
	t := u.t
	for _, key := range u.touched {
		k, err := ParseKey(key)
		if err != nil {
			continue
		}
		a, aok := u.prev.good.get(key)
		b, bok := t.good.get(key)
		if aok == bok && (!aok || (a.val == b.val && (k.Kind != KindOverride || a.rev == b.rev))) {
			continue
		}
		switch k.Kind {
		case KindPool:
			u.dirtyPools = append(u.dirtyPools, k.ID)
		case KindRoute:
			d.routes.add(k.ID)
			u.routesDirty = true
		case KindOverride:
			u.ovDirty = true
		case KindPolicy:
			t.policy = DefaultResidency()
			if bok {
				t.policy = *b.val.(*Residency)
			}
		case KindEpoch:
			t.epoch = 0
			if bok {
				t.epoch = b.val.(int64)
			}
		}
	}
	return d
}

// countLive records the pools' new live instance counts and losses.
func (u *updater) countLive(opts CompileOptions) {
	for id, n := range u.live {
		if n == u.prev.instances[id] && !u.lostHere[id] {
			continue
		}
		switch {
		case n > 0:
			u.instances.write()[id] = n
			delete(u.lost.write(), id)
		case u.lostHere[id]:
			delete(u.instances.write(), id)
			u.lost.write()[id] = opts.Now
		default:
			delete(u.instances.write(), id)
		}
		u.dirtyPools = append(u.dirtyPools, id)
	}
	if u.lost.own {
		// Copied for this batch: drop the records that change no answer
		// any more, as a Compile does (trackLost). Kept, a record per pool
		// id that ever lost its last health key, removed pools and ids of
		// no pool included, grew for the agent's life (between relists)
		// and was copied whole at each loss or return (the soak review).
		for id, at := range u.lost.m {
			if u.instances.m[id] == 0 && !at.Add(opts.Grace).After(opts.Now) && !opts.Start.Add(opts.Grace).After(opts.Now) {
				delete(u.lost.m, id)
			}
		}
	}
}

// rebuildPools makes the state of every dirty pool again and adds it to d.
func (u *updater) rebuildPools(d *diff) {
	t := u.t
	t.instances, t.lost = u.instances.m, u.lost.m // newPoolState reads them
	for _, id := range u.dirtyPools {
		d.pools.add(id)
		if g, ok := t.good.get(PoolKey(id)); ok {
			t.pools.set(id, t.newPoolState(id, g.val.(*Pool)))
		} else {
			t.pools.del(id)
		}
	}
}

// rebuildRoutes makes the changed routes again, or all routes and
// overrides when overrides are involved (they replace routes' targets in
// order, one may have expired at now, or, the wall clock stepped back
// since prev was built, one prev left out as expired may be live again),
// and reports whether the skipped list must be made again.
func (u *updater) rebuildRoutes(d *diff, now time.Time) (recollect bool) {
	t := u.t
	clockBack := now.Round(0).Before(u.prev.builtAt.Round(0)) // wall times: expires_at is one
	switch {
	case u.ovDirty || (u.routesDirty && len(t.overrides) > 0) || u.prev.overridesMoved(now) || clockBack:
		t.assembleRoutes(now)
		d.known = false
		return true
	case u.routesDirty:
		for _, name := range d.routes.names {
			if g, ok := t.good.get(RouteKey(name)); ok {
				u.routes.write()[name] = g.val.(*Route)
			} else {
				delete(u.routes.write(), name)
			}
		}
		t.routes = u.routes.m
	}
	return false
}

package routing

import (
	"iter"
	"maps"
	"math"
	"slices"
)

// layered is a map by key that a table shares with the tables updated
// from it. It is a base map, never written once shared, and an overlay of
// the changes made since the base was (over; a slot that is not ok is a
// deleted key). A fork shares both until its first write, which copies
// the overlay only, or, once the overlay has outgrown foldAt of the base,
// folds both into a new base. So an update that changes k keys of a map
// of n costs about k + √n, not n: what lets a table of thousands of pools
// take a new pool in microseconds (the burst of bench/README.md).
//
// A table's layered maps are never written once it is built: only forks
// are, by the table being built.
type layered[V any] struct {
	base map[string]V
	over map[string]slot[V]
	n    int // keys present
	// shared: over is the forked-from map's, copied at the first write.
	shared bool
}

// slot is an overlay's entry: a value, or a deleted key (ok false).
type slot[V any] struct {
	v  V
	ok bool
}

// newLayered wraps m, which the caller no longer writes.
func newLayered[V any](m map[string]V) layered[V] { return layered[V]{base: m, n: len(m)} }

// foldAt is the overlay size past which a write folds the overlay into a
// new base: 2√n (at least 16), so copying the overlay per update and the
// base once per fold both cost about √n a change. n is the base's size: a
// map filled by set alone (an empty base) folds at its first fork's first
// write, which is right (one copy, then overlays as usual).
func foldAt(n int) int { return max(16, 2*int(math.Sqrt(float64(n)))) }

// get returns key's value and whether it has one (none in a nil map).
func (l *layered[V]) get(key string) (V, bool) {
	if l == nil {
		var zero V
		return zero, false
	}
	if s, ok := l.over[key]; ok {
		return s.v, s.ok
	}
	v, ok := l.base[key]
	return v, ok
}

// has reports whether key has a value.
func (l *layered[V]) has(key string) bool {
	_, ok := l.get(key)
	return ok
}

// len returns the number of keys with a value.
func (l *layered[V]) len() int { return l.n }

// fork returns a copy to change, sharing l's maps until its first write.
func (l *layered[V]) fork() layered[V] {
	return layered[V]{base: l.base, over: l.over, n: l.n, shared: true}
}

// same reports whether l and o are the very same map: a fork of the
// other not written since.
func (l *layered[V]) same(o *layered[V]) bool {
	return sameMap(l.base, o.base) && sameMap(l.over, o.over) && l.n == o.n
}

// writable makes the overlay l's own before a write: at a fork's first
// write, a copy of the overlay, or one new base when the overlay has
// outgrown foldAt (never in the middle of one table's writes, which may
// be many).
func (l *layered[V]) writable() {
	if l.shared {
		if len(l.over) > foldAt(len(l.base)) {
			m := make(map[string]V, l.n)
			for k, v := range l.all() {
				m[k] = v
			}
			*l = newLayered(m)
		} else {
			l.over, l.shared = maps.Clone(l.over), false
		}
	}
	if l.over == nil {
		l.over = make(map[string]slot[V], 4)
	}
}

// set records v as key's value.
func (l *layered[V]) set(key string, v V) {
	l.writable()
	if !l.has(key) {
		l.n++
	}
	l.over[key] = slot[V]{v: v, ok: true}
}

// del removes key.
func (l *layered[V]) del(key string) {
	if !l.has(key) {
		return
	}
	l.writable()
	l.n--
	if _, inBase := l.base[key]; inBase {
		l.over[key] = slot[V]{}
	} else {
		delete(l.over, key)
	}
}

// all yields every key with its value, in no particular order.
func (l *layered[V]) all() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for k, v := range l.base {
			if _, changed := l.over[k]; changed {
				continue
			}
			if !yield(k, v) {
				return
			}
		}
		for k, s := range l.over {
			if s.ok && !yield(k, s.v) {
				return
			}
		}
	}
}

// keys returns the keys in order.
func (l *layered[V]) keys() []string {
	ks := make([]string, 0, l.n)
	for k := range l.all() {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// changedSince returns the keys whose values may differ between l and o
// (each once, in no order), and true, when l and o share a base: the keys
// of both overlays. It returns false when they do not, and the caller must
// compare every key.
func (l *layered[V]) changedSince(o *layered[V]) ([]string, bool) {
	if !sameMap(l.base, o.base) {
		return nil, false
	}
	if sameMap(l.over, o.over) {
		return nil, true
	}
	keys := make([]string, 0, len(l.over)+len(o.over))
	for k := range l.over {
		keys = append(keys, k)
	}
	for k := range o.over {
		if _, both := l.over[k]; !both {
			keys = append(keys, k)
		}
	}
	return keys, true
}

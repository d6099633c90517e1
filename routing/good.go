package routing

import (
	"iter"
	"maps"
)

// goodValue is the last good value of a key: its bytes, its decoding, the
// revision it was written at and the revision that created the key's
// incarnation it belongs to.
type goodValue struct {
	raw    []byte
	val    Value
	rev    int64
	create int64
}

// sameIncarnation reports whether g was written to the incarnation of the
// key that kv is a value of: only then may a refused kv keep g.
func (g goodValue) sameIncarnation(kv KV) bool { return g.create == kv.CreateRevision }

// goodValues maps keys (all but health keys) to their last good values.
// A table updated from another shares the other's map (base) and keeps its
// own changes in a small overlay (over), so an update copies the keys it
// changed since the base was made, not every key; the overlay is folded
// into a new base once it grows. Nothing is written once a table is built.
type goodValues struct {
	base map[string]goodValue // never written once shared
	over map[string]goodValue // changes to base; a zero value (val nil) is a deleted key
	n    int                  // keys present
}

// newGoodValues wraps m, which the caller no longer writes.
func newGoodValues(m map[string]goodValue) goodValues { return goodValues{base: m, n: len(m)} }

// get returns key's good value and whether it has one.
func (g *goodValues) get(key string) (goodValue, bool) {
	if g == nil {
		return goodValue{}, false
	}
	if v, ok := g.over[key]; ok {
		return v, v.val != nil
	}
	v, ok := g.base[key]
	return v, ok
}

// len returns the number of keys with a good value.
func (g *goodValues) len() int { return g.n }

// fork returns a copy to change: the same base and a copy of the overlay,
// or, once the overlay holds more than an eighth of the keys (at least
// 16), one new base holding both.
func (g *goodValues) fork() goodValues {
	if len(g.over) > max(16, len(g.base)/8) {
		return newGoodValues(maps.Collect(g.all()))
	}
	return goodValues{base: g.base, over: maps.Clone(g.over), n: g.n}
}

// set records v as key's good value.
func (g *goodValues) set(key string, v goodValue) {
	if _, had := g.get(key); !had {
		g.n++
	}
	if g.over == nil {
		g.over = make(map[string]goodValue, 4)
	}
	g.over[key] = v
}

// del removes key's good value.
func (g *goodValues) del(key string) {
	if _, had := g.get(key); !had {
		return
	}
	g.n--
	if _, inBase := g.base[key]; !inBase {
		delete(g.over, key)
		return
	}
	if g.over == nil {
		g.over = make(map[string]goodValue, 4)
	}
	g.over[key] = goodValue{}
}

// all yields every key with its good value, in no particular order.
func (g *goodValues) all() iter.Seq2[string, goodValue] {
	return func(yield func(string, goodValue) bool) {
		for k, v := range g.base {
			if _, changed := g.over[k]; changed {
				continue
			}
			if !yield(k, v) {
				return
			}
		}
		for k, v := range g.over {
			if v.val != nil && !yield(k, v) {
				return
			}
		}
	}
}

package routing

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

// goodValues maps keys (all but health keys) to their last good values,
// shared between a table and the tables updated from it (see layered).
type goodValues = layered[goodValue]

// newGoodValues wraps m, which the caller no longer writes.
func newGoodValues(m map[string]goodValue) goodValues { return newLayered(m) }

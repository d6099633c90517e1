package routing

import "time"

// WithDown returns a copy of t in which the pools named in down are
// treated as down, evaluated at now: the what-if of `regionctl resolve
// --down` (CompileOptions.Down) on a table already compiled, without its
// keys. Names that are not pools of t are ignored (check with Pool). The
// copy is not followed by Update; t is unchanged.
func (t *Table) WithDown(down []string, now time.Time) *Table {
	if t.overridesMoved(now) {
		t = t.At(now)
	}
	cp := *t
	cp.compiled = false
	cp.pools = t.pools.fork()
	for _, id := range down {
		if p, ok := cp.pools.get(id); ok && !p.down {
			c := *p
			c.down = true
			cp.pools.set(id, &c)
		}
	}
	cp.builtAt = now
	cp.build(now, t, nil)
	return &cp
}

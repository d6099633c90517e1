package snapshot

import "time"

// pacer spaces rewrites by their own cost: after a write that began at
// lastStart and took cost (CPU time), the next begins no sooner than cost/budget
// after lastStart (the rewrites take at most budget of one CPU), and never
// later than max after the last one ended. A change after a quiet spell
// is written at once; changes that come during a write, or during its
// pacing, are coalesced into the next.
type pacer struct {
	budget    float64
	max       time.Duration
	lastStart time.Time
	cost      time.Duration
}

// wrote records a write that began at start and took cost.
func (p *pacer) wrote(start time.Time, cost time.Duration) { p.lastStart, p.cost = start, cost }

// next returns when the next write may begin.
func (p *pacer) next() time.Time {
	gap := time.Duration(float64(p.cost) / p.budget)
	return p.lastStart.Add(min(gap, p.cost+p.max))
}

// step observes the source's table and writes it when a write is due: a
// change once the pacing allows, the refresh when due, a retry after its
// backoff. It returns how long Run may wait before the next step, or
// again when it wrote and should look again at once. The caller holds mu.
func (w *Writer) step(now time.Time, inline bool) (wait time.Duration, again bool) {
	t := w.cfg.Source.Table()
	if t != w.seen {
		w.seen = t
		if w.firstPending.IsZero() {
			w.firstPending = now
		}
	}
	if t == nil {
		return w.cfg.Refresh, false // nothing to write until the first table
	}
	if now.Before(w.retryAt) {
		return w.retryAt.Sub(now), false
	}
	refresh := w.cfg.Refresh - now.Sub(w.lastWrite)
	if t == w.lastTable && refresh > 0 {
		return refresh, false
	}
	at := w.pace.next()
	if refresh <= 0 || !at.After(now) {
		w.publish(t, now, refresh <= 0, inline)
		return 0, true
	}
	return min(refresh, at.Sub(now)), false
}

package snapshot

import (
	"time"

	"github.com/regiond/regiond/routing"
)

// pacer spaces rewrites by their own cost, as a bucket of CPU time: credit
// accrues at budget (a share of one CPU) up to burst, each write spends
// what it cost, and the next write may begin once the credit is not
// negative — but never later than max after the last write began. So a
// change after a quiet spell is written at once, one costly write (the
// first after a sync, with cold caches) does not hold back the next, and
// sustained rewrites take at most budget of one CPU (plus burst, once).
// Changes that come during a write, or while the credit is owed, are
// coalesced into the next — until they stop: a change held back that no
// other has followed for Quiet goes at once on credit (borrow), so the end
// of a burst reaches the file without waiting out the pacing. Borrowed
// writes are charged like any other, so sustained changes stay within
// the budget.
//
// A write is charged its cost, but at most twice the running average of
// the costs: one write that met a garbage collection or a page fault does
// not stall the next for ten times its cost, while writes that grow
// dearer (a bigger table, a slower disk) raise the average within a few.
type pacer struct {
	budget float64
	burst  time.Duration
	max    time.Duration
	// lastStart is when the last write began.
	lastStart time.Time
	// credit is the CPU time the writes may spend at lastStart; negative:
	// owed. The zero pacer has a full bucket.
	credit time.Duration
	// avg is the running average of the writes' costs (a quarter of the
	// newest each time); zero before the first.
	avg time.Duration
}

// refill brings the credit up to date at now.
func (p *pacer) refill(now time.Time) {
	if p.lastStart.IsZero() {
		p.credit = p.burst
		return
	}
	if d := now.Sub(p.lastStart); d > 0 {
		p.credit = min(p.burst, p.credit+time.Duration(float64(d)*p.budget))
	}
}

// wrote records a write that began at start and took cost (its finish
// included), charged at most 2×avg of the writes before it. The credit
// owes at most what max repays: a write dearer than that (a slow disk) is
// paced by max, without debt piling up.
func (p *pacer) wrote(start time.Time, cost time.Duration) {
	p.refill(start)
	p.lastStart = start
	charge := cost
	if p.avg > 0 {
		charge = max(0, min(cost, 2*p.avg))
	}
	p.credit = max(p.credit-charge, -time.Duration(float64(p.max)*p.budget))
	if p.avg == 0 {
		p.avg = cost
	} else {
		p.avg += (cost - p.avg) / 4
	}
}

// creditAt returns the credit at now (refill without recording it).
func (p *pacer) creditAt(now time.Time) time.Duration {
	q := *p
	q.refill(now)
	return q.credit
}

// mayBorrow reports whether a write at now, before next, may go on
// credit: the debt after it (one average write more) stays within what
// max repays, where the pacing would otherwise forgive it. So borrowed
// writes are paid back by the writes after them, and a write dearer than
// half of that is not borrowed right after a paced write (later in the
// interval, the refill can let it: the debt after it still stays within
// what max repays). step asks again only at a change or at Quiet; it
// does not wake when borrowing becomes possible later in an interval.
func (p *pacer) mayBorrow(now time.Time) bool {
	return p.avg > 0 && p.creditAt(now)-p.avg > -time.Duration(float64(p.max)*p.budget)
}

// next returns when the next write may begin.
func (p *pacer) next() time.Time {
	if p.credit >= 0 {
		return p.lastStart
	}
	return p.lastStart.Add(min(time.Duration(float64(-p.credit)/p.budget), p.max))
}

// step observes the source's table and writes it when a write is due: a
// change once the pacing allows, the refresh when due, a retry after its
// backoff. It returns how long Run may wait before the next step, or
// again when it wrote and should look again at once. The caller holds mu.
func (w *Writer) step(now time.Time, inline bool) (wait time.Duration, again bool) {
	t := w.cfg.Source.Table()
	if t != w.seen {
		w.seen, w.lastSeen = t, now
	}
	if t == nil {
		return w.cfg.Refresh, false // nothing to write until the first table
	}
	if w.hold(t) {
		w.settle(t)
		return w.cfg.Refresh, false // until a table with pools comes
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
	wait = min(refresh, at.Sub(now))
	if w.pace.mayBorrow(now) { // the changes may have stopped: write on credit once they have
		quiet := w.lastSeen.Add(w.cfg.Quiet)
		if !quiet.After(now) {
			w.publish(t, now, false, inline)
			return 0, true
		}
		wait = min(wait, quiet.Sub(now))
	}
	return wait, false
}

// hold reports whether t is kept out of the files: a table without pools
// (a wrong --prefix, or every pool deleted around regionctl) routes
// nothing, so it does not replace a file whose table has pools, which
// front doors keep routing from (stale, once its synced_at ages past
// their max age). The first table with pools is written as any change.
// A file without pools, or none, is written as usual. The caller holds mu.
func (w *Writer) hold(t *routing.Table) bool {
	held := w.filePools && t.NumPools() == 0
	if held != w.holding {
		w.holding = held
		if held {
			w.heldGauge.Set(1)
			w.log.Warn("the table has no pools, so nothing routes: the snapshot files keep the last table that had pools; is --prefix right, and was a config applied (regionctl apply)?",
				"revision", t.Revision(), "file_revision", w.fileRevision)
		} else {
			w.heldGauge.Set(0)
			w.log.Info("the table has pools again: writing the snapshot files", "revision", t.Revision())
		}
	}
	return held
}

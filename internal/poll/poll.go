// Package poll waits for a condition by asking it again, for tests that
// watch an outside process or etcd reach a state they cannot be told of.
package poll

import (
	"testing"
	"time"
)

// Interval is how long Until sleeps between two asks.
const Interval = 50 * time.Millisecond

// Until asks cond every Interval until it holds or d has passed. It
// returns how long it waited and whether cond held; cond is asked once
// more after d, so a state reached during the last sleep counts.
func Until(d time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start), true
		}
		time.Sleep(Interval)
	}
	return time.Since(start), cond()
}

// MustInterval is how long Must sleeps between two asks: shorter than
// Interval, for the in-process states most tests wait for.
const MustInterval = 25 * time.Millisecond

// Must asks cond every MustInterval until it holds, and fails t (naming
// what and d) when d passes first, or when t failed meanwhile (in another
// goroutine): a hang guard, not a timing assertion.
func Must(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(MustInterval) {
		if t.Failed() {
			t.FailNow()
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%v)", what, d)
		}
	}
}

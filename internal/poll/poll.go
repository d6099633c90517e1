// Package poll waits for a condition by asking it again, for tests that
// watch an outside process or etcd reach a state they cannot be told of.
package poll

import "time"

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

//go:build race

package atomicfile

// raceEnabled: sync.Pool drops some of what it is given under the race
// detector, so the allocation test runs only without it.
const raceEnabled = true

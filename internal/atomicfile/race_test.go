//go:build race

package atomicfile

// raceEnabled: race builds write through unix.Writev, which allocates
// (writev_race_linux.go), so the allocation test runs only without -race.
const raceEnabled = true

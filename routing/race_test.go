//go:build race

package routing

// raceEnabled: the race detector slows the long property tests ~10×;
// they run fewer steps under it (the full count runs without -race).
const raceEnabled = true

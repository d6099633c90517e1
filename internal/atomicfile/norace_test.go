//go:build !race

package atomicfile

const raceEnabled = false

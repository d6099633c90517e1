//go:build !linux

package snapshot

import "time"

// threadCPU reports no thread CPU clock off Linux: the pacing counts the
// writes' wall time instead.
func threadCPU() (time.Duration, bool) { return 0, false }

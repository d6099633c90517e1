//go:build unix

package agent

import (
	"os"
	"syscall"
)

// fdLimit returns the process's soft limit of open file descriptors and how
// many are open now (0, 0 when unknown).
func fdLimit() (limit, inUse uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0
	}
	cur := uint64(rl.Cur)
	if cur > 1<<40 { // RLIM_INFINITY: no limit to fit
		return 0, 0
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		inUse = uint64(len(ents))
	} else if ents, err := os.ReadDir("/dev/fd"); err == nil {
		inUse = uint64(len(ents))
	}
	return cur, inUse
}

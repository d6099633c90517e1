//go:build !linux

package atomicfile

import "syscall"

// preallocate is a no-op off Linux: the write allocates the blocks.
func preallocate(fd int, n int64) error { return syscall.EOPNOTSUPP }

// holdFile holds nothing off Linux (no O_PATH): replacing the file frees
// its blocks during the rename.
func holdFile(path string) int { return -1 }

// writev writes (some of) the first non-empty of iovs: writevAll calls
// again for the rest.
func writev(fd int, iovs [][]byte) (int, error) {
	for _, b := range iovs {
		if len(b) > 0 {
			return syscall.Write(fd, b)
		}
	}
	return 0, nil
}

// InMemory reports false off Linux.
func InMemory(dir string) (bool, error) { return false, nil }

//go:build !linux

package snapfile

import "syscall"

// preallocate is a no-op off Linux: the write allocates the blocks.
func preallocate(fd int, n int64) error { return syscall.EOPNOTSUPP }

// holdFile holds nothing off Linux (no O_PATH): replacing the file frees
// its blocks during the rename.
func holdFile(path string) int { return -1 }

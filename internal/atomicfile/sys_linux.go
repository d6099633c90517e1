package atomicfile

import (
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// fallocKeepSize is FALLOC_FL_KEEP_SIZE: allocate blocks, keep the size.
	fallocKeepSize = 0x1
	// oPath is O_PATH (the same on every Linux port Go supports; the
	// syscall package lacks it on some).
	oPath = 0x200000
)

// preallocate allocates n bytes of blocks for fd without changing its size.
// File systems without fallocate (EOPNOTSUPP) are fine: the write
// allocates instead.
func preallocate(fd int, n int64) error {
	for {
		err := syscall.Fallocate(fd, fallocKeepSize, 0, n)
		if err != syscall.EINTR {
			return err
		}
	}
}

// holdFile returns an O_PATH descriptor on path (not following a symlink;
// no read access, no side effects on special files), or -1. While it is
// open, replacing path does not free the old file's blocks: closing it
// does.
func holdFile(path string) int {
	fd, err := ignoringEINTR(func() (int, error) {
		return syscall.Open(path, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1
	}
	return fd
}

// InMemory reports whether dir is on a file system held in memory (tmpfs,
// ramfs), where a write never waits for a disk or a server.
func InMemory(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	// Statfs_t.Type is int32 on some 32-bit ports, where RAMFS_MAGIC
	// overflows it: compare the 32 bits the kernel sets.
	t := uint32(st.Type)
	return t == uint32(unix.TMPFS_MAGIC) || t == uint32(unix.RAMFS_MAGIC), nil
}

package atomicfile

import (
	"sync"
	"syscall"
	"unsafe"

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

// iovecs are the writev argument arrays, reused: unix.Writev builds a new
// one per call, growing it from 8 entries, which for a table of thousands
// of segments was most of what a snapshot write allocated.
var iovecs = sync.Pool{New: func() any { return new([iovMax]unix.Iovec) }}

// writev writes the first iovMax of iovs in order with one writev call,
// returning the bytes written (maybe fewer than given). Empty buffers are
// left out.
func writev(fd int, iovs [][]byte) (int, error) {
	vecs := iovecs.Get().(*[iovMax]unix.Iovec)
	defer iovecs.Put(vecs)
	n := 0
	for _, b := range iovs {
		if n == iovMax {
			break
		}
		if len(b) > 0 {
			vecs[n].Base = &b[0]
			vecs[n].SetLen(len(b))
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	w, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&vecs[0])), uintptr(n))
	clear(vecs[:n]) // the pool keeps no caller's buffer alive
	if errno != 0 {
		return 0, errno
	}
	return int(w), nil
}

// InMemory reports whether dir is on a file system held in memory (tmpfs,
// ramfs), where a write never waits for a disk or a server.
func InMemory(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC, nil
}

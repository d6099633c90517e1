//go:build linux && !race

package atomicfile

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// writev writes the first iovMax non-empty buffers of iovs in order with
// one writev call, returning the bytes written (maybe fewer than given).
// Its argument array lives on the stack: unix.Writev builds one on the
// heap per call, growing it from 8 entries, a third of what a write of a
// table of thousands of pool segments allocated. Race builds use
// unix.Writev (writev_race_linux.go), which tells the race detector the
// buffers were read.
func writev(fd int, iovs [][]byte) (int, error) {
	var vecs [iovMax]unix.Iovec
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
	if errno != 0 {
		return 0, errno
	}
	return int(w), nil
}

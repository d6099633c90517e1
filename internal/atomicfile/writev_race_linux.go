//go:build linux && race

package atomicfile

import "golang.org/x/sys/unix"

// writev writes the first iovMax of iovs in order with one writev call,
// returning the bytes written (maybe fewer than given). Race builds use
// unix.Writev, which tells the race detector that the buffers were read:
// a buffer changed while it is written is reported. Other builds use a
// writev that allocates nothing (writev_linux.go).
func writev(fd int, iovs [][]byte) (int, error) {
	return unix.Writev(fd, iovs[:min(len(iovs), iovMax)])
}

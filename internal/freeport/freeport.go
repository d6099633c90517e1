// Package freeport hands out loopback TCP ports for servers that must be
// told their port before they bind it: etcd members and grpc-proxies
// started as processes, and agents a test restarts on the same port.
//
// Asking the kernel for a port (listening on 127.0.0.1:0 and closing) is
// not enough for them. Between the close and the server's bind, and while
// a test has an agent stopped, the kernel may give the same port to
// another listener on port 0 or to an outgoing connection's local end; a
// fault suite with dozens of servers and thousands of connections hit
// that. So on Linux Get picks ports outside the kernel's ephemeral range
// (net.ipv4.ip_local_port_range: below it, or above it when there is no
// room below), which the kernel never hands out by itself, and reserves
// each one for the life of the process with a lock file, so that other
// processes using this package (test binaries that go test runs in
// parallel) skip it too.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// rangeFile holds the kernel's ephemeral port range, "low high".
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// lowest is the lowest port Get hands out, and minSpan the fewest ports
// a range outside the ephemeral one must hold to be used.
const lowest, minSpan = 20000, 2000

var (
	mu       sync.Mutex
	held     = map[int]*os.File{} // reservations (nil: in this process only), kept for the process's life
	spanOnce sync.Once
	lo, hi   int // ports Get picks from, [lo, hi); hi == 0: ask the kernel
	dirOnce  sync.Once
	dir      string // the lock files' directory; "": none usable, no cross-process reservations
)

// Get returns a loopback TCP port that is free and reserved for this
// process: no other caller of Get, in this process or another, receives
// it while the process lives. Each port holds an open file (its lock) for
// that long, so a process should ask for hundreds, not tens of thousands.
//
// Where the lock directory ($TMPDIR/regiond-freeport-<uid>) cannot be made
// or is not this user's alone, ports are reserved within this process
// only. Where the kernel's ephemeral range cannot be read (systems other
// than Linux) or leaves no room, Get falls back to a port the kernel chose:
// free a moment ago, not reserved.
func Get() (int, error) {
	setUp()
	mu.Lock()
	defer mu.Unlock()
	if hi == 0 {
		return kernelPort()
	}
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		if _, ok := held[port]; ok {
			continue
		}
		var f *os.File
		if dir != "" {
			var err error
			if f, err = reserve(dir, port); errors.Is(err, errHeld) {
				continue
			} else if err != nil {
				return 0, fmt.Errorf("freeport: reserve port %d: %w", port, err)
			}
		}
		if !bindable(port) {
			if f != nil {
				f.Close()
			}
			continue
		}
		held[port] = f
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d", lo, hi-1)
}

// setUp reads the kernel's range and finds the lock directory, once.
func setUp() {
	spanOnce.Do(func() { lo, hi = span(rangeFile) })
	dirOnce.Do(func() {
		d := filepath.Join(os.TempDir(), "regiond-freeport-"+strconv.Itoa(os.Getuid()))
		if usableDir(d) == nil {
			dir = d
		}
	})
}

// span returns the ports below (or, failing that, above) the ephemeral
// range that rangeFile names, or 0, 0.
func span(rangeFile string) (int, int) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	elo, err1 := strconv.Atoi(f[0])
	ehi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || elo > ehi {
		return 0, 0
	}
	switch {
	case elo-lowest >= minSpan:
		return lowest, elo
	case 65536-(ehi+1) >= minSpan:
		return ehi + 1, 65536
	}
	return 0, 0
}

// errHeld reports a port another caller of Get has reserved.
var errHeld = errors.New("reserved by another process")

// bindable reports whether 127.0.0.1:port can be listened on now.
func bindable(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// kernelPort returns a port the kernel chose, free a moment ago.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("freeport: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

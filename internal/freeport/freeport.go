// Package freeport hands out loopback TCP ports for servers that must be
// told their port before they bind it: etcd members and grpc-proxies
// started as processes, and agents a test restarts on the same port.
//
// Asking the kernel for a port (listening on 127.0.0.1:0 and closing) is
// not enough for them. Between the close and the server's bind, and while
// a test has an agent stopped, the kernel may give the same port to
// another listener on port 0 or to an outgoing connection's local end; a
// fault suite with dozens of servers and thousands of connections hit
// that. So Get picks ports below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), which the kernel never hands out by
// itself, and reserves each one for the life of the process with a lock
// file, so that other processes using this package (test binaries that go
// test runs in parallel) skip it too.
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
	held     = map[int]*os.File{} // reservations, kept open for the process's life
	spanOnce sync.Once
	lo, hi   int // ports Get picks from, [lo, hi); hi == 0: ask the kernel
)

// Get returns a loopback TCP port that is free and reserved for this
// process: no other caller of Get, in this process or another, receives
// it while the process lives. Where no lock file can be made, the port is
// reserved within this process only. Where the kernel's ephemeral range
// cannot be read or leaves no room, Get falls back to a port the kernel
// chose (free a moment ago, not reserved).
func Get() (int, error) {
	spanOnce.Do(func() { lo, hi = span(rangeFile) })
	if hi == 0 {
		return kernelPort()
	}
	mu.Lock()
	defer mu.Unlock()
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		if _, ok := held[port]; ok {
			continue
		}
		f, err := reserve(port)
		switch {
		case errors.Is(err, errHeld):
			continue
		case err != nil:
			// No lock file (TMPDIR read-only or missing): the port is
			// still outside the kernel's range, reserved in this process
			// only.
			f = nil
		}
		if !bindable(port) {
			f.Close()
			continue
		}
		held[port] = f
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d", lo, hi-1)
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

// lockDir is where reservations are kept: one file per port, locked by
// the process holding it. The files stay; a lock ends with its process.
func lockDir() string {
	return filepath.Join(os.TempDir(), "regiond-freeport-"+strconv.Itoa(os.Getuid()))
}

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

package freeport

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		content string
		lo, hi  int
	}{
		{"32768\t60999\n", 20000, 32768}, // Linux's default: below it
		{"10000 60000", 60001, 65536},    // no room below: above it
		{"1024 65000", 0, 0},             // no room either side: the kernel's
		{"32768", 0, 0},
		{"a b", 0, 0},
		{"40000 30000", 0, 0},
	} {
		f := filepath.Join(t.TempDir(), "range")
		if err := os.WriteFile(f, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if lo, hi := span(f); lo != tc.lo || hi != tc.hi {
			t.Errorf("span(%q) = %d, %d; want %d, %d", tc.content, lo, hi, tc.lo, tc.hi)
		}
	}
	if lo, hi := span(filepath.Join(t.TempDir(), "missing")); lo != 0 || hi != 0 {
		t.Errorf("span of a missing file = %d, %d; want 0, 0", lo, hi)
	}
}

// TestGetDistinctOutsideEphemeral: ports are distinct, outside the
// kernel's ephemeral range where it can be read, and can be listened on.
func TestGetDistinctOutsideEphemeral(t *testing.T) {
	elo, ehi := -1, -1
	if b, err := os.ReadFile(rangeFile); err == nil {
		fmt.Sscan(string(b), &elo, &ehi)
	}
	seen := map[int]bool{}
	for range 50 {
		p, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if hi != 0 && p >= elo && p <= ehi {
			t.Errorf("port %d is in the ephemeral range %d-%d", p, elo, ehi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listen on port %d from Get: %v", p, err)
		}
		l.Close()
	}
}

// TestGetSkipsHeldAndBound: with a span of a few ports, Get skips one
// another process reserved and one a listener holds, and says so when the
// span runs out.
func TestGetSkipsHeldAndBound(t *testing.T) {
	if os.Getenv("FREEPORT_HOLD") != "" {
		return // the helper below
	}
	spanOnce.Do(func() { lo, hi = span(rangeFile) })
	if hi == 0 {
		t.Skip("no port range outside the kernel's ephemeral one on this machine")
	}
	// Find 4 consecutive ports nobody holds or listens on, so the test
	// owns the span.
	free := func(port int) bool {
		if _, mine := held[port]; mine || !bindable(port) {
			return false
		}
		f, err := reserve(port)
		if err != nil {
			return false
		}
		f.Close()
		return true
	}
	base := -1
	mu.Lock()
	for p := hi - 4; p >= lo && base < 0; p -= 4 {
		ok := true
		for q := p; q < p+4; q++ {
			ok = ok && free(q)
		}
		if ok {
			base = p
		}
	}
	mu.Unlock()
	if base < 0 {
		t.Fatal("no 4 free consecutive ports")
	}
	// Another process reserves base; a listener binds base+1.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldHelper$")
	cmd.Env = append(os.Environ(), "FREEPORT_HOLD="+strconv.Itoa(base))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	if _, err := reserve(base); !errors.Is(err, errHeld) {
		t.Fatalf("reserve(%d) held by another process: %v; want errHeld", base, err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+1)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	mu.Lock()
	saveLo, saveHi := lo, hi
	lo, hi = base, base+4
	mu.Unlock()
	defer func() { mu.Lock(); lo, hi = saveLo, saveHi; mu.Unlock() }()
	got := map[int]bool{}
	for range 2 {
		p, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		got[p] = true
	}
	if !got[base+2] || !got[base+3] {
		t.Errorf("Get in %d-%d with %d reserved elsewhere and %d bound: %v; want %d and %d", base, base+3, base, base+1, got, base+2, base+3)
	}
	if p, err := Get(); err == nil {
		t.Errorf("Get with the span used up = %d; want an error", p)
	}
}

// TestHoldHelper reserves the port FREEPORT_HOLD names, says "held", and
// keeps it until its stdin closes.
func TestHoldHelper(t *testing.T) {
	v := os.Getenv("FREEPORT_HOLD")
	if v == "" {
		return
	}
	port, _ := strconv.Atoi(v)
	f, err := reserve(port)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer f.Close()
	fmt.Println("held")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// TestGetWithoutLockDir: with no place for lock files, Get still hands out
// distinct ports outside the kernel's range.
func TestGetWithoutLockDir(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", notDir) // os.TempDir: a file, so no lock directory under it
	if _, err := reserve(lowest); err == nil || errors.Is(err, errHeld) {
		t.Fatalf("reserve under a TMPDIR that is a file: %v; want an error other than errHeld", err)
	}
	a, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("Get twice = %d, %d; want distinct ports", a, b)
	}
	if hi != 0 && (a < lo || a >= hi || b < lo || b >= hi) {
		t.Errorf("ports %d, %d; want them in %d-%d", a, b, lo, hi-1)
	}
}

package freeport

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// onLinux fails the test when the package could not set itself up as it
// should on Linux (where CI runs), and skips it elsewhere.
func onLinux(t *testing.T) {
	t.Helper()
	setUp()
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's port range and file locks are read on Linux only")
	}
	if hi == 0 {
		t.Fatalf("no span outside the kernel's ephemeral range (%s)", rangeFile)
	}
	if dir == "" {
		t.Fatal("no usable lock directory under " + os.TempDir())
	}
}

// TestGetDistinctOutsideEphemeral: ports are distinct, in the span outside
// the kernel's ephemeral range, and can be listened on.
func TestGetDistinctOutsideEphemeral(t *testing.T) {
	onLinux(t)
	wantLo, wantHi := span(rangeFile)
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
		if p < wantLo || p >= wantHi {
			t.Errorf("port %d; want it in %d-%d, outside the ephemeral range", p, wantLo, wantHi-1)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listen on port %d from Get: %v", p, err)
		}
		l.Close()
	}
}

// narrow finds n consecutive ports in the span that nobody reserved or
// listens on, returning the locks that keep them so (the caller closes
// them just before its Get), and narrows the span to them until the test
// ends.
func narrow(t *testing.T, n int) (base int, probes []*os.File) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	take := func(port int) (*os.File, bool) {
		if _, mine := held[port]; mine || !bindable(port) {
			return nil, false
		}
		f, err := reserve(dir, port)
		return f, err == nil
	}
	for p := hi - n; p >= lo; p -= n {
		var fs []*os.File
		for q := p; q < p+n; q++ {
			if f, ok := take(q); ok {
				fs = append(fs, f)
			}
		}
		if len(fs) == n {
			saveLo, saveHi := lo, hi
			lo, hi = p, p+n
			t.Cleanup(func() { mu.Lock(); lo, hi = saveLo, saveHi; mu.Unlock() })
			return p, fs
		}
		for _, f := range fs {
			f.Close()
		}
	}
	t.Fatalf("no %d free consecutive ports", n)
	return 0, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// TestGetSkipsHeldAndBound: with a span of 4 ports, Get skips one another
// process reserved and one a listener holds, and says so when the span
// runs out.
func TestGetSkipsHeldAndBound(t *testing.T) {
	if os.Getenv("FREEPORT_HOLD") != "" {
		return // the helper below
	}
	onLinux(t)
	base, probes := narrow(t, 4)
	// Another process reserves base; a listener binds base+1.
	probes[0].Close()
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
	if _, err := reserve(dir, base); !errors.Is(err, errHeld) {
		t.Fatalf("reserve(%d) held by another process: %v; want errHeld", base, err)
	}
	probes[1].Close()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+1)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	closeAll(probes[2:])
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
	setUp()
	port, _ := strconv.Atoi(v)
	f, err := reserve(dir, port)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer f.Close()
	fmt.Println("held")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// TestGetWithoutLockDir: with no lock directory, Get still hands out each
// port once, within the process.
func TestGetWithoutLockDir(t *testing.T) {
	onLinux(t)
	_, probes := narrow(t, 2)
	mu.Lock()
	saveDir := dir
	dir = ""
	mu.Unlock()
	t.Cleanup(func() { mu.Lock(); dir = saveDir; mu.Unlock() })
	closeAll(probes)
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
	if p, err := Get(); err == nil {
		t.Errorf("a third Get from a span of 2 = %d; want an error", p)
	}
}

// TestUsableDir: the lock directory is made 0700 and refused when it is a
// file, a symbolic link, or open to others.
func TestUsableDir(t *testing.T) {
	onLinux(t)
	base := t.TempDir()
	good := filepath.Join(base, "new")
	if err := usableDir(good); err != nil {
		t.Fatalf("a missing directory: %v; want it made", err)
	}
	if fi, err := os.Stat(good); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v; want mode 0700", fi.Mode(), err)
	}
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	link := filepath.Join(base, "link")
	os.Symlink(good, link)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	for _, d := range []string{file, link, open} {
		if err := usableDir(d); err == nil {
			t.Errorf("usableDir(%s) = nil; want it refused", filepath.Base(d))
		}
	}
}

package agent

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/logbuf"
)

// TestGapSocketReplacedByAnotherFileIsReported guards check's word on a
// file put at the socket's path by another hand: it is not the agent's
// to remove or replace, and check says so (logged as an error), rather
// than taking it for its own.
func TestGapSocketReplacedByAnotherFileIsReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "regiond.sock")
	s, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if remade, err := s.check(); remade || err != nil {
		t.Fatalf("check of the agent's own socket: %v, %v", remade, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	remade, err := s.check()
	if remade || err == nil || !strings.Contains(err.Error(), "replaced by another file") {
		t.Fatalf("check with another file at the path: %v, %v; want it reported, not remade", remade, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "x" {
		t.Fatal("the other file was touched")
	}
}

// TestGapSocketWithAFullBacklogIsNotRemoved guards socketInUse: only a
// refused connection makes a socket file stale. A running process whose
// backlog is full (an agent at its connection cap, under a flood) does
// not refuse, it fails the dial otherwise (EAGAIN): its socket is not
// taken from it.
func TestGapSocketWithAFullBacklogIsNotRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "regiond.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	full := false
	for range 16 { // never accepted: the backlog fills
		c, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			if !errorsIsAgain(err) {
				t.Fatalf("dial of a socket whose backlog fills: %v", err)
			}
			full = true
			break
		}
		defer c.Close()
	}
	if !full {
		t.Fatal("the backlog did not fill")
	}
	before, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := listenUnix(path); err == nil {
		s.Close()
		t.Fatal("a socket a running process listens on (its backlog full) taken over")
	}
	if fi, err := os.Lstat(path); err != nil || !os.SameFile(fi, before) {
		t.Fatalf("the running process's socket file after the refused start: %v", err)
	}
}

func errorsIsAgain(err error) bool {
	return strings.Contains(err.Error(), syscall.EAGAIN.Error())
}

// TestGapDeletedSocketMadeAgainWithinTwoSeconds guards keepSocket's
// period: a socket file deleted while the agent runs is made again
// within 2 s (docs/agent.md), and said.
func TestGapDeletedSocketMadeAgainWithinTwoSeconds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "regiond.sock")
	s, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var logs logbuf.Buffer
	a := &Agent{sock: s, log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.keepSocket(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	start := time.Now()
	for {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatal("the deleted socket file not made again within 3 s; docs/agent.md: within 2 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for !strings.Contains(logs.String(), "made again") {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("the socket made again, not said:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGapSnapshotLockFile guards lockSnapshot's file: mode 0600 (another
// user who could open it could hold the lock, and keep every agent from
// starting), and the holder's process id alone in it, also over a longer
// id left by an earlier run.
func TestGapSnapshotLockFile(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	snap := filepath.Join(dir, "table.json")
	f, err := lockSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(f.Name())
	f.Close()
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the lock file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if err := os.WriteFile(f.Name(), []byte("99999999999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err = lockSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := os.ReadFile(f.Name()); string(b) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("the lock file over an earlier run's longer pid: %q; want this process's id alone", b)
	}
}

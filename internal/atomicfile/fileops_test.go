package atomicfile

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// fileOp is one recorded system call of a file replacement.
type fileOp struct {
	call string // create, open-dir, writev, fsync, fsync-dir, rename
	path string // the file (for rename: the source)
	to   string // rename's target
	err  error
}

func (o fileOp) String() string {
	s := o.call + " " + o.path
	if o.to != "" {
		s += " -> " + o.to
	}
	if o.err != nil {
		s += fmt.Sprintf(" (%v)", o.err)
	}
	return s
}

// recordFileOps routes the package's file system calls through a recorder
// for the rest of the test (the defaults do the work) and returns what it
// recorded so far.
func recordFileOps(t *testing.T) func() []fileOp {
	t.Helper()
	var mu sync.Mutex
	var ops []fileOp
	names := map[int]string{} // open descriptors
	dirs := map[int]bool{}
	add := func(o fileOp) {
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
	}
	def := sys
	t.Cleanup(func() { sys = def })
	sys = fileCalls{
		open: func(path string, mode int, perm uint32) (int, error) {
			fd, err := def.open(path, mode, perm)
			call := "create"
			if mode&syscall.O_DIRECTORY != 0 {
				call = "open-dir"
			}
			if err == nil {
				mu.Lock()
				names[fd], dirs[fd] = path, call == "open-dir"
				mu.Unlock()
			}
			add(fileOp{call: call, path: path, err: err})
			return fd, err
		},
		writev: func(fd int, iovs [][]byte) (int, error) {
			n, err := def.writev(fd, iovs)
			mu.Lock()
			name := names[fd]
			mu.Unlock()
			add(fileOp{call: "writev", path: name, err: err})
			return n, err
		},
		fsync: func(fd int) error {
			err := def.fsync(fd)
			mu.Lock()
			name, dir := names[fd], dirs[fd]
			mu.Unlock()
			call := "fsync"
			if dir {
				call = "fsync-dir"
			}
			add(fileOp{call: call, path: name, err: err})
			return err
		},
		rename: func(from, to string) error {
			err := def.rename(from, to)
			add(fileOp{call: "rename", path: from, to: to, err: err})
			return err
		},
	}
	return func() []fileOp {
		mu.Lock()
		defer mu.Unlock()
		return append([]fileOp(nil), ops...)
	}
}

// checkAtomicReplace checks that the last replacement of path in ops is
// atomic and durable: a temp file created in path's own directory (a
// rename across file systems fails, and one across directories is not
// covered by the directory's fsync), written, fsynced, then renamed to
// path (after its fsync: else a crash can leave an empty file), then the
// directory fsynced (else the rename itself can be lost).
func checkAtomicReplace(t *testing.T, ops []fileOp, path string) {
	t.Helper()
	dir := filepath.Dir(path)
	fail := func(format string, args ...any) {
		t.Helper()
		var b strings.Builder
		for _, o := range ops {
			fmt.Fprintf(&b, "\n  %v", o)
		}
		t.Fatalf("replace %s: "+format+"; file operations:%s", append(append([]any{path}, args...), b.String())...)
	}
	rename := -1
	for i, o := range ops {
		if o.call == "rename" && o.to == path && o.err == nil {
			rename = i
		}
	}
	if rename < 0 {
		fail("no rename to it")
	}
	tmp := ops[rename].path
	if filepath.Dir(tmp) != dir {
		fail("temp file %s is not in the target directory %s", tmp, dir)
	}
	created, wrote, synced := -1, -1, -1
	for i, o := range ops[:rename] {
		if o.path != tmp || o.err != nil {
			continue
		}
		switch o.call {
		case "create":
			created, wrote, synced = i, -1, -1
		case "writev":
			if synced >= 0 {
				fail("temp file written after its fsync")
			}
			wrote = i
		case "fsync":
			synced = i
		}
	}
	switch {
	case created < 0:
		fail("temp file %s was not created in this run", tmp)
	case wrote < 0:
		fail("temp file not written before the rename")
	case synced < 0 || synced < wrote:
		fail("temp file not fsynced after its write and before the rename")
	}
	for _, o := range ops[rename+1:] {
		if o.call == "fsync-dir" && o.path == dir && o.err == nil {
			return
		}
	}
	fail("directory %s not fsynced after the rename", dir)
}

// TestWriteFileOperationOrder: WriteFile creates its temp file in the
// target's directory, writes, fsyncs, renames, then fsyncs the directory.
func TestWriteFileOperationOrder(t *testing.T) {
	ops := recordFileOps(t)
	path := filepath.Join(t.TempDir(), "sub", "table.json")
	if err := WriteFile(path, []byte(`{"revision":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	checkAtomicReplace(t, ops(), path)
}

// TestPreparedFileOperationOrder: the writer's path keeps the order and
// the directory both through its prepared temp file and through the
// fallback it takes when the prepared file is gone (its rename fails: a
// fresh temp file is made, which must also be in the target directory,
// not in os.TempDir(), from where a rename to /dev/shm fails).
func TestPreparedFileOperationOrder(t *testing.T) {
	ops := recordFileOps(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	p := New(path, 0o644, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(p.Close)

	p.Start()
	if p.next == nil {
		t.Fatal("no temp file prepared")
	}
	prepared := p.next.name
	if err := p.Write([]byte(`{"revision":`), []byte(`1}`)); err != nil {
		t.Fatal(err)
	}
	got := ops()
	checkAtomicReplace(t, got, path)
	if r := lastRename(got, path); r != prepared {
		t.Fatalf("renamed %s, want the prepared temp file %s", r, prepared)
	}

	// The prepared temp file is removed behind the writer's back.
	if p.next == nil {
		t.Fatal("no next temp file prepared")
	}
	if err := os.Remove(p.next.name); err != nil {
		t.Fatal(err)
	}
	gone := p.next.name
	if err := p.Write([]byte(`{"revision":2}`)); err != nil {
		t.Fatal(err)
	}
	got = ops()
	checkAtomicReplace(t, got, path)
	if r := lastRename(got, path); r == gone || r == prepared {
		t.Fatalf("renamed %s: want a fresh temp file", r)
	}
	if b, err := ReadFile(path); err != nil || string(b) != `{"revision":2}` {
		t.Fatalf("file after the fallback: %q, %v", b, err)
	}
}

// lastRename returns the source of the last successful rename to path.
func lastRename(ops []fileOp, path string) string {
	from := ""
	for _, o := range ops {
		if o.call == "rename" && o.to == path && o.err == nil {
			from = o.path
		}
	}
	return from
}

package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// faults routes the package's system calls to the defaults for the rest
// of the test, except that the calls named in fail (create, writev, fsync,
// open-dir, fsync-dir, rename: as recordFileOps names them) fail with
// their errno instead, while set. Set, it returns a function that clears
// them.
func faults(t *testing.T) (set func(fail map[string]error)) {
	t.Helper()
	var mu sync.Mutex
	fail := map[string]error{}
	dirs := map[int]bool{}
	get := func(call string) error {
		mu.Lock()
		defer mu.Unlock()
		return fail[call]
	}
	def := sys
	t.Cleanup(func() { sys = def })
	sys = fileCalls{
		open: func(path string, mode int, perm uint32) (int, error) {
			call := "create"
			if mode&syscall.O_DIRECTORY != 0 {
				call = "open-dir"
			}
			if err := get(call); err != nil {
				return -1, err
			}
			fd, err := def.open(path, mode, perm)
			if err == nil {
				mu.Lock()
				dirs[fd] = call == "open-dir"
				mu.Unlock()
			}
			return fd, err
		},
		writev: func(fd int, iovs [][]byte) (int, error) {
			if err := get("writev"); err != nil {
				return 0, err
			}
			return def.writev(fd, iovs)
		},
		fsync: func(fd int) error {
			mu.Lock()
			call := "fsync"
			if dirs[fd] {
				call = "fsync-dir"
			}
			mu.Unlock()
			if err := get(call); err != nil {
				return err
			}
			return def.fsync(fd)
		},
		rename: func(from, to string) error {
			if err := get("rename"); err != nil {
				return err
			}
			return def.rename(from, to)
		},
	}
	return func(f map[string]error) {
		mu.Lock()
		fail = f
		mu.Unlock()
	}
}

// checkContent fails the test unless path holds want.
func checkContent(t *testing.T, path, want string) {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || string(b) != want {
		t.Fatalf("%s holds %q (%v), want %q", path, b, err, want)
	}
}

// TestFailedWriteReportedAndLeavesNoTempFile protects the promise that a
// write that fails before its rename (writev, the temp file's fsync, the
// rename itself) returns that error, leaves the old file as it was (never
// a file renamed in unsynced or half written) and leaves no temp file
// behind, through WriteFile and through a File's prepared temp file and
// its fallback; and that the File writes again once the fault is gone.
func TestFailedWriteReportedAndLeavesNoTempFile(t *testing.T) {
	set := faults(t)
	for _, call := range []string{"writev", "fsync", "rename"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "table.json")
		if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := New(path, 0o644, Options{Logger: discardLogger})
		p.Start()
		if p.next == nil {
			t.Fatalf("%s: no temp file prepared", call)
		}
		set(map[string]error{call: syscall.EIO})
		if err := WriteFile(path, []byte("new, by WriteFile"), 0o644); !errors.Is(err, syscall.EIO) {
			t.Errorf("%s failing: WriteFile = %v, want the EIO", call, err)
		}
		if err := p.Write([]byte("new, by a File")); !errors.Is(err, syscall.EIO) {
			t.Errorf("%s failing: File.Write = %v, want the EIO", call, err)
		}
		checkContent(t, path, "old")
		if names := tempNames(dir, "table.json"); len(names) != 0 {
			t.Fatalf("%s failing: temp files %v left behind", call, names)
		}
		set(nil)
		if err := p.Write([]byte("new")); err != nil {
			t.Fatalf("%s no longer failing: %v", call, err)
		}
		checkContent(t, path, "new")
		p.Close()
	}
}

// TestDirectoryFsyncFailureReported protects the promise that a write
// whose directory cannot be opened or fsynced after the rename reports it
// (the caller writes again: the rename may not survive a crash), through
// WriteFile, a File's Write, and a WriteDeferred's Finish, while the new
// file is in place; and that EINVAL, which file systems that cannot fsync
// a directory return, is not a failure.
func TestDirectoryFsyncFailureReported(t *testing.T) {
	set := faults(t)
	for _, f := range []struct {
		call string
		err  error
	}{{"fsync-dir", syscall.EIO}, {"open-dir", syscall.EACCES}, {"fsync-dir", syscall.EINVAL}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "table.json")
		p := New(path, 0o644, Options{Logger: discardLogger})
		p.Start()
		set(map[string]error{f.call: f.err})
		check := func(what string, err error, content string) {
			t.Helper()
			if f.err == syscall.EINVAL {
				if err != nil {
					t.Errorf("%s with the directory's fsync unsupported (EINVAL) = %v, want nil", what, err)
				}
			} else if !errors.Is(err, f.err) {
				t.Errorf("%s with %s failing = %v, want its %v", what, f.call, err, f.err)
			}
			checkContent(t, path, content)
		}
		check("WriteFile", WriteFile(path, []byte("1"), 0o644), "1")
		check("File.Write", p.Write([]byte("2")), "2")
		if err := p.WriteDeferred([]byte("3")); err != nil {
			t.Fatalf("WriteDeferred, up to the rename: %v", err)
		}
		check("Finish", p.Finish(), "3")
		set(nil)
		if err := p.Write([]byte("4")); err != nil {
			t.Fatalf("%s no longer failing: %v", f.call, err)
		}
		p.Close()
	}
}

// TestTempFileNeverOpensWhatIsThere protects the temp file's exclusive
// creation (O_EXCL, O_NOFOLLOW) and its retry under another name: a
// symbolic link or a file another hand put at the temp file's name is
// neither written through nor reused; the write goes to a fresh name.
func TestTempFileNeverOpensWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	precious := filepath.Join(dir, "precious")
	if err := os.WriteFile(precious, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	ops := recordFileOps(t)
	rec := sys
	var planted []string
	sys.open = func(name string, mode int, perm uint32) (int, error) {
		if mode&syscall.O_CREAT != 0 && len(planted) < 2 {
			// The first name becomes a link to a precious file, the
			// second a file of someone else's.
			var err error
			if len(planted) == 0 {
				err = os.Symlink(precious, name)
			} else {
				err = os.WriteFile(name, []byte("planted"), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			planted = append(planted, name)
		}
		return rec.open(name, mode, perm)
	}
	if err := WriteFile(path, []byte("table"), 0o644); err != nil {
		t.Fatalf("WriteFile with the first temp names taken: %v", err)
	}
	checkContent(t, path, "table")
	checkContent(t, precious, "precious")
	checkContent(t, planted[1], "planted")
	if target, err := os.Readlink(planted[0]); err != nil || target != precious {
		t.Fatalf("the link at the first temp name changed: %q, %v", target, err)
	}
	if r := lastRename(ops(), path); slices.Contains(planted, r) || r == "" {
		t.Fatalf("renamed %q into place, want a fresh temp file (not one of %v)", r, planted)
	}
}

// TestEnsureDirRefusalStopsTheWrite protects Options.EnsureDir's say: when
// the directory is missing and EnsureDir refuses it (the agent's
// safedir check), the write fails with that refusal and creates nothing.
func TestEnsureDirRefusalStopsTheWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	refused := errors.New("snapshot directory refused")
	p := New(filepath.Join(dir, "table.json"), 0o644, Options{
		Logger:    discardLogger,
		EnsureDir: func(string) error { return refused },
	})
	defer p.Close()
	if err := p.Write([]byte("x")); !errors.Is(err, refused) {
		t.Fatalf("Write with EnsureDir refusing = %v, want the refusal", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused directory exists after the write (%v)", err)
	}
}

// TestStartRemovesOnlyItsOwnLeftovers protects removeLeftovers' bounds:
// the regular files .<base>.tmp-* go; another file's temp files, a
// directory or a symbolic link of such a name, and other files stay.
func TestStartRemovesOnlyItsOwnLeftovers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	for _, name := range []string{"table.json", ".table.json.tmp-1", ".table.idx.tmp-2", ".table.json.lock", ".hidden"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".table.json.tmp-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, ".hidden"), filepath.Join(dir, ".table.json.tmp-link")); err != nil {
		t.Fatal(err)
	}
	p := New(path, 0o644, Options{Logger: discardLogger})
	p.Start()
	p.Close()
	want := []string{".hidden", ".table.idx.tmp-2", ".table.json.lock", ".table.json.tmp-dir", ".table.json.tmp-link", "table.json"}
	if got := dirNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after Start and Close: %v, want %v", got, want)
	}
}

// openFDs returns the number of the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

// TestWritesHoldNoDescriptors protects the descriptors' lifetimes: a File
// holds the current file and its prepared temp file, and releases each
// replaced one, so many writes (plain, deferred, and through the fallback
// when the prepared temp file was lost) leave as many descriptors open as
// one, and Close releases all.
func TestWritesHoldNoDescriptors(t *testing.T) {
	dir := t.TempDir()
	p := New(filepath.Join(dir, "table.json"), 0o644, Options{Logger: discardLogger})
	before := openFDs(t)
	if err := p.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	after1 := openFDs(t)
	for i := range 20 {
		if i%5 == 4 { // the prepared temp file lost: the fallback writes
			if err := p.Finish(); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(p.next.name); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if i%2 == 0 {
			err = p.Write([]byte("again"))
		} else if err = p.WriteDeferred([]byte("deferred")); err == nil && i%4 == 1 {
			err = p.Finish()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Finish(); err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t); n != after1 {
		t.Fatalf("%d descriptors open after 21 writes, %d after one", n, after1)
	}
	p.Close()
	if n := openFDs(t); n != before {
		t.Fatalf("%d descriptors open after Close, %d before the File", n, before)
	}
}

// TestWriteDeferredLeavesTheRestToFinish protects WriteDeferred's split:
// the new file is in place at once, the directory's fsync and the next
// temp file wait for Finish (or the next write, which finishes first),
// Pending says so, and a Finish with nothing pending does nothing.
func TestWriteDeferredLeavesTheRestToFinish(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	ops := recordFileOps(t)
	p := New(path, 0o644, Options{Logger: discardLogger})
	defer p.Close()
	p.Start()
	dirSyncs := func() int {
		n := 0
		for _, o := range ops() {
			if o.call == "fsync-dir" && o.err == nil {
				n++
			}
		}
		return n
	}
	if err := p.WriteDeferred([]byte("1")); err != nil {
		t.Fatal(err)
	}
	checkContent(t, path, "1")
	if !p.Pending() || dirSyncs() != 0 || len(tempNames(dir, "table.json")) != 0 {
		t.Fatalf("after WriteDeferred: pending %v, %d directory fsyncs, temp files %v; want pending, none, none",
			p.Pending(), dirSyncs(), tempNames(dir, "table.json"))
	}
	if err := p.Finish(); err != nil {
		t.Fatal(err)
	}
	checkAtomicReplace(t, ops(), path)
	if p.Pending() || dirSyncs() != 1 || len(tempNames(dir, "table.json")) != 1 {
		t.Fatalf("after Finish: pending %v, %d directory fsyncs, temp files %v; want not pending, one, one prepared",
			p.Pending(), dirSyncs(), tempNames(dir, "table.json"))
	}
	n := len(ops())
	if err := p.Finish(); err != nil || len(ops()) != n {
		t.Fatalf("Finish with nothing pending: %v, operations %v", err, ops()[n:])
	}
	// Two deferred writes: the second finishes the first before its own.
	for _, c := range []string{"2", "3"} {
		if err := p.WriteDeferred([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	checkContent(t, path, "3")
	if !p.Pending() || dirSyncs() != 2 {
		t.Fatalf("after two deferred writes: pending %v, %d directory fsyncs; want pending, 2", p.Pending(), dirSyncs())
	}
	if err := p.Finish(); err != nil {
		t.Fatal(err)
	}
	if names := tempNames(dir, "table.json"); dirSyncs() != 3 || len(names) != 1 {
		t.Fatalf("after the last Finish: %d directory fsyncs, temp files %v; want 3, one prepared", dirSyncs(), names)
	}
}

// TestReadFileRefusesWhatIsNoFile: a FIFO put at a path ReadFile reads
// (the agent reads --snapshot every minute to copy it) is refused at once,
// naming it, instead of blocking until a writer opens it; a directory is
// refused the same way.
func TestReadFileRefusesWhatIsNoFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), path) {
				t.Errorf("ReadFile(%s): %v; want it refused as not a regular file, naming it", path, err)
			}
		case <-time.After(5 * time.Second):
			// Let the blocked open go: a writer comes.
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			<-done
			t.Fatalf("ReadFile(%s) still blocked after 5 s", path)
		}
	}
}

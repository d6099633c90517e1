package snapshot

import (
	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/routing"

	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// dirNames returns the sorted names in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// tempNames returns the temp files of the snapshot base in dir.
func tempNames(dir, base string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "."+base+".tmp-") {
			names = append(names, e.Name())
		}
	}
	return names
}

// waitPrepared waits until the writer's next temp file exists and returns
// its name.
func waitPrepared(t *testing.T, dir, base string) string {
	t.Helper()
	for i := 0; i < 500; i++ {
		if names := tempNames(dir, base); len(names) == 1 {
			return names[0]
		} else if len(names) > 1 {
			t.Fatalf("%d temp files, want one prepared: %v", len(names), names)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no temp file was prepared")
	return ""
}

// startWriter runs a writer until the returned stop is called (or the test
// ends).
func startWriter(t *testing.T, cfg Config) (*Writer, func()) {
	t.Helper()
	w := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return w, stop
}

func TestWriterLeavesNoTempFileOnExit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	src := newSource()
	_, stop := startWriter(t, Config{Path: path, Source: src})
	src.set(table(1, 50))
	waitRevision(t, path, 1)
	waitPrepared(t, dir, "table.json") // there is a prepared file to remove
	stop()
	if got := dirNames(t, dir); !slices.Equal(got, []string{"table.idx", "table.json"}) {
		t.Fatalf("directory after the writer stopped: %v, want only table.idx and table.json", got)
	}
}

func TestWriterRemovesLeftoverTempFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	leftovers := []string{".table.json.tmp-xyz", ".table.json.tmp-123456", ".table.idx.tmp-abc"}
	keep := []string{".other.json.tmp-1", ".table.json.tmp", ".table.json.tmpx", "other.json", "table.json.tmp-1"}
	for _, name := range append(slices.Clone(leftovers), keep...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("crashed"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src := newSource()
	_, stop := startWriter(t, Config{Path: path, Source: src})
	src.set(table(1, 50))
	waitRevision(t, path, 1)
	for _, name := range leftovers {
		if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("leftover %s still there after the first write (err %v)", name, err)
		}
	}
	stop()
	want := append(slices.Clone(keep), "table.idx", "table.json")
	slices.Sort(want)
	if got := dirNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf("directory = %v, want %v", got, want)
	}
}

func TestWriterSurvivesLostTempFile(t *testing.T) {
	// removeAll is os.RemoveAll of a directory the writer may be preparing
	// its next temp file in (the index's, after the table's) meanwhile:
	// one made between RemoveAll's listing and its rmdir fails it with
	// "directory not empty" (seen in CI), so it is tried again.
	removeAll := func(dir string) error {
		var err error
		for range 20 {
			if err = os.RemoveAll(dir); err == nil {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
		}
		return err
	}
	for name, lose := range map[string]func(dir, tmp string) error{
		"temp file removed": func(dir, tmp string) error { return os.Remove(filepath.Join(dir, tmp)) },
		"directory removed": func(dir, tmp string) error { return removeAll(dir) },
		"directory recreated": func(dir, tmp string) error {
			if err := removeAll(dir); err != nil {
				return err
			}
			return os.Mkdir(dir, 0o755)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "shm")
			path := filepath.Join(dir, "table.json")
			src := newSource()
			w, stop := startWriter(t, Config{Path: path, Source: src})
			src.set(table(1, 50))
			waitRevision(t, path, 1)
			tmp := waitPrepared(t, dir, "table.json")
			if err := lose(dir, tmp); err != nil {
				t.Fatal(err)
			}
			want := table(2, 70)
			src.set(want)
			waitRevision(t, path, 2)
			if n := testutil.ToFloat64(w.outs[0].errors); n != 0 {
				t.Fatalf("%v failed writes, want the write to fall back to a fresh temp file", n)
			}
			got, err := atomicfile.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			wantJSON, err := want.JSONWith(nil, routing.JSONHeader{WrittenAt: writtenAt(t, got)})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, wantJSON) {
				t.Fatalf("content = %s\nwant %s", got, wantJSON)
			}
			// The next write uses a newly prepared file.
			waitPrepared(t, dir, "table.json")
			src.set(table(3, 20))
			waitRevision(t, path, 3)
			stop()
			if got := dirNames(t, dir); !slices.Equal(got, []string{"table.idx", "table.json"}) {
				t.Fatalf("directory after the writer stopped: %v, want only table.idx and table.json", got)
			}
		})
	}
}

func TestWriterRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "table.json")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	w, stop := startWriter(t, Config{Path: path, Source: src})
	src.set(table(1, 50))
	for i := 0; i < 500 && testutil.ToFloat64(w.outs[0].errors) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if n := testutil.ToFloat64(w.outs[0].errors); n == 0 {
		t.Fatal("writing through a symlink did not fail")
	}
	if n := testutil.ToFloat64(w.outs[0].writes); n != 0 {
		t.Fatalf("%v writes through a symlink", n)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink was replaced: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Fatalf("symlink target changed to %q", b)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"elsewhere", "table.json"}) {
		t.Fatalf("directory = %v, want only the target and the link", got)
	}
}

func TestModeIgnoresUmask(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	checkMode := func(path string) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s: mode = %v, want 0644 under umask 077", path, fi.Mode().Perm())
		}
	}

	// The writer: its first prepared file is created at start.
	path := filepath.Join(dir, "table.json")
	src := newSource()
	startWriter(t, Config{Path: path, Source: src})
	src.set(table(1, 50))
	waitRevision(t, path, 1)
	checkMode(path)
	checkMode(filepath.Join(dir, waitPrepared(t, dir, "table.json")))
	src.set(table(2, 60))
	waitRevision(t, path, 2)
	checkMode(path)
}

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestSettledFollowsARevisionThatWentBack: once etcd is restored from a
// backup (the tables' change revisions go back), a change is settled
// when its table is written, not at once because a higher revision was
// settled before the restore (the concurrency review: the status key then
// did not wait for the file).
func TestSettledFollowsARevisionThatWentBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	src := newSource()
	w, _ := startWriter(t, Config{Path: path, Source: src})
	src.set(table(50, 50))
	waitRevision(t, path, 50)
	deadline := time.Now().Add(10 * time.Second)             // a hang guard, not a timing assertion
	for ok := false; !ok; time.Sleep(5 * time.Millisecond) { // settled once its write is finished
		if ok, _ = w.Settled(50); !ok && time.Now().After(deadline) {
			t.Fatal("revision 50, written, was never settled")
		}
	}
	_, next := w.Settled(0)
	src.set(table(20, 30)) // restored: a lower revision, other content
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Fatal("the table of the restore was never settled")
	}
	if got := readRevision(t, path); got != 20 {
		t.Fatalf("after the restore's table was settled, the file holds revision %d, want 20", got)
	}
	if ok, _ := w.Settled(20); !ok {
		t.Fatal("revision 20 written after the restore, not settled")
	}
	if ok, _ := w.Settled(21); ok {
		t.Fatal("revision 21 counted as settled before any table of it was written (the one before the restore was 50)")
	}
}

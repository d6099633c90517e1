package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

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

// tempNames returns the temp files of base in dir.
func tempNames(dir, base string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix(base)) {
			names = append(names, e.Name())
		}
	}
	return names
}

// shmDir returns a directory on /dev/shm (else a temp directory) removed
// after the benchmark.
func shmDir(b *testing.B) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "atomicfile-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return b.TempDir()
}

// TestInMemory: /dev/shm (tmpfs, where /proc/mounts lists it so) is in
// memory, and a missing directory is an error.
func TestInMemory(t *testing.T) {
	if _, err := InMemory(filepath.Join(t.TempDir(), "missing")); err == nil && runtime.GOOS == "linux" {
		t.Error("a missing directory: no error")
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "/dev/shm" {
			continue
		}
		got, err := InMemory("/dev/shm")
		if want := f[2] == "tmpfs" || f[2] == "ramfs"; err != nil || got != want {
			t.Errorf("/dev/shm (%s): in memory %v, %v; want %v", f[2], got, err, want)
		}
	}
}

func TestWriteFileAtomicReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "table.json")
	for _, content := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("ReadFile = %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode = %v, want 0644", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temp files left)", len(ents))
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "table.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(link, []byte("x"), 0o644); !errors.Is(err, ErrSymlink) {
		t.Fatalf("WriteFile through a symlink: err = %v, want ErrSymlink", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Fatalf("symlink target changed to %q", b)
	}
	if _, err := ReadFile(link); !errors.Is(err, ErrSymlink) {
		t.Fatalf("ReadFile through a symlink: err = %v, want ErrSymlink", err)
	}
}

// TestWritevAllShortWrites: writevAll writes everything, in order, when
// each call writes only a few bytes (or is interrupted), gives at most
// iovMax buffers per call, and leaves the caller's segments as they were.
func TestWritevAllShortWrites(t *testing.T) {
	var many [][]byte
	for i := range 2500 {
		many = append(many, []byte(fmt.Sprintf("<%d>", i)))
		if i%7 == 0 {
			many = append(many, nil)
		}
	}
	for name, segs := range map[string][][]byte{
		"none":           nil,
		"empty":          {nil, {}, nil},
		"one":            {[]byte("hello, world")},
		"several":        {[]byte(`{"revision":1`), nil, []byte(`,"pools":{}`), []byte("x"), {}, []byte(`,"effective":{"PL":{}}}`)},
		"beyond IOV_MAX": many,
	} {
		for _, step := range []int{1, 2, 3, 7, 1 << 20} {
			orig := make([][]byte, len(segs))
			for i, s := range segs {
				orig[i] = slices.Clone(s)
			}
			var out bytes.Buffer
			calls := 0
			err := writevAll(segs, func(iovs [][]byte) (int, error) {
				calls++
				if len(iovs) > iovMax {
					t.Fatalf("%s: %d buffers in one call", name, len(iovs))
				}
				if len(iovs) == 0 || len(iovs[0]) == 0 {
					t.Fatalf("%s: call %d starts with nothing to write", name, calls)
				}
				if calls%5 == 0 {
					return 0, syscall.EINTR
				}
				n := 0
				for _, b := range iovs {
					k := min(len(b), step-n)
					out.Write(b[:k])
					if n += k; n == step {
						break
					}
				}
				return n, nil
			})
			if err != nil {
				t.Fatalf("%s, %d bytes per call: %v", name, step, err)
			}
			if want := bytes.Join(segs, nil); !bytes.Equal(out.Bytes(), want) {
				t.Fatalf("%s, %d bytes per call: wrote %q, want %q", name, step, out.Bytes(), want)
			}
			for i := range segs {
				if !bytes.Equal(segs[i], orig[i]) || len(segs[i]) != len(orig[i]) {
					t.Fatalf("%s: segment %d changed to %q", name, i, segs[i])
				}
			}
		}
	}
}

func TestWritevAllErrors(t *testing.T) {
	segs := [][]byte{[]byte("abc"), []byte("def")}
	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		writev func([][]byte) (int, error)
		want   error
	}{
		"error":           {func([][]byte) (int, error) { return 0, boom }, boom},
		"nothing written": {func([][]byte) (int, error) { return 0, nil }, io.ErrShortWrite},
		"error after some": {func() func([][]byte) (int, error) {
			calls := 0
			return func([][]byte) (int, error) {
				if calls++; calls == 1 {
					return 4, nil
				}
				return 0, syscall.ENOSPC
			}
		}(), syscall.ENOSPC},
	} {
		if err := writevAll(segs, tc.writev); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
	if err := writevAll(segs, func([][]byte) (int, error) { return 100, nil }); err == nil {
		t.Error("writev reporting more than given: no error")
	}
}

// TestWriteFileSegments: the real writev, through both the fresh and the
// prepared temp file, with more segments than one call takes.
func TestWriteFileSegments(t *testing.T) {
	var segs [][]byte
	for i := range 3000 {
		segs = append(segs, bytes.Repeat([]byte{'a' + byte(i%26)}, i%50))
	}
	want := bytes.Join(segs, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "table.json")
	if err := writeFile(path, segs, 0o644, MkdirAll); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("writeFile: %d bytes, %v; want %d bytes equal to the segments", len(got), err, len(want))
	}
	p := New(filepath.Join(dir, "table.json"), 0o644, Options{Logger: discardLogger})
	defer p.Close()
	for i := 0; i < 3; i++ {
		if err := p.Write(segs[i:]...); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadFile(p.path); err != nil || !bytes.Equal(got, bytes.Join(segs[i:], nil)) {
			t.Fatalf("prepared write %d: %d bytes, %v", i, len(got), err)
		}
	}
}

func TestPreparedFileSizes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	p := New(path, 0o644, Options{Logger: discardLogger})
	p.Start()
	defer p.Close()
	canPreallocate := runtime.GOOS == "linux" && probePreallocate(t, dir)
	for i, n := range []int{100_000, 10, 50_000, 0, 95_614, 1, 200_000, 4096, 4095} {
		if p.next == nil {
			t.Fatalf("write %d: no temp file prepared", i)
		}
		data := bytes.Repeat([]byte{'A' + byte(i)}, n)
		if err := p.Write(data); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("write %d: file holds %d bytes (%.10q…), want %d bytes of %c", i, len(got), got, n, 'A'+byte(i))
		}
		if names := tempNames(dir, "table.json"); len(names) != 1 {
			t.Fatalf("write %d: temp files %v, want the one prepared", i, names)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(p.next.fd, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != 0 {
			t.Fatalf("prepared file size %d, want 0", st.Size)
		}
		if canPreallocate && st.Blocks*512 < int64(n) {
			t.Fatalf("write %d: prepared file has %d bytes of blocks, want >= %d", i, st.Blocks*512, n)
		}
	}
	p.Close()
	if p.next != nil || p.hold != -1 {
		t.Fatalf("after close: next %v, hold %d; want none", p.next, p.hold)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"table.json"}) {
		t.Fatalf("directory after close: %v, want only table.json", got)
	}
}

// probePreallocate reports whether the file system under dir supports
// preallocation.
func probePreallocate(t *testing.T, dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return preallocate(int(f.Fd()), 8192) == nil
}

// BenchmarkWrite compares WriteFile (a fresh temp file per write) with the
// writer's prepared temp file, for a snapshot-sized payload on /dev/shm.
// "prepared" is the whole call (including freeing the replaced file, the
// directory fsync and preparing the next file); "prepared-critical" is
// until the rename, which makes the new file visible.
func BenchmarkWrite(b *testing.B) {
	data := bytes.Repeat([]byte(`{"pool":"a","weight":50},`), 95_614/25+1)[:95_614]
	// prepared is a prepared file on /dev/shm that has written data once.
	prepared := func(b *testing.B) *File {
		p := New(filepath.Join(shmDir(b), "table.json"), 0o644, Options{Logger: discardLogger})
		b.Cleanup(p.Close)
		if err := p.Write(data); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data)))
		return p
	}
	b.Run("WriteFile", func(b *testing.B) {
		path := filepath.Join(shmDir(b), "table.json")
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := WriteFile(path, data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prepared", func(b *testing.B) {
		p := prepared(b)
		for b.Loop() {
			if err := p.Write(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prepared-critical", func(b *testing.B) {
		p := prepared(b)
		for b.Loop() {
			t := p.next
			p.next = nil
			if t == nil {
				b.Fatal("no temp file prepared")
			}
			if err := refuseSymlink(p.path); err != nil {
				b.Fatal(err)
			}
			if err := t.commit(p.path, [][]byte{data}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := syncDir(p.dir); err != nil {
				b.Fatal(err)
			}
			p.prepare(int64(len(data)))
			b.StartTimer()
		}
	})
}

// TestFileRefusesSymlink: a File does not write through a symlink at its
// path, not even through its prepared temp file.
func TestFileRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "table.json")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	p := New(path, 0o644, Options{Logger: discardLogger})
	p.Start()
	defer p.Close()
	if p.next == nil {
		t.Fatal("no temp file prepared")
	}
	if err := p.Write([]byte("x")); !errors.Is(err, ErrSymlink) {
		t.Fatalf("write through a symlink: err = %v, want ErrSymlink", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Fatalf("symlink target changed to %q", b)
	}
	if err := WriteFile(path, []byte("x"), 0o644); !errors.Is(err, ErrSymlink) {
		t.Fatalf("WriteFile through a symlink: err = %v, want ErrSymlink", err)
	}
}

// TestModeIgnoresUmask: the prepared path, the fresh-temp path and
// WriteFile all give the file the mode asked for, whatever the umask.
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
	p := New(filepath.Join(dir, "p", "table.json"), 0o644, Options{Logger: discardLogger})
	defer p.Close()
	for i := 0; i < 2; i++ {
		if err := p.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		checkMode(p.Path())
		if p.next == nil {
			t.Fatal("no temp file prepared")
		}
		checkMode(p.next.name)
	}
	plain := filepath.Join(dir, "plain", "table.json")
	if err := WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkMode(plain)
}

// TestWritevAllocatesNothing: a write of many segments builds no argument
// array per call (the snapshot of a table of thousands of pools is
// thousands of segments, written many times a second in a burst).
func TestWritevAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("race builds write through unix.Writev, which allocates; this test runs without -race")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "sink"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	segs := make([][]byte, 3000)
	for i := range segs {
		segs[i] = []byte("segment,")
	}
	fd := int(f.Fd())
	allocs := testing.AllocsPerRun(20, func() {
		if err := writevAll(segs, func(iovs [][]byte) (int, error) { return writev(fd, iovs) }); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("writing %d segments allocated %.0f times; want no array per call", len(segs), allocs)
	}
}

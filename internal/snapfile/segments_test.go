package snapfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/routing"
)

// exampleKVs returns the example fleet (examples/routing.yaml, ~94 KB of
// table JSON) as etcd values at revision 1.
func exampleKVs(tb testing.TB) []routing.KV {
	tb.Helper()
	b, err := os.ReadFile("../../examples/routing.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := routing.ParseConfig(b)
	if err != nil {
		tb.Fatal(err)
	}
	vals, err := cfg.Values()
	if err != nil {
		tb.Fatal(err)
	}
	kvs := make([]routing.KV, 0, len(vals))
	for k, v := range vals {
		kvs = append(kvs, routing.KV{Key: k, Value: v, ModRevision: 1})
	}
	return kvs
}

// changedTables returns n tables of the example fleet, each the previous
// one updated by one put of routes/PL (a new weight), as the mirror makes
// them, and already rendered once (encoded).
func changedTables(tb testing.TB, n int, now time.Time) []*routing.Table {
	tb.Helper()
	opts := routing.CompileOptions{Now: now, Start: now}
	t := routing.Compile(1, exampleKVs(tb), nil, opts)
	out := []*routing.Table{t}
	for rev := int64(2); len(out) < n; rev++ {
		w := int(rev) % 101
		ev := routing.Event{KV: routing.KV{Key: "routes/PL", ModRevision: rev,
			Value: fmt.Appendf(nil, `{"targets":[{"pool":"eu-central","weight":%d},{"pool":"eu-west","weight":%d}]}`, w, 100-w)}}
		if t = routing.Update(t, rev, []routing.Event{ev}, opts); t == nil {
			tb.Fatal("Update refused the table")
		}
		out = append(out, t)
	}
	for _, t := range out {
		if _, err := t.JSON(now); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// shmDir returns a directory on /dev/shm (tmpfs, where the agent writes
// its snapshot), or a test temp directory.
func shmDir(b *testing.B) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "snapfile-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return b.TempDir()
}

// BenchmarkWriterChange is the writer's work per change of the example
// fleet on /dev/shm: render the table (written_at and synced_at in its
// header), compare it with the last file, and
// replace the file through the prepared temp file (write, fsync, rename,
// directory fsync, next temp file prepared).
func BenchmarkWriterChange(b *testing.B) {
	now := time.Now()
	tables := changedTables(b, 64, now)
	src := newSource()
	src.synced(now.Add(-time.Second)) // the header carries synced_at, as the agent's does
	w := NewWriter(WriterConfig{Path: filepath.Join(shmDir(b), "table.json"), Source: src, Logger: discardLogger})
	w.file.start()
	defer w.file.close()
	defer w.idx.close()
	w.write(tables[len(tables)-1], now)
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		w.write(tables[n%len(tables)], now)
	}
	if e, s := testutil.ToFloat64(w.errors), testutil.ToFloat64(w.skips); e != 0 || s != 0 {
		b.Fatalf("%v errors, %v skips; want every change written", e, s)
	}
}

// BenchmarkRenderWrite compares the two ways of writing a changed table
// through the prepared temp file on /dev/shm: rendering it into a buffer
// and writing that (two copies of the ~94 KB), or rendering it as
// segments that writev gathers into the file (one copy).
func BenchmarkRenderWrite(b *testing.B) {
	now := time.Now()
	tables := changedTables(b, 64, now)
	b.Run("JSONInto+write", func(b *testing.B) {
		p := newPreparedFile(filepath.Join(shmDir(b), "table.json"), 0o644, discardLogger)
		defer p.close()
		var buf []byte
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			var err error
			if buf, err = tables[n%len(tables)].JSONInto(buf, now); err != nil {
				b.Fatal(err)
			}
			if err := p.write(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("segments+writev", func(b *testing.B) {
		p := newPreparedFile(filepath.Join(shmDir(b), "table.json"), 0o644, discardLogger)
		defer p.close()
		var segs [][]byte
		var scratch []byte
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			var err error
			if segs, scratch, err = tables[n%len(tables)].JSONSegments(segs, scratch, now); err != nil {
				b.Fatal(err)
			}
			if err := p.write(segs...); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRenderCopy is the part of BenchmarkRenderWrite that this
// choice changes: rendering a changed table and copying it into a file on
// /dev/shm (rewritten in place: no temp file, fsync or rename).
func BenchmarkRenderCopy(b *testing.B) {
	now := time.Now()
	tables := changedTables(b, 64, now)
	f, err := os.Create(filepath.Join(shmDir(b), "table.json"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	put := func(segs [][]byte) {
		if _, err := syscall.Seek(fd, 0, io.SeekStart); err != nil {
			b.Fatal(err)
		}
		if err := writevAll(segs, func(iovs [][]byte) (int, error) { return writev(fd, iovs) }); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("JSONInto+write", func(b *testing.B) {
		var buf []byte
		one := make([][]byte, 1)
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			if buf, err = tables[n%len(tables)].JSONInto(buf, now); err != nil {
				b.Fatal(err)
			}
			one[0] = buf
			put(one)
		}
	})
	b.Run("segments+writev", func(b *testing.B) {
		var segs [][]byte
		var scratch []byte
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			if segs, scratch, err = tables[n%len(tables)].JSONSegments(segs, scratch, now); err != nil {
				b.Fatal(err)
			}
			put(segs)
		}
	})
}

// TestWriterWritesTableJSON: the file the writer gathers from segments is
// the table's JSON byte for byte (synced_at the source's), over
// consecutive tables; a table that differs only in revision and synced_at
// is skipped, one that differs in the stale flag is not.
func TestWriterWritesTableJSON(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	tables := changedTables(t, 12, now)
	kvs := exampleKVs(t)
	stale := routing.Compile(100, kvs, nil, routing.CompileOptions{Now: now, Start: now, Stale: true})
	withCluster := routing.Compile(101, kvs, stale, routing.CompileOptions{Now: now, Start: now, ClusterID: 0x5eed})
	tables = append(tables, stale, withCluster, tables[3])
	path := filepath.Join(t.TempDir(), "table.json")
	src := newSource()
	w := NewWriter(WriterConfig{Path: path, Source: src, Logger: discardLogger})
	w.file.start()
	defer w.file.close()
	check := func(name string, tb *routing.Table, at time.Time) {
		t.Helper()
		want, err := tb.JSONWith(nil, routing.JSONHeader{WrittenAt: at, SyncedAt: src.SyncedAt()})
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: file (%d bytes) differs from the table JSON (%d bytes):\n%.200s…\nwant\n%.200s…", name, len(got), len(want), got, want)
		}
	}
	at := now
	writes, skips := 0, 0
	expect := func(name string) {
		t.Helper()
		if w, s, e := testutil.ToFloat64(w.writes), testutil.ToFloat64(w.skips), testutil.ToFloat64(w.errors); w != float64(writes) || s != float64(skips) || e != 0 {
			t.Fatalf("%s: %v writes, %v skips, %v errors; want %d, %d, 0", name, w, s, e, writes, skips)
		}
	}
	for i, tb := range tables {
		name := fmt.Sprintf("table %d (revision %d)", i, tb.Revision())
		at = at.Add(123456789 * time.Nanosecond)
		src.synced(at.Add(-time.Millisecond))
		w.write(tb, at)
		writes++
		expect(name)
		check(name, tb, at)
		// A progress notification: the same content at a later revision,
		// confirmed later.
		progress := tb.WithRevision(tb.Revision() + 1000)
		written := src.SyncedAt()
		src.synced(at)
		w.write(progress, at.Add(time.Millisecond))
		if tb == stale { // now confirmed against etcd: no longer stale
			writes++
			expect(name + ", confirmed")
			check(name+", confirmed", progress, at.Add(time.Millisecond))
			continue
		}
		skips++
		expect(name + " at a later revision")
		src.synced(written) // the file's
		check(name+" at a later revision", tb, at)
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
	if err := writeFile(path, segs, 0o644, mkdirAll); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("writeFile: %d bytes, %v; want %d bytes equal to the segments", len(got), err, len(want))
	}
	p := newPreparedFile(filepath.Join(dir, "table.json"), 0o644, discardLogger)
	defer p.close()
	for i := 0; i < 3; i++ {
		if err := p.write(segs[i:]...); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadFile(p.path); err != nil || !bytes.Equal(got, bytes.Join(segs[i:], nil)) {
			t.Fatalf("prepared write %d: %d bytes, %v", i, len(got), err)
		}
	}
}

func TestSameSegments(t *testing.T) {
	body := []byte(`,"pools":{},"routes":{},"effective":{"PL":{"a":1},"DE":{"b":2}},"skipped":[]}`)
	h := func(s string) []byte { return []byte(s) }
	header := h(`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","stale":false`)
	a := [][]byte{header, body[:20], body[20:50], body[50:]}
	for name, tc := range map[string]struct {
		b    [][]byte
		same bool
	}{
		"same segments":        {a, true},
		"copies":               {[][]byte{slices.Clone(header), slices.Clone(body)}, true},
		"split elsewhere":      {[][]byte{header, body[:1], {}, slices.Clone(body[1:33]), body[33:]}, true},
		"revision, written_at": {[][]byte{h(`{"revision":9,"epoch":3,"written_at":"2026-01-01T00:00:05.5Z","stale":false`), body}, true},
		"epoch":                {[][]byte{h(`{"revision":1,"epoch":4,"written_at":"2026-01-01T00:00:00Z","stale":false`), body}, false},
		"stale":                {[][]byte{h(`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","stale":true`), body}, false},
		"cluster":              {[][]byte{h(`{"revision":1,"epoch":3,"written_at":"2026-01-01T00:00:00Z","stale":false,"cluster_id":"a"`), body}, false},
		"content":              {[][]byte{header, bytes.Replace(body, h(`"b":2`), h(`"b":3`), 1)}, false},
		"shorter":              {[][]byte{header, body[:len(body)-1]}, false},
		"longer":               {[][]byte{header, body, h(" ")}, false},
		"nothing written":      {nil, false},
	} {
		if got := sameSegments(a, tc.b); got != tc.same {
			t.Errorf("%s: sameSegments = %v, want %v", name, got, tc.same)
		}
		if got := sameSegments(tc.b, a); got != tc.same {
			t.Errorf("%s, reversed: sameSegments = %v, want %v", name, got, tc.same)
		}
	}
}

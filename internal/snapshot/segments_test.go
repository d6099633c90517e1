package snapshot

import (
	"github.com/regiond/regiond/internal/atomicfile"

	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
		d, err := os.MkdirTemp("/dev/shm", "snapshot-bench-")
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
	w := New(Config{Path: filepath.Join(shmDir(b), "table.json"), Source: src, Logger: discardLogger})
	w.finish()
	defer closeOutputs(w)
	w.publish(tables[len(tables)-1], now, false, false)
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		w.publish(tables[n%len(tables)], now, false, false)
	}
	if e, s := testutil.ToFloat64(w.outs[0].errors), testutil.ToFloat64(w.skips); e != 0 || s != 0 {
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
		p := atomicfile.New(filepath.Join(shmDir(b), "table.json"), 0o644, atomicfile.Options{Logger: discardLogger})
		defer p.Close()
		var buf []byte
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			var err error
			if buf, err = tables[n%len(tables)].JSONInto(buf, now); err != nil {
				b.Fatal(err)
			}
			if err := p.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("segments+writev", func(b *testing.B) {
		p := atomicfile.New(filepath.Join(shmDir(b), "table.json"), 0o644, atomicfile.Options{Logger: discardLogger})
		defer p.Close()
		var segs [][]byte
		var scratch []byte
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			var err error
			if segs, scratch, err = tables[n%len(tables)].JSONSegments(segs, scratch, now); err != nil {
				b.Fatal(err)
			}
			if err := p.Write(segs...); err != nil {
				b.Fatal(err)
			}
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
	w := New(Config{Path: path, Source: src, Logger: discardLogger})
	w.finish()
	defer closeOutputs(w)
	check := func(name string, tb *routing.Table, at time.Time) {
		t.Helper()
		want, err := tb.JSONWith(nil, routing.JSONHeader{WrittenAt: at, SyncedAt: src.SyncedAt()})
		if err != nil {
			t.Fatal(err)
		}
		got, err := atomicfile.ReadFile(path)
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
		if w, s, e := testutil.ToFloat64(w.outs[0].writes), testutil.ToFloat64(w.skips), testutil.ToFloat64(w.outs[0].errors); w != float64(writes) || s != float64(skips) || e != 0 {
			t.Fatalf("%s: %v writes, %v skips, %v errors; want %d, %d, 0", name, w, s, e, writes, skips)
		}
	}
	for i, tb := range tables {
		name := fmt.Sprintf("table %d (revision %d)", i, tb.Revision())
		at = at.Add(123456789 * time.Nanosecond)
		src.synced(at.Add(-time.Millisecond))
		w.publish(tb, at, false, false)
		writes++
		expect(name)
		check(name, tb, at)
		// A progress notification: the same content at a later revision,
		// confirmed later.
		progress := tb.WithRevision(tb.Revision() + 1000)
		written := src.SyncedAt()
		src.synced(at)
		w.publish(progress, at.Add(time.Millisecond), false, false)
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

// poolFleet returns a table of base pools and nothing else (the shape of
// the change-path harness's burst, bench/README.md) and a func that returns the next table:
// the previous one with one new pool added by Update, as the mirror makes
// them.
func poolFleet(tb testing.TB, base int, now time.Time) (*routing.Table, func() *routing.Table) {
	tb.Helper()
	val := func(i int) []byte {
		return fmt.Appendf(nil, `{"host":"bench.example.net","region":"bench","residency":"global","status":"active","attrs":{"m":"QB%06dQ","pad":"%s"}}`, i, bytes.Repeat([]byte("x"), 100))
	}
	kvs := make([]routing.KV, 0, base)
	for i := range base {
		kvs = append(kvs, routing.KV{Key: fmt.Sprintf("pools/base%06d", i), Value: val(i), ModRevision: 1, CreateRevision: 1, Version: 1})
	}
	opts := routing.CompileOptions{Now: now, Start: now}
	t := routing.Compile(1, kvs, nil, opts)
	rev := int64(1)
	return t, func() *routing.Table {
		rev++
		ev := routing.Event{KV: routing.KV{Key: fmt.Sprintf("pools/new%06d", rev), Value: val(int(rev)), ModRevision: rev, CreateRevision: rev, Version: 1}}
		if t = routing.Update(t, rev, []routing.Event{ev}, opts); t == nil {
			tb.Fatal("Update refused the table")
		}
		return t
	}
}

// BenchmarkWriterManyPools is the work per change on a table of 2,000
// pools when each change adds a pool (the perf burst): Update, then render
// and write both files on /dev/shm, after every change or (paced) after
// every tenth.
func BenchmarkWriterManyPools(b *testing.B) {
	for _, every := range []int{1, 10} {
		b.Run(fmt.Sprintf("write-every-%d", every), func(b *testing.B) {
			now := time.Now()
			src := newSource()
			src.synced(now.Add(-time.Second))
			w := New(Config{Path: filepath.Join(shmDir(b), "table.json"), Source: src, Logger: discardLogger})
			w.finish()
			defer closeOutputs(w)
			t, next := poolFleet(b, 2000, now)
			w.publish(t, now, false, false)
			b.ReportAllocs()
			for n := 1; b.Loop(); n++ {
				t = next()
				if n%every == 0 {
					w.publish(t, now, false, false)
				}
			}
		})
	}
}

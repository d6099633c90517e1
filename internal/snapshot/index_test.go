package snapshot

import (
	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/logbuf"

	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

func TestIndexPath(t *testing.T) {
	for in, want := range map[string]string{
		"/dev/shm/regiond/table.json": "/dev/shm/regiond/table.idx",
		"/run/regiond/snap":           "/run/regiond/snap.idx",
		"table.JSON":                  "table.JSON.idx",
		"a.json.bak":                  "a.json.bak.idx",
	} {
		if got := IndexPath(in); got != want {
			t.Errorf("IndexPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// readIndex opens the index at path: its revision, or -1 when missing.
func readIndex(t *testing.T, path string) (int64, *snapindex.Index) {
	t.Helper()
	x, err := snapindex.Open(path)
	if os.IsNotExist(errUnwrapAll(err)) {
		return -1, nil
	}
	if err != nil {
		t.Fatalf("index does not parse: %v", err)
	}
	return x.Header.Revision, x
}

func errUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// TestWriterWritesIndex: every write of the file is followed by the index
// of the same table, with the file's written_at and synced_at, and the
// index decides as the table does.
func TestWriterWritesIndex(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	src := newSource()
	synced := time.Now().Add(-3 * time.Second).UTC()
	src.synced(synced)
	w := runWriter(t, Config{Path: path, Source: src})
	for rev, weight := range map[int64]int{5: 30, 6: 70, 7: 0} {
		tab := table(rev, weight)
		src.set(tab)
		waitRevision(t, path, rev)
		var x *snapindex.Index
		for i := 0; i < 500; i++ {
			var got int64
			if got, x = readIndex(t, filepath.Join(dir, "table.idx")); got == rev {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if x == nil || x.Header.Revision != rev {
			t.Fatalf("index never reached revision %d", rev)
		}
		b, _ := atomicfile.ReadFile(path)
		_, h, err := routing.LoadTableJSONHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if !x.Header.WrittenAt.Equal(h.WrittenAt) || !x.Header.SyncedAt.Equal(synced) {
			t.Errorf("index written_at %v synced_at %v; file's %v, source's %v", x.Header.WrittenAt, x.Header.SyncedAt, h.WrittenAt, synced)
		}
		for _, key := range []string{"k1", "viewer-2", "x"} {
			want, _ := tab.Resolve("PL", key, h.WrittenAt)
			got, _ := x.Resolve("PL", key, h.WrittenAt)
			if got.Pool != want.Pool || got.Revision != rev {
				t.Errorf("rev %d key %s: index %+v, table %+v", rev, key, got, want)
			}
		}
	}
	if n := testutil.ToFloat64(w.outs[1].writes); n < 3 {
		t.Errorf("index writes %v, want ≥ 3", n)
	}
}

// TestWriterRetriesAFailedIndexWrite: an index write that fails (a
// directory stands at table.idx) is counted and logged, the file is still
// written, and the index is written once the fault clears, with no new
// table.
func TestWriterRetriesAFailedIndexWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	idx := filepath.Join(dir, "table.idx")
	if err := os.Mkdir(idx, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(idx, "blocker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	var logs logbuf.Buffer
	w := runWriter(t, Config{Path: path, Source: src, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	src.set(table(9, 40))
	waitRevision(t, path, 9)
	for i := 0; i < 300 && testutil.ToFloat64(w.outs[1].errors) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if testutil.ToFloat64(w.outs[1].errors) == 0 {
		t.Fatal("the index write never failed: test setup")
	}
	// The error names the index's path, not the JSON's beside it.
	if l := logs.String(); !strings.Contains(l, `"msg":"write snapshot index`) || !strings.Contains(l, `"path":"`+idx+`"`) || strings.Contains(l, `"path":"`+path+`"`) {
		t.Fatalf("the failed index write is not logged under the index's path %s:\n%s", idx, l)
	}
	if err := os.RemoveAll(idx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ { // retried after ~1 s of backoff
		if rev, _ := readIndex(t, idx); rev == 9 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the index was never written after the fault cleared")
}

// BenchmarkIndexVsJSON compares, per change of the example fleet (one
// route changed), the index's encoding and write with the JSON's render
// and write, in the same run: the index must not add much to the
// snapshot's put→file latency.
func BenchmarkIndexVsJSON(b *testing.B) {
	now := time.Now()
	tables := changedTables(b, 64, now)
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Second)}
	b.Run("json-segments-render", func(b *testing.B) {
		var segs [][]byte
		var scratch []byte
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			var err error
			if segs, scratch, err = tables[n%len(tables)].JSONSegmentsWith(segs, scratch, h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("index-encode", func(b *testing.B) {
		var enc snapindex.Encoder
		var buf []byte
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			var err error
			if buf, err = enc.Encode(buf, tables[n%len(tables)], h); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(buf)), "bytes/file")
	})
	b.Run("index-encode-cold", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for n := 0; b.Loop(); n++ {
			var err error
			if buf, err = snapindex.Encode(buf, tables[n%len(tables)], h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-segments-write", func(b *testing.B) {
		p := atomicfile.New(filepath.Join(shmDir(b), "table.json"), 0o644, atomicfile.Options{Logger: discardLogger})
		defer p.Close()
		var segs [][]byte
		var scratch []byte
		for n := 0; b.Loop(); n++ {
			var err error
			if segs, scratch, err = tables[n%len(tables)].JSONSegmentsWith(segs, scratch, h); err != nil {
				b.Fatal(err)
			}
			if err := p.Write(segs...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("index-encode-write", func(b *testing.B) {
		p := atomicfile.New(filepath.Join(shmDir(b), "table.idx"), 0o644, atomicfile.Options{Logger: discardLogger})
		defer p.Close()
		var enc snapindex.Encoder
		var buf []byte
		for n := 0; b.Loop(); n++ {
			var err error
			if buf, err = enc.Encode(buf, tables[n%len(tables)], h); err != nil {
				b.Fatal(err)
			}
			if err := p.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package snapshot

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/routing"
)

// testTables returns consecutive tables of the example fleet (route
// changes, some back and forth), a stale one, one with a cluster ID, each
// also at a later revision (a progress notification).
func testTables(t *testing.T, now time.Time) []*routing.Table {
	tables := changedTables(t, 12, now)
	kvs := exampleKVs(t)
	stale := routing.Compile(100, kvs, nil, routing.CompileOptions{Now: now, Start: now, Stale: true})
	withCluster := routing.Compile(101, kvs, stale, routing.CompileOptions{Now: now, Start: now, ClusterID: 0x5eed})
	// Pairs that differ only in the stale flag, or only in the cluster ID.
	plain := routing.Compile(100, kvs, nil, routing.CompileOptions{Now: now, Start: now})
	otherCluster := routing.Compile(100, kvs, nil, routing.CompileOptions{Now: now, Start: now, ClusterID: 0x5eed})
	tables = append(tables, stale, withCluster, plain, otherCluster, tables[3], tables[3])
	var out []*routing.Table
	for _, tb := range tables {
		out = append(out, tb, tb.WithRevision(tb.Revision()+1000))
	}
	return out
}

// TestTableJSONMatchesPlain: the fast path (segments gathered into a
// prepared temp file, deferred finishes included) writes files
// byte-identical to the reference output (the whole JSON rendered into one
// buffer, written with atomicfile.WriteFile), over consecutive tables.
func TestTableJSONMatchesPlain(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	dir := t.TempDir()
	fast := NewTableJSON(filepath.Join(dir, "fast", "table.json"), atomicfile.Options{Logger: discardLogger})
	defer fast.Close()
	ref := PlainJSON{Path: filepath.Join(dir, "plain", "table.json")}
	at := now
	for i, tb := range testTables(t, now) {
		at = at.Add(123456789 * time.Nanosecond)
		h := routing.JSONHeader{WrittenAt: at}
		if i%3 > 0 {
			h.SyncedAt = at.Add(-time.Millisecond)
		}
		deferred := i%2 == 1
		if err := fast.Write(tb, h, deferred); err != nil {
			t.Fatal(err)
		}
		if err := ref.Write(tb, h, deferred); err != nil {
			t.Fatal(err)
		}
		got, err1 := os.ReadFile(filepath.Join(dir, "fast", "table.json"))
		want, err2 := os.ReadFile(ref.Path)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("table %d (revision %d, deferred %v): the fast path's file (%d bytes) differs from the reference's (%d bytes)",
				i, tb.Revision(), deferred, len(got), len(want))
		}
		if i%4 == 3 {
			if err := fast.Finish(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSameContent: routing's content identity (Table.SameContent) says
// "same" exactly when the two rendered table JSONs are equal but for
// revision, written_at and synced_at, over every pair of test tables.
func TestSameContent(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	tables := testTables(t, now)
	content := make([]map[string]json.RawMessage, len(tables))
	for i, tb := range tables {
		b, err := tb.JSONWith(nil, routing.JSONHeader{WrittenAt: now.Add(time.Duration(i) * time.Second), SyncedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &content[i]); err != nil {
			t.Fatal(err)
		}
		delete(content[i], "revision")
		delete(content[i], "written_at")
		delete(content[i], "synced_at")
	}
	same, differ := 0, 0
	for i, a := range tables {
		for j, b := range tables {
			want := reflect.DeepEqual(content[i], content[j])
			if got := a.SameContent(b); got != want {
				t.Fatalf("tables %d and %d (revisions %d, %d): SameContent = %v, rendered content equal = %v",
					i, j, a.Revision(), b.Revision(), got, want)
			}
			if want {
				same++
			} else {
				differ++
			}
		}
	}
	if same <= len(tables) || differ == 0 {
		t.Fatalf("%d same and %d differing pairs: the test tables do not exercise both", same, differ)
	}
	if tables[0].SameContent(nil) || (*routing.Table)(nil).SameContent(tables[0]) {
		t.Fatal("a table and nil: same content")
	}
}

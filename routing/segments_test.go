package routing

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// checkSegments fails unless the segments of tb at writtenAt, rendered
// with dst and scratch, concatenate to tb.JSON(writtenAt), and returns
// them and the scratch for reuse.
func checkSegments(t *testing.T, name string, tb *Table, dst [][]byte, scratch []byte, writtenAt time.Time) ([][]byte, []byte) {
	t.Helper()
	want, err := tb.JSON(writtenAt)
	if err != nil {
		t.Fatal(err)
	}
	segs, scratch, err := tb.JSONSegments(dst, scratch, writtenAt)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if got := bytes.Join(segs, nil); !bytes.Equal(got, want) {
		t.Fatalf("%s: segments concatenate to\n%.300s…\nwant\n%.300s… (%s)", name, got, want, firstDiffAll(got, want))
	}
	header := segs[0]
	if !bytes.HasPrefix(header, []byte(`{"revision":`)) || bytes.Contains(header, []byte(`"pools"`)) {
		t.Fatalf("%s: first segment %q is not the header", name, header)
	}
	for i, s := range segs {
		if len(s) == 0 {
			t.Fatalf("%s: segment %d is empty", name, i)
		}
	}
	enc := tb.At(writtenAt).encodings()
	if len(segs) > 50+len(enc.poolMembers) {
		t.Fatalf("%s: %d segments for %d pools", name, len(segs), len(enc.poolMembers))
	}
	// The bulk is not copied: the sections and the pools' members are the
	// table's own.
	for i, m := range enc.poolMembers {
		if i == 0 {
			m = m[1:] // the first member goes without its comma
		}
		found := false
		for _, s := range segs {
			found = found || (sameArray(s, m) && len(s) == len(m))
		}
		if !found {
			t.Fatalf("%s: pool member %.20q… is not one of the segments", name, m)
		}
	}
	for _, sec := range [][]byte{enc.routes, enc.policy} {
		found := false
		for _, s := range segs {
			found = found || (sameArray(s, sec) && len(s) == len(sec))
		}
		if !found {
			t.Fatalf("%s: section %.20q… is not one of the segments", name, sec)
		}
	}
	return segs, scratch
}

func TestJSONSegmentsEqualJSON(t *testing.T) {
	cfg := exampleConfig(t)
	kvs := kvsOf(t, cfg)
	var segs [][]byte
	var scratch []byte
	full := Compile(1, kvs, nil, CompileOptions{Now: t0})
	segs, scratch = checkSegments(t, "compiled", full, segs, scratch, t0)
	// The same storage again, for other tables of other shapes.
	withExtras := append(kvs[:len(kvs):len(kvs)],
		KV{Key: "overrides/kr-week", Value: []byte(`{"route":"KR","targets":[{"pool":"kr-music","weight":100}]}`), ModRevision: 2},
		KV{Key: "routes/XX", Value: []byte(`{}`), ModRevision: 2})
	for name, tb := range map[string]*Table{
		"overrides and skipped": Compile(2, withExtras, full, CompileOptions{Now: t0, ClusterID: 0xabc}),
		"down":                  Compile(2, kvs, full, CompileOptions{Now: t0, Down: []string{"eu-west"}}),
		"stale":                 Compile(2, kvs, nil, CompileOptions{Now: t0, Stale: true}),
		"with revision":         full.WithRevision(9),
		"compiled":              full,
	} {
		for _, at := range []time.Time{t0, t0.Add(time.Hour), t0.Add(1234567 * time.Nanosecond)} {
			segs, scratch = checkSegments(t, name, tb, segs, scratch, at)
		}
	}
	loaded, _, err := LoadTableJSON(bytes.Join(segs, nil))
	if err != nil {
		t.Fatal(err)
	}
	checkSegments(t, "loaded", loaded, segs, scratch, t0)
}

// TestJSONSegmentsAfterUpdates: tables made by Update, whose effective
// members are pieces of several tables' arrays, render as segments equal
// to their JSON, with the storage reused from table to table.
func TestJSONSegmentsAfterUpdates(t *testing.T) {
	cfg := exampleConfig(t)
	opts := CompileOptions{Now: t0, Start: t0, Grace: 5 * time.Second}
	tb := Compile(1, kvsOf(t, cfg), nil, opts)
	pools := sortedKeys(cfg.Pools)
	routes := []string{"PL", "DE", "KR", "JP", "US", "BR", "GB", "eu-general", "_default"}
	var segs [][]byte
	var scratch []byte
	maxSegs, withOverride, withSkipped := 0, 0, 0
	for rev := int64(2); rev < 200; rev++ {
		var ev Event
		switch rev % 5 {
		case 0: // a pool changes status
			id := pools[int(rev)%len(pools)]
			status := []string{"active", "draining"}[rev/5%2]
			ev = Event{KV: KV{Key: PoolKey(id), ModRevision: rev,
				Value: fmt.Appendf(nil, `{"host":"%s.example.net","residency":%q,"status":%q}`, id, cfg.Pools[id].Residency, status)}}
		case 1: // an override comes or goes
			if rev%2 == 0 {
				ev = Event{KV: KV{Key: OverrideKey("o"), ModRevision: rev}, Deleted: true}
			} else {
				ev = Event{KV: KV{Key: OverrideKey("o"), ModRevision: rev,
					Value: fmt.Appendf(nil, `{"route":%q,"targets":[{"pool":"eu-west","weight":100}]}`, routes[int(rev)%len(routes)])}}
			}
		case 2: // a refused value
			ev = Event{KV: KV{Key: RouteKey("ZZ"), ModRevision: rev, Value: []byte(`{"targets":[{"pool":"nope","weight":100}]}`)}}
		default: // a route is reweighted
			w := int(rev*7) % 101
			ev = Event{KV: KV{Key: RouteKey(routes[int(rev)%len(routes)]), ModRevision: rev,
				Value: fmt.Appendf(nil, `{"targets":[{"pool":"eu-central","weight":%d},{"pool":"eu-west","weight":%d}]}`, w, 100-w)}}
		}
		opts.Now = t0.Add(time.Duration(rev) * 100 * time.Millisecond)
		next := Update(tb, rev, []Event{ev}, opts)
		if next == nil {
			t.Fatalf("revision %d: Update refused", rev)
		}
		tb = next
		name := fmt.Sprintf("revision %d (%s)", rev, ev.Key)
		segs, scratch = checkSegments(t, name, tb, segs, scratch, opts.Now)
		maxSegs = max(maxSegs, len(segs))
		if len(tb.overrides) > 0 {
			withOverride++
		}
		if len(tb.skipped) > 0 {
			withSkipped++
		}
		// A progress notification: the same encodings, another revision.
		segs, scratch = checkSegments(t, name+" with revision", tb.WithRevision(rev+1000), segs, scratch, opts.Now.Add(time.Second))
	}
	t.Logf("at most %d segments; %d tables with an override, %d with skipped values", maxSegs, withOverride, withSkipped)
	if withOverride == 0 || withSkipped == 0 {
		t.Fatal("the sequence misses overrides or skipped values")
	}
}

// TestJSONSegmentsKeepEarlierResults: segments taken with fresh storage
// stay equal to their JSON while the table is rendered again.
func TestJSONSegmentsKeepEarlierResults(t *testing.T) {
	tb := Compile(1, kvsOf(t, exampleConfig(t)), nil, CompileOptions{Now: t0})
	first, _, err := tb.JSONSegments(nil, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Join(first, nil)
	var segs [][]byte
	var scratch []byte
	for i := 0; i < 10; i++ {
		segs, scratch = checkSegments(t, "again", tb, segs, scratch, t0.Add(time.Duration(i)*time.Second))
	}
	if got := bytes.Join(first, nil); !bytes.Equal(got, want) {
		t.Fatal("earlier segments changed when the table was rendered again")
	}
}

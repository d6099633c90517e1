package php_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// TestReaderReadsATableWithAValueNotUTF8: a pool value put by hand with a
// lone 0x9b in an unknown field, and a health key with that byte in its
// instance, leave the table readable by the PHP reader, through the index
// and through the table JSON alone, deciding as Go does: the value is
// skipped (its last good value, read from etcd's history, serves) and the
// key named by a stand-in in UTF-8. The unknown field was copied raw into
// the table JSON, and json_decode refused the whole table (JSON_ERROR_UTF8):
// the front door read no table at all.
func TestReaderReadsATableWithAValueNotUTF8(t *testing.T) {
	readsAfterHandEdits(t, [][2]string{
		{"pools/eu-west", `{"host":"edge-ams-1.example.net:443","region":"eu-west","residency":"eu","x":"good"}`},
		{"pools/eu-west", "{\"host\":\"edge-ams-2.example.net:443\",\"region\":\"eu-west\",\"residency\":\"eu\",\"x\":\"a\x9b31mb\"}"},
		{"health/eu-west/h\x9b1", "up"},
	}, func(skipped []string) bool {
		return len(skipped) == 2 && strings.Contains(skipped[1], "byte 0x9b at offset 79") && strings.HasPrefix(skipped[0], "health/eu-west/h… (18 bytes, sha256 ")
	}, "the health key by its stand-in and pools/eu-west naming the byte not UTF-8")
}

// TestReaderReadsATableWithALoneSurrogate: a pool value put by hand with
// an unknown field holding half a UTF-16 surrogate pair as an escape
// ("\ud800", valid JSON to encoding/json, which json.Compact copied into
// the table JSON as it was) leaves the table readable by the PHP reader,
// through the index and through the table JSON alone: the value is
// skipped, its last good value serving. json_decode refused the whole
// table (JSON_ERROR_UTF16, "Single unpaired UTF-16 surrogate").
func TestReaderReadsATableWithALoneSurrogate(t *testing.T) {
	readsAfterHandEdits(t, [][2]string{
		{"pools/eu-west", `{"host":"edge-ams-1.example.net:443","region":"eu-west","residency":"eu","x":"good"}`},
		{"pools/eu-west", `{"host":"edge-ams-2.example.net:443","region":"eu-west","residency":"eu","x":"a\ud800b"}`},
	}, func(skipped []string) bool {
		return len(skipped) == 1 && strings.Contains(skipped[0], `pools/eu-west: value holds the escape \ud800 at offset 79`)
	}, "pools/eu-west naming the lone surrogate's escape")
}

// readsAfterHandEdits puts kvs by hand over the example fleet, lists it
// with a mirror, checks its skipped keys ("key: error") with ok, and has
// the PHP reader decide from the table, through the index and through the
// JSON alone, as Go does, NL from eu-west's first value (its last good one).
func readsAfterHandEdits(t *testing.T, kvs [][2]string, ok func(skipped []string) bool, want string) {
	t.Helper()
	php(t)
	const prefix = "/regiond/v1/routing/"
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	fleettest.Load(t, cli, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, kv := range kvs {
		if _, err := cli.Put(ctx, prefix+kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	m, err := watch.New(watch.Config{Client: cli, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	tab := m.Table()
	var skipped []string
	for _, s := range tab.Skipped() {
		skipped = append(skipped, s.Key+": "+s.Error)
	}
	if !ok(skipped) {
		t.Errorf("skipped %q, want %s", skipped, want)
	}
	now := time.Now()
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now}
	ps := []pair{{"NL", "k1"}, {"NL", "k2"}, {"DE", "k1"}, {"FR", "k3"}, {"XX", "k4"}}
	for _, withIndex := range []bool{true, false} {
		meta, got := resolvePHP(t, writeSnapshot(t, tab, h, withIndex), 180, ps)
		if meta.Index != withIndex || meta.Revision != tab.Revision() {
			t.Errorf("php meta %+v, want index=%v revision %d", meta, withIndex, tab.Revision())
		}
		check(t, tab, now, ps, got, false)
		if !strings.Contains(string(got[0].D), `"host":"edge-ams-1.example.net:443"`) {
			t.Errorf("index=%v: NL decided %s, want eu-west's last good host", withIndex, got[0].D)
		}
	}
}

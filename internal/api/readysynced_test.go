package api

import (
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// TestReadySyncedAsksForEtcd: /readyz?synced=1 is 200 only when the
// agent is ready and also follows etcd now with a table this run
// confirmed; it names why not (not following etcd, with the etcd error;
// a snapshot's table read back at start). The plain /readyz passes both,
// as before (a node that cannot reach etcd serves its fresh copy). A bad
// value is a 400 naming it; synced=0 is the plain check. The runbook's
// check of a node after its restart is this one (the runbook walk: a
// typo'd --endpoints passed the plain /readyz on every node).
func TestReadySyncedAsksForEtcd(t *testing.T) {
	tbl := routing.Compile(7, exampleKVs(t), nil, routing.CompileOptions{Now: time.Now()})
	src, _, url := fixedAPI(t, Config{MaxStale: time.Minute}, tbl)
	get := func(q string) (int, string) {
		a := fetch(t, "GET", url+"/readyz"+q)
		return a.code, string(a.body)
	}
	for _, q := range []string{"?synced=1", "?synced=true", "?synced=0", "?synced=false", "", "?verbose"} {
		if code, body := get(q); code != 200 || body != "ok\n" {
			t.Fatalf("/readyz%s following etcd: %d %q; want 200 ok", q, code, body)
		}
	}
	for _, q := range []string{"?synced", "?synced=", "?synced=yes", "?synced=2"} {
		if code, body := get(q); code != 400 || !strings.Contains(body, "for synced: give synced=1") {
			t.Fatalf("/readyz%s: %d %q; want 400 naming synced", q, code, body)
		}
	}

	// Cut off from etcd, the table confirmed 10 s ago: ready, not synced.
	confirmed := time.Now().Add(-10 * time.Second)
	src.setStatus(watch.Status{Revision: 7, Synced: true, SyncedAt: confirmed, Unreachable: "127.0.0.1:2379: dial: connection refused"})
	if code, body := get(""); code != 200 {
		t.Fatalf("/readyz cut off within --max-stale: %d %q; want 200", code, body)
	}
	if code, body := get("?synced=0"); code != 200 {
		t.Fatalf("/readyz?synced=0 cut off within --max-stale: %d %q; want 200", code, body)
	}
	code, body := get("?synced=1")
	if code != 503 || !strings.Contains(body, "not synced: not following etcd: etcd unreachable: 127.0.0.1:2379: dial: connection refused") ||
		!strings.Contains(body, confirmed.UTC().Format(time.RFC3339Nano)) {
		t.Fatalf("/readyz?synced=1 cut off: %d %q; want 503 naming the etcd error and when the table was confirmed", code, body)
	}

	// The snapshot file's table read back at start, fresh enough to be
	// ready: not synced until confirmed, whatever the watch says.
	src.t.Store(snapshotCopy(t, tbl))
	src.setStatus(watch.Status{Revision: 7, Synced: true, SyncedAt: confirmed})
	if code, body := get(""); code != 200 {
		t.Fatalf("/readyz of a fresh snapshot copy: %d %q; want 200", code, body)
	}
	if code, body := get("?synced=1"); code != 503 || !strings.Contains(body, "read back from its snapshot file at start") {
		t.Fatalf("/readyz?synced=1 of a snapshot copy: %d %q; want 503 saying it is the snapshot's table", code, body)
	}

	// Not ready at all: the plain reason, synced or not.
	src.t.Store(tbl)
	src.setStatus(watch.Status{Revision: 7, Synced: true, SyncedAt: time.Now().Add(-2 * time.Minute)})
	if code, body := get("?synced=1"); code != 503 || !strings.Contains(body, "older than --max-stale") {
		t.Fatalf("/readyz?synced=1 past --max-stale: %d %q; want 503 naming --max-stale", code, body)
	}
}

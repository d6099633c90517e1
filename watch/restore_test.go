package watch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/tcpproxy"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// TestRestoredBackupWrittenPastTheAppliedRevision: the mirror follows
// etcd to revision A; etcd is then restored from a backup of its data
// taken earlier (same cluster ID, an older revision, no --bump-revision),
// and other clients write past A before the mirror gets back. The reopened
// watch from A+1 would answer and its progress notifications confirm the
// table, while the keys written after the backup differ for good. The
// reopen checks etcd's prefix at A, finds another history and relists: the
// table drops the pool etcd lost and takes the one written since,
// resyncs_total{reason="diverged"} and revision_regressions_total count it.
// Two cases: the restored etcd holds fewer keys of the prefix at A than the
// state (the counts differ), and as many (only the newest keys differ).
func TestRestoredBackupWrittenPastTheAppliedRevision(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	for _, balanced := range []bool{false, true} {
		t.Run(fmt.Sprintf("same-count=%v", balanced), func(t *testing.T) {
			if balanced {
				restoredBackup(t, restoredSameCount)
			} else {
				restoredBackup(t, restoredFewer)
			}
		})
	}
}

// TestRestoredBackupNotYetWrittenPast: as above, but nothing is written to
// the restored etcd before the mirror gets back, so its revision is below
// the applied one. The reopened watch from A+1 would wait silently for a
// revision etcd has not reached (PITFALLS: a watch opened at a future
// revision). The reopen's check finds etcd behind (ErrFutureRev) and
// relists at once: the table goes back to the restored revision, without
// the pool written after the backup; resyncs_total{reason="regressed"}
// and revision_regressions_total count it, and the mirror is connected.
func TestRestoredBackupNotYetWrittenPast(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	restoredBackup(t, restoredBehind)
}

// How restoredBackup's restored etcd is written before the mirror is back.
const (
	restoredFewer     = iota // past the applied revision, fewer keys of the prefix than the state
	restoredSameCount        // past the applied revision, as many keys of the prefix as the state
	restoredBehind           // not at all: etcd's revision is below the applied one
)

func restoredBackup(t *testing.T, mode int) {
	balanced := mode == restoredSameCount
	ctx := context.Background()
	base := t.TempDir()
	dir, backup := filepath.Join(base, "data"), filepath.Join(base, "backup")
	port, err := freeport.Get() // the client URL stays across restarts
	if err != nil {
		t.Fatal(err)
	}
	dcfg := devetcd.Config{Dir: dir, ClientURL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	var srv *devetcd.Server
	start := func() {
		t.Helper()
		if srv, err = devetcd.Start(ctx, dcfg); err != nil {
			t.Fatal(err)
		}
	}
	start()
	t.Cleanup(func() { srv.Close() })
	first := devetcd.NewTestClient(t, srv)
	loadExample(t, first)
	first.Close()
	srv.Close()
	if err := os.CopyFS(backup, os.DirFS(dir)); err != nil { // the backup, taken with etcd stopped
		t.Fatal(err)
	}
	start()

	proxy, m, reg := mirrorBehindProxy(t, srv.Endpoints[0])

	direct := devetcd.NewTestClient(t, srv)
	late := put(t, direct, "pools/late", `{"host":"late.example.net","residency":"eu","status":"active"}`) // after the backup
	direct.Close()
	waitUntil(t, m, "the pool written after the backup", func(tb *routing.Table) bool { return tb.Revision() >= late })

	// Restore the backup: the same member and cluster ID, an older revision.
	proxy.Sever()
	srv.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	start()
	restored := devetcd.NewTestClient(t, srv)
	var rev int64
	if balanced { // as many keys in the prefix as the mirror holds, from the revision the mirror's newest was written at
		rev = put(t, restored, "pools/mid", `{"host":"mid.example.net","residency":"eu","status":"active"}`)
	}
	for mode != restoredBehind && rev <= late+2 { // other clients write outside the prefix, past the applied revision
		r, err := restored.Put(ctx, "/regiond/v1/agents/other", fmt.Sprint(rev))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, m, "the restored etcd's pools", func(tb *routing.Table) bool {
		_, hasLate := tb.Pool("late")
		_, hasMid := tb.Pool("mid")
		return !hasLate && hasMid == balanced
	})
	if n := testutil.ToFloat64(metric(t, reg, "regiond_watch_revision_regressions_total")); n < 1 {
		t.Errorf("revision_regressions_total %v, want the divergence counted", n)
	}
	if ev := m.Status().EventRevision; ev != 0 {
		t.Errorf("EventRevision %d after the relist of the restored etcd (the event of pools/late at %d was of the history before it), want 0", ev, late)
	}
	reason := watch.ReasonDiverged
	if mode == restoredBehind {
		reason = watch.ReasonRegressed
		tb := m.Table()
		if got := tb.Revision(); got >= late {
			t.Errorf("table at revision %d after the restore, want the restored etcd's, below the applied %d", got, late)
		}
		for i := 0; !m.Status().Connected; i++ {
			if i == 200 {
				t.Fatal("mirror not connected 10s after relisting the restored etcd")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if n := resyncsBy(t, reg, reason); n < 1 {
		t.Errorf("resyncs_total{reason=%q} %v, want 1", reason, n)
	}
}

// TestAnotherClusterUnderTheMirrorRelists: the etcd behind the mirror's
// endpoint is replaced by another cluster (a rebuilt one, a DNS name moved)
// that holds other keys, at a revision past the applied one, so the
// reopened watch from there would answer. Its answers carry another
// cluster ID: the mirror relists, the table takes the new cluster's keys
// and ID, and cluster_changes_total and resyncs_total{reason=
// "cluster-change"} count it; the revisions of two clusters are not
// compared, so no regression is counted.
func TestAnotherClusterUnderTheMirrorRelists(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the mirror's timeouts: run beside the other such tests
	ctx := context.Background()
	port, err := freeport.Get() // the client URL both clusters serve
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	start := func() (func(), *clientv3.Client, uint64) {
		t.Helper()
		srv, err := devetcd.Start(ctx, devetcd.Config{Dir: t.TempDir(), ClientURL: url})
		if err != nil {
			t.Fatal(err)
		}
		stop := sync.OnceFunc(srv.Close)
		t.Cleanup(stop)
		cli := devetcd.NewTestClient(t, srv)
		loadExample(t, cli)
		resp, err := cli.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		return stop, cli, resp.Header.ClusterId
	}
	stopFirst, firstCli, firstID := start()
	onlyFirst := put(t, firstCli, "pools/only-first", `{"host":"first.example.net","residency":"eu","status":"active"}`)

	proxy, m, reg := mirrorBehindProxy(t, url)
	waitUntil(t, m, "the first cluster's pool", func(tb *routing.Table) bool { _, ok := tb.Pool("only-first"); return ok })
	event := put(t, firstCli, "pools/first-event", `{"host":"first.example.net","residency":"eu","status":"active"}`)
	waitUntil(t, m, "the first cluster's event", func(tb *routing.Table) bool { return tb.Revision() >= event })
	if ev := m.Status().EventRevision; ev != event {
		t.Fatalf("EventRevision %d, want the first cluster's event at %d", ev, event)
	}

	proxy.Sever()
	firstCli.Close()
	stopFirst()
	_, second, secondID := start()
	if secondID == firstID {
		t.Fatalf("both clusters have ID %x: the test needs two", firstID)
	}
	put(t, second, "pools/only-second", `{"host":"second.example.net","residency":"eu","status":"active"}`)
	for rev := int64(0); rev <= onlyFirst+2; { // past the first cluster's applied revision
		r, err := second.Put(ctx, "/regiond/v1/agents/other", fmt.Sprint(rev))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	tb := waitUntil(t, m, "the second cluster's pools", func(tb *routing.Table) bool {
		_, hasFirst := tb.Pool("only-first")
		_, hasSecond := tb.Pool("only-second")
		return !hasFirst && hasSecond
	})
	if tb.ClusterID() != secondID {
		t.Errorf("table of cluster %x, want the second cluster's %x", tb.ClusterID(), secondID)
	}
	if got := testutil.ToFloat64(metric(t, reg, "regiond_watch_cluster_changes_total")); got != 1 {
		t.Errorf("cluster_changes_total %v, want 1", got)
	}
	if n := resyncsBy(t, reg, watch.ReasonCluster); n != 1 {
		t.Errorf("resyncs_total{reason=%q} %v, want 1", watch.ReasonCluster, n)
	}
	if got := testutil.ToFloat64(metric(t, reg, "regiond_watch_revision_regressions_total")); got != 0 {
		t.Errorf("revision_regressions_total %v, want 0 (two clusters' revisions are not compared)", got)
	}
	if ev := m.Status().EventRevision; ev != 0 {
		t.Errorf("EventRevision %d after the relist of another cluster (the first cluster's event), want 0", ev)
	}
}

// mirrorBehindProxy runs a mirror, with its own metrics registry, whose
// client reaches the etcd at url through a tcpproxy the test can sever.
func mirrorBehindProxy(t *testing.T, url string) (*tcpproxy.Proxy, *watch.Mirror, *prometheus.Registry) {
	t.Helper()
	proxy, err := tcpproxy.New(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{proxy.URL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	reg := prometheus.NewRegistry()
	return proxy, startMirror(t, cli, watch.Config{Registerer: reg}), reg
}

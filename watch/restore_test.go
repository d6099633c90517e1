package watch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	for _, balanced := range []bool{false, true} {
		t.Run(fmt.Sprintf("same-count=%v", balanced), func(t *testing.T) { restoredBackup(t, balanced) })
	}
}

func restoredBackup(t *testing.T, balanced bool) {
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

	proxy, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
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
	m := startMirror(t, cli, watch.Config{Registerer: reg})

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
	for rev <= late+2 { // other clients write outside the prefix, past the applied revision
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
	if n := resyncsBy(t, reg, watch.ReasonDiverged); n < 1 {
		t.Errorf("resyncs_total{reason=%q} %v, want 1", watch.ReasonDiverged, n)
	}
}

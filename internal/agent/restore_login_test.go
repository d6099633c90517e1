package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
)

// TestAgentListsAfterARestoreHeldItsToken: an agent logging in with a
// password, whose lists are failing (its role lost its read), while etcd
// is restored from a backup made before that (its read granted there),
// the backup's raft log behind the index named in the agent's token. etcd
// holds the agent's lists until their deadline instead of refusing the
// token, and lists alone open no stream, on which the client would log in
// again: the agent listed in vain until restarted (the restore review).
// Now a list that timed out makes it log in again: it serves the restored
// etcd's table, connected, and its status no longer says "permission
// denied".
func TestAgentListsAfterARestoreHeldItsToken(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	r := devetcd.NewTestRestorable(t)
	auth := devetcd.EnableTestAuth(t, r.Server, "/regiond/v1/")
	root, err := r.Server.ClientAs("root", devetcd.TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	rev := loadExample(t, root)
	root.Close()
	r.Backup()
	if root, err = r.Server.ClientAs("root", devetcd.TestRootPassword); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 300 { // the raft log moves on past the backup's
		if _, err := root.Put(ctx, "/moving-on", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	role, end := auth.User+"-rw", clientv3.GetPrefixRangeEnd(auth.Prefix)
	if _, err := root.RoleRevokePermission(ctx, role, auth.Prefix, end); err != nil {
		t.Fatal(err)
	}
	root.Close()

	dir := t.TempDir()
	cfg := tcpConfig(dir, r.Server.Endpoints, "node-restored")
	cfg.Username, cfg.Password = auth.User, auth.Password
	h := runAgent(t, dir, cfg)
	var st api.Status
	waitWithin(t, 30*time.Second, "the agent's lists refused", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return strings.Contains(st.EtcdError, "permission denied")
	})

	r.Restore()
	waitWithin(t, 2*time.Minute, "the restored etcd's table, connected", func() bool {
		st = api.Status{}
		h.get("/v1/status", &st)
		return st.Connected && st.Revision >= rev
	})
	if strings.Contains(st.EtcdError, "permission denied") {
		t.Errorf("etcd_error %q once the restored etcd answers: want the refusal gone", st.EtcdError)
	}
	if code, d := h.resolve("DE", "k"); code != 200 || d.Revision < rev {
		t.Errorf("DE after the restore: %d %+v; want the restored table (revision >= %d)", code, d, rev)
	}
}

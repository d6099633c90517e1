package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/snapshot"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// TestSnapshotErrorIsPublished: an agent whose snapshot index cannot be
// written (a directory at its path, as a full or read-only directory
// would fail it) serves the change from its API but not from its files:
// its status key says so (snapshot_error), so regionctl counts it not
// converged (--wait-converged said "converged" while the front doors
// routed by the old table: the host review), and /v1/status says it too.
// The first status put that confirms the change says so already (it waits
// for the snapshot writer: the files here are on disk, written from the
// writer's own goroutine after the change is served). Once the index can
// be written again, the retry writes it and the status key is cleared.
func TestSnapshotErrorIsPublished(t *testing.T) {
	t.Parallel() // mostly idle, waiting out etcd's and the agent's timeouts: run beside the other such tests
	h, cli := startExampleAgent(t)
	idx := snapshot.IndexPath(filepath.Join(h.dir, "shm", "table.json"))
	// The first write done (it may come after the first answer), nothing
	// writes the files again before the change below.
	waitFor(t, "the first snapshot index", func() bool { fi, err := os.Stat(idx); return err == nil && fi.Mode().IsRegular() })
	if err := os.RemoveAll(idx); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(idx, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	puts := cli.Watch(wctx, "/regiond/v1/agents/node-1")
	// A drain as regionctl writes it: with the epoch, so the status is put
	// at once (not a second after the last put, as for other changes).
	put, err := cli.Txn(context.Background()).Then(
		clientv3.OpPut(prefix+"pools/eu-west", `{"host":"eu-west.example.net:443","residency":"eu","status":"draining"}`),
		clientv3.OpPut(prefix+"epoch", "1000")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	first := func() routing.AgentStatus {
		for resp := range puts {
			for _, ev := range resp.Events {
				var st routing.AgentStatus
				if json.Unmarshal(ev.Kv.Value, &st) == nil && st.Revision >= put.Header.Revision {
					return st
				}
			}
		}
		t.Fatal("no status put confirmed the change within 30 s")
		return routing.AgentStatus{}
	}()
	// The cause, stable from retry to retry (each would be a new put if
	// it named the retry's temp file).
	if want := "write snapshot index " + idx + ": is a directory"; first.SnapshotError != want {
		t.Errorf("the first status put at the change's revision: snapshot_error %q, want %q", first.SnapshotError, want)
	}
	status := func() store.AgentInfo {
		t.Helper()
		resp, err := cli.Get(context.Background(), "/regiond/v1/agents/node-1")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the status key: %v %v", resp, err)
		}
		var st routing.AgentStatus
		if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
			t.Fatal(err)
		}
		return store.AgentInfo{AgentStatus: st}
	}
	waitFor(t, "snapshot_error in the status key", func() bool { return strings.Contains(status().SnapshotError, "table.idx") })
	if a := status(); a.Converged(1 << 40) {
		t.Errorf("an agent whose snapshot index is not written counts as converged: %+v", a.AgentStatus)
	}
	var st struct {
		SnapshotError string `json:"snapshot_error"`
	}
	if h.get("/v1/status", &st); !strings.Contains(st.SnapshotError, "table.idx") {
		t.Errorf("/v1/status snapshot_error %q, want the index's write named", st.SnapshotError)
	}
	if err := os.RemoveAll(idx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "snapshot_error cleared once the index is written", func() bool { return status().SnapshotError == "" })
	if a := status(); !a.Converged(1 << 40) {
		t.Errorf("written again, the agent is still not converged: %+v", a.AgentStatus)
	}
	st.SnapshotError = "" // absent from the answer when none
	if h.get("/v1/status", &st); st.SnapshotError != "" {
		t.Errorf("/v1/status snapshot_error %q once written again", st.SnapshotError)
	}
}

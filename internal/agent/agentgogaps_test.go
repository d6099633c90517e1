package agent_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/regiond/regiond/internal/agent"
)

// portInUse returns a loopback TCP address some listener holds, for starts
// that must be refused at --listen (the last check of agent.New).
func portInUse(t *testing.T) string {
	t.Helper()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	return taken.Addr().String()
}

// TestGapAgentgoRefusedStartRemovesTheCopyDirectoryItMade guards New's
// clean-up of the --snapshot-copy directory: a start refused (here, its
// --listen port in use) leaves behind no directory it made, the copy's
// and its missing parents included, as it does for the snapshot's and the
// socket's; one made by the wrong user (a start by hand as root) would
// refuse the service's next start. A directory it found stays.
func TestGapAgentgoRefusedStartRemovesTheCopyDirectoryItMade(t *testing.T) {
	base := t.TempDir()
	cfg := offlineConfig(base)
	cfg.Listen = portInUse(t)
	cfg.SnapshotCopy = filepath.Join(base, "lib", "regiond", "table.json")
	if a, err := agent.New(cfg); err == nil {
		stopOffline(t, a)
		t.Fatal("started on a port in use")
	}
	if _, err := os.Lstat(filepath.Join(base, "lib")); !os.IsNotExist(err) {
		t.Errorf("the refused start left %s behind (%v), which it made", filepath.Join(base, "lib"), err)
	}

	// The copy's directory there already: kept, with what is in it.
	base = t.TempDir()
	cfg = offlineConfig(base)
	cfg.Listen = portInUse(t)
	cfg.SnapshotCopy = filepath.Join(base, "lib", "table.json")
	mkdir(t, filepath.Dir(cfg.SnapshotCopy), 0o755)
	if a, err := agent.New(cfg); err == nil {
		stopOffline(t, a)
		t.Fatal("started on a port in use")
	}
	if _, err := os.Lstat(filepath.Dir(cfg.SnapshotCopy)); err != nil {
		t.Errorf("the refused start removed %s, which it found: %v", filepath.Dir(cfg.SnapshotCopy), err)
	}
}

// TestGapAgentgoRefusedStartKeepsTheLockInADirectoryItFound guards New's
// clean-up of the snapshot's lock file: removed after a refused start
// only from a directory that start made (and removes); in a snapshot
// directory it found, the lock file stays, as lockSnapshot requires
// (another agent may have it open: removed, a third agent would lock a new
// file while that one holds the old, and both write the files).
func TestGapAgentgoRefusedStartKeepsTheLockInADirectoryItFound(t *testing.T) {
	base := t.TempDir()
	cfg := offlineConfig(base)
	cfg.Listen = portInUse(t)
	mkdir(t, filepath.Dir(cfg.Snapshot), 0o755)
	if a, err := agent.New(cfg); err == nil {
		stopOffline(t, a)
		t.Fatal("started on a port in use")
	}
	lock := filepath.Join(filepath.Dir(cfg.Snapshot), ".table.json.lock")
	if _, err := os.Lstat(lock); err != nil {
		t.Errorf("the refused start removed the lock file %s from a directory it had not made: %v", lock, err)
	}
}

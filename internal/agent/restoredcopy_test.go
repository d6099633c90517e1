package agent_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/regiond/regiond/internal/agent"
)

// TestRefusedStartRestoresNoCopy: a start refused at --listen (a port in
// use) after a reboot, the snapshot file gone and --snapshot-copy holding
// a table, leaves no snapshot directory it made: the copy is restored only
// once nothing can refuse the start. Before, the restored table.json and
// table.idx kept the directory, and one made by a start by hand as root
// refused the service's next start (the agent review).
func TestRefusedStartRestoresNoCopy(t *testing.T) {
	base := t.TempDir()
	cfg := offlineConfig(base)
	cfg.Listen = portInUse(t)
	cfg.SnapshotCopy = filepath.Join(base, "lib", "table.json")
	mkdir(t, filepath.Dir(cfg.SnapshotCopy), 0o755)
	forgedTable(t, filepath.Dir(cfg.SnapshotCopy)) // a valid table as the copy
	if a, err := agent.New(cfg); err == nil {
		stopOffline(t, a)
		t.Fatal("started on a port in use")
	}
	dir := filepath.Dir(cfg.Snapshot)
	if ents, err := os.ReadDir(dir); !os.IsNotExist(err) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the refused start left %s, which it made, behind: %v %v", dir, names, err)
	}
}

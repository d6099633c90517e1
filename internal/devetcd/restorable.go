package devetcd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/regiond/regiond/internal/freeport"
)

// Restorable is an embedded etcd for tests of a restore from a backup:
// its data directory is copied while it is stopped (Backup) and put back
// later (Restore), the member and its client URL unchanged, its raft log
// and revision back where the copy left them.
type Restorable struct {
	t        testing.TB
	cfg      Config
	backup   string
	isBackup bool
	// Server is the running etcd; Backup and Restore replace it.
	Server *Server
}

// NewTestRestorable starts a Restorable in t.TempDir(), stopped when the
// test ends.
func NewTestRestorable(t testing.TB) *Restorable {
	t.Helper()
	base := t.TempDir()
	port, err := freeport.Get() // the client URL stays across restarts
	if err != nil {
		t.Fatal(err)
	}
	r := &Restorable{t: t, backup: filepath.Join(base, "backup"),
		cfg: Config{Dir: filepath.Join(base, "data"), ClientURL: fmt.Sprintf("http://127.0.0.1:%d", port)}}
	r.start()
	t.Cleanup(func() { r.Server.Close() })
	return r
}

func (r *Restorable) start() {
	r.t.Helper()
	srv, err := Start(context.Background(), r.cfg)
	if err != nil {
		r.t.Fatalf("start embedded etcd: %v", err)
	}
	r.Server = srv
}

// Backup stops etcd, copies its data directory and starts it again.
func (r *Restorable) Backup() {
	r.t.Helper()
	r.Server.Close()
	if err := os.CopyFS(r.backup, os.DirFS(r.cfg.Dir)); err != nil {
		r.t.Fatal(err)
	}
	r.isBackup = true
	r.start()
}

// Restore stops etcd, replaces its data directory with the backup's and
// starts it again.
func (r *Restorable) Restore() {
	r.t.Helper()
	if !r.isBackup {
		r.t.Fatal("devetcd: Restore without a Backup")
	}
	r.Server.Close()
	if err := os.RemoveAll(r.cfg.Dir); err != nil {
		r.t.Fatal(err)
	}
	if err := os.CopyFS(r.cfg.Dir, os.DirFS(r.backup)); err != nil {
		r.t.Fatal(err)
	}
	r.start()
}

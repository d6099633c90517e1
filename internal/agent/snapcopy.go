package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/safedir"
	"github.com/regiond/regiond/internal/snapshot"
	"github.com/regiond/regiond/routing"
)

// snapshotCopyEvery is how often the snapshot file is copied to
// --snapshot-copy (when it changed), besides once at shutdown.
const snapshotCopyEvery = time.Minute

// makeSnapshotCopyDir creates the directory of --snapshot-copy if missing
// (0755) and checks that it is the agent's own: a copy others could write
// would be loaded as the table after a reboot.
func (a *Agent) makeSnapshotCopyDir() ([]safedir.Made, error) {
	if a.cfg.SnapshotCopy == "" {
		return nil, nil
	}
	return safedir.EnsureMade(filepath.Dir(a.cfg.SnapshotCopy), "snapshot copy directory", 0o755, safedir.NoGroup)
}

// restoreSnapshotCopy is loadSnapshot's way when the snapshot file is
// missing (a reboot empties /run and /dev/shm) or does not decode (why
// says which): the copy on persistent disk, if any, becomes the seed, and
// the snapshot files are written from it at once, so the front doors
// serve the last table (its synced_at says how old: they mark it stale)
// even when etcd does not answer at boot. It reports whether it seeded.
func (a *Agent) restoreSnapshotCopy(why string) bool {
	if a.cfg.SnapshotCopy == "" {
		return false
	}
	b, err := atomicfile.ReadFile(a.cfg.SnapshotCopy)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			a.copyErrors.Inc()
			a.log.Warn("snapshot copy not loaded", "path", a.cfg.SnapshotCopy, "err", err)
		}
		return false
	}
	t, h, err := routing.LoadTableJSONHeader(b)
	if err != nil {
		a.copyErrors.Inc()
		a.log.Warn("snapshot copy not loaded: does not decode", "path", a.cfg.SnapshotCopy, "err", err)
		return false
	}
	a.seed, a.seedAt = t, h.SyncedAt
	if h.SyncedAt.IsZero() {
		a.seedAt = h.WrittenAt
	}
	opts := atomicfile.Options{EnsureDir: a.ensureSnapshotDir, Logger: a.log}
	for _, o := range []snapshot.Output{snapshot.NewTableJSON(a.cfg.Snapshot, opts), snapshot.NewIndex(snapshot.IndexPath(a.cfg.Snapshot), opts)} {
		err := o.Write(t, h, false)
		if err == nil {
			err = o.Finish()
		}
		o.Close()
		if err != nil {
			a.copyErrors.Inc()
			a.log.Error("snapshot files not written from the copy; serving it on the API only", "path", a.cfg.Snapshot, "err", err)
			break
		}
	}
	a.log.Warn(why+": serving its copy until synced with etcd", "copy", a.cfg.SnapshotCopy,
		"path", a.cfg.Snapshot, "revision", t.Revision(), "synced_at", a.seedAt)
	return true
}

// keepSnapshotCopy copies the snapshot file to --snapshot-copy every
// snapshotCopyEvery when it changed, and once more when ctx ends (a
// clean stop or a reboot keeps the newest table), after the snapshot
// writer's last write (writerDone closed: its last write at stop is a
// change its pacing held).
func (a *Agent) keepSnapshotCopy(ctx context.Context, writerDone <-chan struct{}) {
	if a.cfg.SnapshotCopy == "" || a.cfg.Snapshot == "" {
		return
	}
	var last [sha256.Size]byte
	tick := time.NewTicker(cmp.Or(a.copyEvery, snapshotCopyEvery))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			<-writerDone
			a.copySnapshot(last)
			return
		case <-tick.C:
			last = a.copySnapshot(last)
		}
	}
}

// copySnapshot writes the snapshot file's bytes to the copy, durably,
// unless their digest is last (the copy's: a digest, not the bytes, is
// kept between copies, so the agent holds no second table) or they do
// not decode as a table (a file truncated or put there by another hand
// never replaces a copy that would load); it returns the copy's digest
// (last when the file could not be read or the copy written).
func (a *Agent) copySnapshot(last [sha256.Size]byte) [sha256.Size]byte {
	b, err := atomicfile.ReadFile(a.cfg.Snapshot)
	if err != nil {
		return last
	}
	sum := sha256.Sum256(b)
	if sum == last {
		return last
	}
	if _, _, err := routing.LoadTableJSONHeader(b); err != nil {
		a.copyErrors.Inc()
		a.log.Warn("snapshot copy not written: the snapshot file does not decode", "path", a.cfg.Snapshot, "copy", a.cfg.SnapshotCopy, "err", err)
		return last
	}
	if err := atomicfile.WriteFile(a.cfg.SnapshotCopy, b, 0o600); err != nil {
		a.copyErrors.Inc()
		a.log.Warn("snapshot copy not written", "path", a.cfg.SnapshotCopy, "err", err)
		return last
	}
	a.copyLastWrite.SetToCurrentTime()
	return sum
}

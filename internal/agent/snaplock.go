package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// snapshotLockPath is the lock file of the snapshot files at path:
// .<base>.lock beside them.
func snapshotLockPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".lock")
}

// lockSnapshot takes an exclusive lock on the snapshot's lock file for
// the agent's life: a second agent given the same --snapshot (with
// another --socket, or another --prefix) wrote over the first's files,
// each its own table in turn, and removed the first's prepared temp files
// as a crashed run's leftovers. The kernel releases the lock when the
// process ends, however it ends; the file stays (removing it would let a
// third agent lock a new file while the second holds the old one). The
// file holds the holder's process id, for the refusal's message.
func lockSnapshot(path string) (*os.File, error) {
	lp := snapshotLockPath(path)
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--snapshot %s: lock: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(lp)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := "another process"
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				who = "process " + pid
			}
			return nil, fmt.Errorf("--snapshot %s: another regiond writes these files (%s holds %s); give each agent its own --snapshot", path, who, lp)
		}
		return nil, fmt.Errorf("--snapshot %s: lock %s: %w", path, lp, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

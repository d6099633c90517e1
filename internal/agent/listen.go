package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/regiond/regiond/internal/safedir"
)

// listenUnix creates the API socket, mode 0660, in a directory that is
// the agent's own (safedir: created 0750 if missing; not a symbolic link,
// owned by the agent's user, writable by no one else). A stale socket file
// left by a previous run is removed; any other file is refused.
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := safedir.Ensure(dir, "socket directory", 0o750, safedir.NoGroup); err != nil {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("socket path %s exists and is not a socket; refusing to remove it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("socket path %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on unix socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	return ln, nil
}

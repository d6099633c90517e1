package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/regiond/regiond/internal/safedir"
)

// unixSocket is the agent's API socket: its listener, and the file it
// made, so that the agent removes the file at exit only while it is still
// its own.
type unixSocket struct {
	net.Listener
	path string
	made os.FileInfo
}

// makeSocketDir makes the directory of the socket at path ready (created
// 0750 if missing, then safedir.Check) and returns the directories it
// created.
func makeSocketDir(path string) ([]safedir.Made, error) {
	made, err := safedir.EnsureMade(filepath.Dir(path), "socket directory", 0o750, safedir.NoGroup)
	if err != nil {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	return made, nil
}

// listenUnix creates the API socket, mode 0660, in a directory that is
// the agent's own (safedir: created 0750 if missing; not a symbolic link,
// owned by the agent's user, writable by no one else). A socket file that
// nothing answers on (left by a run that crashed) is removed; one that
// answers belongs to a running process (another agent with the same
// --socket) and is refused, as is any other file.
func listenUnix(path string) (*unixSocket, error) {
	if _, err := makeSocketDir(path); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("--socket %s exists and is not a socket; refusing to remove it", path)
		}
		if err := socketInUse(path); err != nil {
			return nil, err
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("socket path %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--socket %s: listen: %w", path, err)
	}
	// The agent removes the file itself, and only while it is its own
	// (Remove); net's would remove whatever is at the path when it closes.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	made, err := os.Lstat(path)
	if err == nil {
		err = os.Chmod(path, 0o660)
	}
	if err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	return &unixSocket{Listener: ln, path: path, made: made}, nil
}

// socketInUse returns an error when a process accepts connections on the
// socket at path: removing the file would take its API from it without a
// word. A refused connection is a stale file.
func socketInUse(path string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("socket %s is in use: a running process (another regiond?) accepts connections on it; stop it, or give this agent another --socket", path)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	return fmt.Errorf("socket %s exists and could not be checked (%w); refusing to remove it", path, err)
}

// Remove removes the socket file if it is still the one the agent made:
// not a socket another process has put at the path since.
func (s *unixSocket) Remove() {
	if fi, err := os.Lstat(s.path); err == nil && os.SameFile(fi, s.made) {
		os.Remove(s.path)
	}
}

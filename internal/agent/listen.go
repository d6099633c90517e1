package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/regiond/regiond/internal/safedir"
)

// unixSocket is the agent's API socket: its listener, and the file it
// made, so that the agent removes the file at exit only while it is still
// its own. A socket file deleted while the agent runs is made again
// (check), its new listener taking the old one's place under Accept.
type unixSocket struct {
	path   string
	mu     sync.Mutex
	ln     net.Listener // the listener of the file at path, made
	made   os.FileInfo
	closed bool
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
	ln, made, err := bindUnix(path)
	if err != nil {
		return nil, err
	}
	return &unixSocket{ln: ln, path: path, made: made}, nil
}

// bindUnix listens on a new socket file at path, mode 0660, and returns
// the file it made.
func bindUnix(path string) (net.Listener, os.FileInfo, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, nil, fmt.Errorf("--socket %s: listen: %w", path, err)
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
		return nil, nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	return ln, made, nil
}

// Accept accepts a connection on the current listener; when check has
// replaced it meanwhile, on the new one.
func (s *unixSocket) Accept() (net.Conn, error) {
	for {
		s.mu.Lock()
		ln := s.ln
		s.mu.Unlock()
		c, err := ln.Accept()
		if err == nil {
			return c, nil
		}
		s.mu.Lock()
		replaced := s.ln != ln && !s.closed
		s.mu.Unlock()
		if !replaced {
			return nil, err
		}
	}
}

// Close closes the current listener; check makes no other after it.
func (s *unixSocket) Close() error {
	s.mu.Lock()
	s.closed = true
	ln := s.ln
	s.mu.Unlock()
	return ln.Close()
}

// Addr returns the current listener's address.
func (s *unixSocket) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ln.Addr()
}

// check makes the socket file again when it is gone (deleted while the
// agent runs: by hand, or by a cleaner of /run), the new listener taking
// the old one's place: the API had been unreachable at the path, with no
// word, until a restart. It reports whether it made it, and an error when
// the path holds another file (not the agent's to remove) or the file
// could not be made.
func (s *unixSocket) check() (bool, error) {
	s.mu.Lock()
	made, closed := s.made, s.closed
	s.mu.Unlock()
	if closed {
		return false, nil
	}
	fi, err := os.Lstat(s.path)
	switch {
	case err == nil && os.SameFile(fi, made):
		return false, nil
	case err == nil:
		return false, fmt.Errorf("socket %s was replaced by another file: the API is no longer reachable there (this agent does not remove a file it did not make; restart it, or give it another --socket)", s.path)
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("socket %s: %w", s.path, err)
	}
	if _, err := makeSocketDir(s.path); err != nil {
		return false, err
	}
	ln, made, err := bindUnix(s.path)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	old, closed := s.ln, s.closed
	if !closed {
		s.ln, s.made = ln, made
	}
	s.mu.Unlock()
	if closed {
		ln.Close()
		os.Remove(s.path)
		return false, nil
	}
	old.Close()
	return true, nil
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
	s.mu.Lock()
	made := s.made
	s.mu.Unlock()
	if fi, err := os.Lstat(s.path); err == nil && os.SameFile(fi, made) {
		os.Remove(s.path)
	}
}

// socketCheck is how often the agent checks that its socket file is there.
const socketCheck = 2 * time.Second

// keepSocket makes the API socket's file again, within socketCheck, when
// it is deleted while the agent runs, until ctx is done. Each failure is
// logged once, until it changes or the socket is back.
func (a *Agent) keepSocket(ctx context.Context) {
	if a.sock == nil {
		return
	}
	tick := time.NewTicker(socketCheck)
	defer tick.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		remade, err := a.sock.check()
		switch {
		case err != nil && err.Error() != lastErr:
			lastErr = err.Error()
			a.log.Error("API socket", "err", err)
		case err == nil:
			lastErr = ""
		}
		if remade {
			a.log.Warn("the API socket file was deleted while the agent ran; made again", "socket", a.sock.path)
		}
	}
}

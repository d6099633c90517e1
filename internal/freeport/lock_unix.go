//go:build unix && !solaris && !aix

package freeport

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// usableDir makes dir (0700) when it is missing and checks that it is a
// directory, not a symbolic link, owned by this user and closed to others:
// another user who made it first could otherwise hold every port's lock,
// or plant links.
func usableDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case !ok || int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s is not this user's", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is open to others (%v)", dir, fi.Mode().Perm())
	}
	return nil
}

// reserve takes the lock on port's file in dir and returns the file
// holding it, or errHeld when another open file (of any process) holds it.
func reserve(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errHeld
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

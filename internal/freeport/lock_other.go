//go:build !unix || solaris || aix

package freeport

import (
	"errors"
	"os"
)

// usableDir reports no lock directory here: without flock, Get's ports
// are reserved within the process only.
func usableDir(string) error { return errors.New("no file locks on this system") }

// reserve is never called without a usable directory.
func reserve(string, int) (*os.File, error) { return nil, errors.New("no file locks on this system") }

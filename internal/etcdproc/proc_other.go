//go:build !linux

package etcdproc

import "syscall"

// sysProcAttr has nothing to add outside Linux: members left behind by a
// killed test process must be stopped by hand there.
func sysProcAttr() *syscall.SysProcAttr { return nil }

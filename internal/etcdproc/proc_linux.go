//go:build linux

package etcdproc

import "syscall"

// sysProcAttr makes the kernel kill a member when the test process dies
// without running its cleanups (a -timeout panic, a kill), so no etcd
// outlives the tests. (Pdeathsig is tied to the OS thread that started the
// member; the Go runtime does not end threads of goroutines that are not
// locked to them, and etcdproc locks none.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

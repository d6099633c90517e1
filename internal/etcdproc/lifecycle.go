package etcdproc

import (
	"syscall"
	"testing"
	"time"
)

// Kill ends member i at once with SIGKILL, as a crash or a power loss
// would: no leadership hand-off, no clean shutdown. It waits until the
// process has exited. Restart brings the member back.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	m := c.Members[i]
	if !m.Running() {
		return
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("etcdproc: %s (pid %d) did not exit after SIGKILL", m.Name, m.cmd.Process.Pid)
	}
}

// Restart starts a member that was killed again, from its data directory
// and with the flags of its first start, and waits up to timeout until it
// reports healthy (it has a leader and serves a linearizable read).
func (c *Cluster) Restart(i int, timeout time.Duration) {
	c.t.Helper()
	m := c.Members[i]
	if m.Running() {
		c.t.Fatalf("etcdproc: restart %s: it is still running", m.Name)
	}
	if err := m.start(m.bin, m.args); err != nil {
		c.t.Fatalf("etcdproc: restart %s: %v", m.Name, err)
	}
	if err := c.waitHealthy(timeout, []*Member{m}); err != nil {
		c.dumpLogs()
		c.t.Fatalf("etcdproc: restart %s: %v", m.Name, err)
	}
}

// Running reports whether the member's process is running.
func (m *Member) Running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// KillLeader kills the current leader (waiting up to 10s for one) and
// returns its index.
func (c *Cluster) KillLeader(t testing.TB) int {
	t.Helper()
	i := c.Leader(t)
	c.Kill(i)
	return i
}

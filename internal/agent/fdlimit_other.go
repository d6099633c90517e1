//go:build !unix

package agent

// fdLimit returns 0, 0: the file descriptor limit is unknown here.
func fdLimit() (limit, inUse uint64) { return 0, 0 }

//go:build dev && !nodev

package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevDataDirUnderUmask002 guards docs/README.md's "made 0750 when
// missing": a user whose umask is 002 (user private groups) gets a
// --data-dir the agent takes, not one writable by group that it refuses
// ("writable by group") on the first run. The API port is taken, so the
// run ends at the agent, before the embedded etcd. Not parallel: the
// umask is the process's.
func TestDevDataDirUnderUmask002(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	data := filepath.Join(t.TempDir(), "data")
	old := syscall.Umask(0o002)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = executeDev(ctx, nil, "--data-dir", data, "--client-url", "http://"+freeAddr(t), "--peer-url", "http://"+freeAddr(t),
		"--listen", taken.Addr().String(), "--config", "../../examples/routing.yaml", "--log-level", "error")
	cancel()
	syscall.Umask(old)
	if err == nil || strings.Contains(err.Error(), "writable by") {
		t.Errorf("regiond dev under umask 002 with the API port taken: %v, want the port in use, not the --data-dir refused", err)
	}
	if fi, err := os.Stat(data); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("--data-dir made under umask 002: %v %v, want mode 0750", fi, err)
	}
}

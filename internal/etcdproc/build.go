package etcdproc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// etcdPackage is the main package of the etcd server, at the version
// go.mod requires.
const etcdPackage = "go.etcd.io/etcd/server/v3"

var built struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of an etcd server binary built from the etcd
// version in go.mod. The first call in a test process runs
// `go build go.etcd.io/etcd/server/v3` from the module root (about a minute
// on a fresh machine, a few seconds with a warm Go build cache); later
// calls return the same path.
//
// The binary lives in the user cache directory under a name derived from
// the module root, and each build replaces it by an atomic rename, so test
// processes of several packages running at once (go test ./...) share one
// file without ever executing a half-written one.
func Binary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() { built.path, built.err = buildEtcd() })
	if built.err != nil {
		t.Fatalf("etcdproc: %v", built.err)
	}
	return built.path
}

func buildEtcd() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build etcd: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := moduleRoot(ctx, goTool)
	if err != nil {
		return "", err
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root))
	final := filepath.Join(dir, "etcd-"+hex.EncodeToString(sum[:6]))
	tmp := fmt.Sprintf("%s.%d-%d.tmp", final, os.Getpid(), time.Now().UnixNano())
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", tmp, etcdPackage)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build %s in %s: %v\n%s", etcdPackage, root, err, out)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("install the etcd binary: %w", err)
	}
	return final, nil
}

// moduleRoot returns the directory of the go.mod governing the test's
// working directory (the package directory under go test).
func moduleRoot(ctx context.Context, goTool string) (string, error) {
	out, err := exec.CommandContext(ctx, goTool, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module: cannot build etcd at the version go.mod requires")
	}
	return filepath.Dir(gomod), nil
}

func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "regiond-etcdproc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("etcd binary directory: %w", err)
	}
	return dir, nil
}

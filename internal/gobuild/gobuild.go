// Package gobuild builds binaries from this module for tests that run them
// as processes: the etcd server at the version go.mod requires, regiond,
// regionctl.
//
//	etcd := gobuild.Binary(t, "go.etcd.io/etcd/server/v3")
//	agent := gobuild.Binary(t, "./cmd/regiond", "-tags", "nodev")
//
// The first call for a package in a test process runs `go build` from the
// module root (about a minute on a fresh machine, a few seconds with a warm
// Go build cache); later calls return the same path. Binaries live in the
// user cache directory under names derived from the module root, the
// package, the flags and the environment go build reads (GOFLAGS,
// CGO_ENABLED, …); each build replaces its file by an atomic rename,
// so the test processes of several packages running at once (go test
// ./...) share one file without ever executing a half-written one.
package gobuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type result struct {
	once sync.Once
	path string
	err  error
}

var (
	mu    sync.Mutex
	built = map[string]*result{}
)

// Binary returns the path of pkg (an import path, or a path relative to
// the module root such as "./cmd/regiond") built with the given go build
// flags. It fails the test when the build fails.
func Binary(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	p, err := Build(pkg, flags...)
	if err != nil {
		t.Fatalf("gobuild: %v", err)
	}
	return p
}

// Build is Binary without a test: it returns the error.
func Build(pkg string, flags ...string) (string, error) {
	id := pkg + "\x00" + strings.Join(flags, "\x00")
	mu.Lock()
	r := built[id]
	if r == nil {
		r = &result{}
		built[id] = r
	}
	mu.Unlock()
	r.once.Do(func() { r.path, r.err = build(pkg, flags) })
	return r.path, r.err
}

func build(pkg string, flags []string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build %s: %w", pkg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	// The environment that changes what go build makes is in the name
	// too: test processes of two runs with other GOFLAGS at once (-race
	// and not) do not replace each other's binaries.
	env := []string{root, pkg, strings.Join(flags, "\x00")}
	for _, k := range []string{"GOFLAGS", "CGO_ENABLED", "GOOS", "GOARCH", "GOEXPERIMENT"} {
		env = append(env, k+"="+os.Getenv(k))
	}
	sum := sha256.Sum256([]byte(strings.Join(env, "\x00")))
	final := filepath.Join(dir, path.Base(strings.TrimSuffix(pkg, "/v3"))+"-"+hex.EncodeToString(sum[:6]))
	tmp := fmt.Sprintf("%s.%d-%d.tmp", final, os.Getpid(), time.Now().UnixNano())
	args := append(append([]string{"build", "-o", tmp}, flags...), pkg)
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), root, err, out)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("install the %s binary: %w", pkg, err)
	}
	return final, nil
}

var moduleRoot struct {
	once sync.Once
	dir  string
	err  error
}

// ModuleRoot returns the directory of the go.mod governing the working
// directory (the package directory under go test).
func ModuleRoot() (string, error) {
	moduleRoot.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			moduleRoot.err = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		gomod := strings.TrimSpace(string(out))
		if gomod == "" || gomod == os.DevNull {
			moduleRoot.err = errors.New("not inside a Go module: cannot build at the versions go.mod requires")
			return
		}
		moduleRoot.dir = filepath.Dir(gomod)
	})
	return moduleRoot.dir, moduleRoot.err
}

func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "regiond-gobuild")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("binary directory: %w", err)
	}
	return dir, nil
}

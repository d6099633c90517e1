//go:build !dev && !nodev

package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevBinaryIsPerCheckoutAndPrivate guards where the default build's
// `regiond dev` puts the dev binary it builds and then runs: in the user's
// cache directory, in a directory only the user may enter (mode 0700: in a
// shared cache another user could swap the binary run), one binary per
// checkout (two checkouts do not overwrite each other's build), the same
// one each time for a checkout (so later runs are quick).
func TestDevBinaryIsPerCheckoutAndPrivate(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	a, err := devBinary("/src/one/regiond")
	if err != nil {
		t.Fatal(err)
	}
	again, err := devBinary("/src/one/regiond")
	if err != nil {
		t.Fatal(err)
	}
	b, err := devBinary("/src/two/regiond")
	if err != nil {
		t.Fatal(err)
	}
	if a != again || a == b {
		t.Errorf("devBinary: %s, %s again, %s for another checkout; want the same path for a checkout, another for another", a, again, b)
	}
	if filepath.Dir(a) != filepath.Join(cache, "regiond-dev") || filepath.Dir(b) != filepath.Dir(a) {
		t.Errorf("devBinary: %s and %s, want both in %s", a, b, filepath.Join(cache, "regiond-dev"))
	}
	if fi, err := os.Stat(filepath.Dir(a)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the dev build directory: %v %v, want mode 0700", fi.Mode(), err)
	}
	// One another user could write to is refused, not built into.
	if err := os.Chmod(filepath.Dir(a), 0o777); err != nil {
		t.Fatal(err)
	}
	if p, err := devBinary("/src/one/regiond"); err == nil {
		t.Errorf("devBinary with its directory 0777: %s, want it refused", p)
	}
}

// TestDevRefusesAnotherModule guards the default build's `regiond dev` run
// inside a module that is not regiond's: it says so (a usage error naming
// the command to run), rather than building another module's cmd/regiond.
func TestDevRefusesAnotherModule(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/other\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	err := execDev([]string{"--help"})
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "not inside a checkout") || !strings.Contains(err.Error(), `"example.com/other"`) {
		t.Fatalf("regiond dev in another module: %v (exit %d), want a usage error saying it is not a checkout of regiond", err, exitCode(err))
	}
}

// TestNodevBuild guards the packaged build (-tags nodev, the .deb's
// /usr/bin/regiond): `regiond dev` is refused as a usage error (exit 2)
// saying where dev mode is, not run and not a silent success; and the
// agent stops cleanly (exit 0) on SIGTERM, systemd's stop (main's signal
// handling: otherwise the signal kills it, leaving its socket and status
// key behind).
func TestNodevBuild(t *testing.T) {
	bin := buildRegiond(t, "nodev")
	out, err := exec.Command(bin, "dev", "--listen", freeAddr(t)).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "regiond: this regiond was built with -tags nodev") ||
		!strings.Contains(string(out), "go run ./cmd/regiond dev") {
		t.Fatalf("regiond dev (-tags nodev): %v\n%s\nwant exit 2 saying it was built without dev", err, out)
	}
	// No etcd answers: the agent serves /healthz all the same.
	var log bytes.Buffer
	listen := freeAddr(t)
	agent := exec.Command(bin, "--endpoints", "http://"+freeAddr(t), "--socket", "", "--snapshot", "",
		"--listen", listen, "--log-level", "warn")
	agent.Stdout, agent.Stderr = &log, &log
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- agent.Wait() }()
	up := false
	for i := 0; i < 100 && !up; i++ {
		time.Sleep(50 * time.Millisecond)
		if resp, err := http.Get("http://" + listen + "/healthz"); err == nil {
			up = resp.StatusCode == 200
			resp.Body.Close()
		}
	}
	agent.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-waitErr:
		if !up || err != nil {
			t.Fatalf("regiond (-tags nodev): served %v; after SIGTERM: %v, want a clean exit\n%s", up, err, log.String())
		}
	case <-time.After(15 * time.Second):
		agent.Process.Kill()
		<-waitErr
		t.Fatalf("regiond (-tags nodev) still running 15s after SIGTERM\n%s", log.String())
	}
}

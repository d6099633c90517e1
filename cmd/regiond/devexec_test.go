//go:build !dev && !nodev

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDefaultBuildRunsDev runs the README's command the way a newcomer's
// `go run ./cmd/regiond dev` does: a default build (no embedded etcd) hands
// `dev` to the -tags dev build through the go command, which serves
// decisions from the example config, and Ctrl-C (SIGINT to the process
// group, as a terminal sends it) stops it cleanly.
func TestDefaultBuildRunsDev(t *testing.T) {
	bin := buildRegiond(t)
	listen := freeAddr(t)
	var out bytes.Buffer
	cmd := exec.Command(bin, "dev", "--data-dir", t.TempDir(), "--client-url", "http://"+freeAddr(t), "--listen", listen,
		"--config", "../../examples/routing.yaml", "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A cache directory of its own, so that this run is the checkout's
	// first (the go command's build cache stays the warm one).
	cmd.Env = devCacheEnv(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	stop := func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-waitErr }
	// The first run builds the dev binary: bounded generously, by a count.
	var d struct{ Pool, Route string }
	ok := false
	for i := 0; i < 3000 && !ok; i++ {
		select {
		case err := <-waitErr:
			t.Fatalf("regiond dev exited before serving (%v)\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := http.Get("http://" + listen + "/v1/resolve?country=PL&key=viewer-42")
		if err != nil {
			continue
		}
		ok = resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&d) == nil
		resp.Body.Close()
	}
	if !ok || d.Route != "PL" || !strings.HasPrefix(d.Pool, "eu-") {
		stop()
		t.Fatalf("no PL decision from regiond dev (got %+v)\n%s", d, out.String())
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case err := <-waitErr:
		// The dev build runs in the process's place (not under go run,
		// which would exit 1 whatever it did): a clean stop is exit 0.
		if err != nil {
			t.Fatalf("regiond dev exited with %v after Ctrl-C\n%s", err, out.String())
		}
		if s := out.String(); strings.Contains(s, "panic") || strings.Contains(s, "level=ERROR") || strings.Contains(s, "exit status") {
			t.Fatalf("regiond dev did not stop cleanly after Ctrl-C:\n%s", s)
		}
	case <-time.After(60 * time.Second):
		stop()
		t.Fatalf("regiond dev still running 60 s after Ctrl-C\n%s", out.String())
	}
	for i := 0; syscall.Kill(-cmd.Process.Pid, 0) == nil; i++ {
		if i == 600 {
			stop()
			t.Fatal("a process of regiond dev's group is still running after Ctrl-C")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The first build said it was building (it takes a minute on a new
	// machine, silent it looked hung); a later run builds quickly and
	// says nothing of it.
	const building = "regiond dev: building the dev binary, the first time for this checkout"
	if !strings.Contains(out.String(), building) {
		t.Errorf("regiond dev's first run did not say it was building the dev binary:\n%s", out.String())
	}
	again := exec.Command(bin, "dev", "--help")
	again.Env = cmd.Env
	if b, err := again.CombinedOutput(); err != nil || strings.Contains(string(b), building) || !strings.Contains(string(b), "--client-url") {
		t.Errorf("regiond dev --help after the first build: %v; want the dev build's help, and no word of building:\n%s", err, b)
	}
}

// devCacheEnv is the environment with a user cache directory of the
// test's own (XDG_CACHE_HOME, where regiond dev keeps its build) and the
// go command's build cache as it is.
func devCacheEnv(t *testing.T) []string {
	t.Helper()
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	return append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir(), "GOCACHE="+strings.TrimSpace(string(gocache)))
}

// TestDevOutsideTheModule: without a checkout to build from, `regiond dev`
// says what to do instead of failing obscurely.
func TestDevOutsideTheModule(t *testing.T) {
	cmd := exec.Command(buildRegiond(t), "dev")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "go run ./cmd/regiond dev") || !strings.Contains(string(out), "not inside a checkout") {
		t.Fatalf("regiond dev outside the module: %v\n%s", err, out)
	}
}

// TestDevPassesTheExitCodeOn: the default build's `regiond dev` runs the
// dev build in its place, so a mistyped flag is exit 2 with the flag it
// meant, as in the dev build, not the go command's "exit status 2" and 1.
func TestDevPassesTheExitCodeOn(t *testing.T) {
	out, err := exec.Command(buildRegiond(t), "dev", "--listn", "127.0.0.1:0").CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "unknown flag: --listn; did you mean --listen?") || strings.Contains(string(out), "exit status") {
		t.Fatalf("regiond dev --listn: %v\n%s", err, out)
	}
}

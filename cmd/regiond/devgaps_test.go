//go:build dev && !nodev

package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
)

// TestDevFlagDefaultsAreTheDocs guards regiond dev's flag defaults, as
// docs/README.md lists them (the README's `go run ./cmd/regiond dev` and
// its curl to 127.0.0.1:7420 rely on them), and that dev has none of the
// flags that name etcd or TLS (its etcd is the embedded one).
func TestDevFlagDefaultsAreTheDocs(t *testing.T) {
	docs, err := os.ReadFile("../../docs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	prose := strings.Join(strings.Fields(string(docs)), " ")
	fs := newDevCommand().Flags()
	for name, want := range map[string]string{
		"data-dir":   "./.regiond-dev",
		"client-url": "http://127.0.0.1:2379",
		"listen":     "127.0.0.1:7420",
		"config":     "examples/routing.yaml",
		"snapshot":   "", // <data-dir>/table.json: TestDevRunLayout
		"peer-url":   "", // a free loopback port
	} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("regiond dev has no --%s", name)
			continue
		}
		if f.DefValue != want {
			t.Errorf("regiond dev --%s defaults to %q, want %q (docs/README.md)", name, f.DefValue, want)
		}
		if want != "" && !strings.Contains(prose, "`--"+name+"` (default `"+want+"`") &&
			!strings.Contains(prose, "`--"+name+"` (the embedded etcd, default `"+want+"`") {
			t.Errorf("docs/README.md does not give --%s's default as %q", name, want)
		}
	}
	for _, name := range []string{"endpoints", "status-endpoints", "cacert", "cert", "key", "user", "socket", "snapshot-copy"} {
		if fs.Lookup(name) != nil {
			t.Errorf("regiond dev has --%s; docs/README.md: no --endpoints, TLS or file flags but --snapshot", name)
		}
	}
}

// TestDevRefusesURLsNotLoopbackHTTP guards --peer-url's and --client-url's
// checks: only an http:// loopback URL with a port and no path
// (docs/README.md) is taken (the embedded etcd has no certificate for
// https; a client URL without its port was refused naming --endpoints,
// which dev has not); another is refused
// as a usage error naming the flag, before the embedded etcd starts and
// before --data-dir is made (the dev review: an https --client-url failed
// only after the agent was made, with a hint about ports in use, and left
// an empty --data-dir).
func TestDevRefusesURLsNotLoopbackHTTP(t *testing.T) {
	for _, tc := range []struct {
		flag, client, peer string
		extra              []string
	}{
		{"--peer-url", "http://" + freeAddr(t), "https://" + freeAddr(t), nil},
		{"--peer-url", "http://" + freeAddr(t), "unix://" + freeAddr(t), nil},
		{"--client-url", "https://" + freeAddr(t), "http://" + freeAddr(t), nil},
		{"--client-url", "http://127.0.0.1", "http://" + freeAddr(t), nil},
		{"--client-url", "http://" + freeAddr(t) + "/sub", "http://" + freeAddr(t), nil},
		// A flag refused after the URLs (the agent's): no directory either.
		{"--log-level", "http://" + freeAddr(t), "http://" + freeAddr(t), []string{"--log-level", "bogus"}},
	} {
		data := filepath.Join(t.TempDir(), "data")
		// Bounded: a URL taken would run regiond dev until its context ends.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := executeDev(ctx, nil, append([]string{"--data-dir", data, "--client-url", tc.client,
			"--listen", freeAddr(t), "--peer-url", tc.peer, "--config", "../../examples/routing.yaml"}, tc.extra...)...)
		cancel()
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("--client-url %s --peer-url %s: %v (exit %d), want a usage error naming %s", tc.client, tc.peer, err, exitCode(err), tc.flag)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("--client-url %s --peer-url %s: --data-dir made (%v)", tc.client, tc.peer, err)
		}
	}
}

// TestDevRunLayout guards where regiond dev puts its files and the data
// directory's mode: an existing --data-dir writable by group (mkdir with
// umask 002) is refused, naming it, and keeps its mode (it may be the
// checkout or a home directory: the dev review found it chmodded); a
// missing one is made 0750; the socket is <data-dir>/regiond.sock and the
// snapshot <data-dir>/table.json (docs/README.md), both absolute; a
// second run on the same data (a store holding a config) starts even with
// a --config that does not exist, and a relative --snapshot is taken
// relative to the working directory.
func TestDevRunLayout(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("data", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod("data", 0o775); err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	common := []string{"--data-dir", "data", "--client-url", "http://" + freeAddr(t), "--peer-url", "http://" + freeAddr(t),
		"--listen", listen, "--log-level", "error"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := executeDev(ctx, nil, common...)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "--data-dir "+filepath.Join(dir, "data")) || !strings.Contains(err.Error(), "writable by group") {
		t.Fatalf("regiond dev in a --data-dir of mode 0775: %v, want it refused naming the directory", err)
	}
	if fi, err := os.Stat("data"); err != nil || fi.Mode().Perm() != 0o775 {
		t.Fatalf("a refused --data-dir's mode changed: %v %v", fi.Mode(), err)
	}
	if err := os.Remove("data"); err != nil {
		t.Fatal(err)
	}
	example := filepath.Join(devRepoRootAbs, "examples/routing.yaml")
	data := filepath.Join(dir, "data")
	for run, tc := range []struct {
		args     []string
		snapshot string
		want     string
	}{
		{[]string{"--config", example}, filepath.Join(data, "table.json"), "loaded " + example + " into the empty store (epoch 1)"},
		{[]string{"--config", "no-such.yaml", "--snapshot", "rel/table.json"}, filepath.Join(dir, "rel/table.json"), "store already holds a config (epoch 1); not loading no-such.yaml"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		out := &logbuf.Buffer{}
		done := make(chan error, 1)
		go func() { done <- executeDev(ctx, out, append(common, tc.args...)...) }()
		up := false
		for i := 0; i < 200 && !up; i++ {
			select {
			case err := <-done:
				cancel()
				t.Fatalf("run %d: regiond dev returned %v before serving\n%s", run+1, err, out.String())
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := http.Get("http://" + listen + "/v1/status")
			if err == nil {
				up = resp.StatusCode == 200
				resp.Body.Close()
			}
		}
		var fails []string
		if !up {
			fails = append(fails, "not serving on --listen")
		}
		if fi, err := os.Lstat(filepath.Join(data, "regiond.sock")); err != nil || fi.Mode().Type() != os.ModeSocket {
			fails = append(fails, "no socket at <data-dir>/regiond.sock")
		}
		for i := 0; i < 100; i++ { // the first write follows the first read
			if _, err := os.Stat(tc.snapshot); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := os.Stat(tc.snapshot); err != nil {
			fails = append(fails, "no snapshot at "+tc.snapshot)
		}
		if fi, err := os.Stat(data); err != nil || fi.Mode().Perm()&^0o750 != 0 {
			fails = append(fails, "--data-dir not made 0750 (less the umask)")
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				fails = append(fails, "stopped with "+err.Error())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("run %d: regiond dev still running 20s after its stop\n%s", run+1, out.String())
		}
		for _, w := range []string{tc.want, "snapshot:  " + tc.snapshot, "unix socket " + filepath.Join(data, "regiond.sock")} {
			if !strings.Contains(out.String(), w) {
				fails = append(fails, "output lacks "+w)
			}
		}
		if len(fails) > 0 {
			t.Fatalf("run %d: %s\n%s", run+1, strings.Join(fails, "; "), out.String())
		}
	}
}

// TestDevMissingConfigIntoAnEmptyStore guards a --config that cannot be
// read when the store is empty: a usage error (exit 2) naming --config,
// and nothing written into the store.
func TestDevMissingConfigIntoAnEmptyStore(t *testing.T) {
	srv := devetcd.NewTest(t)
	missing := filepath.Join(t.TempDir(), "no-such.yaml")
	cfg, readErr := readSeedConfig(missing)
	if cfg != nil || readErr == nil {
		t.Fatalf("readSeedConfig of a missing file: %v %v", cfg, readErr)
	}
	cmd := &cobra.Command{}
	cmd.SetOut(&bytes.Buffer{})
	got, err := seedConfig(context.Background(), srv, t.TempDir(), "/dev-missing", missing, cfg, readErr, cmd)
	if err == nil || got != nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "--config") {
		t.Fatalf("seed from a missing --config: %v %v (exit %d), want a usage error naming --config", got, err, exitCode(err))
	}
	cli := devetcd.NewTestClient(t, srv)
	resp, err := cli.Get(context.Background(), "/dev-missing/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("the store after a missing --config: %v keys (%v), want none", resp, err)
	}
}

// devRepoRootAbs is the repository root, made absolute before any test
// changes directory (TestDevRunLayout does).
var devRepoRootAbs, _ = filepath.Abs("../..")

// executeDev runs `regiond dev ARGS…` in this process, its output on out
// (discarded when nil).
func executeDev(ctx context.Context, out *logbuf.Buffer, args ...string) error {
	cmd := newRootCommand()
	cmd.SetArgs(append([]string{"dev"}, args...))
	var w interface{ Write([]byte) (int, error) } = &bytes.Buffer{}
	if out != nil {
		w = out
	}
	cmd.SetOut(w)
	cmd.SetErr(w)
	return cmd.ExecuteContext(ctx)
}

//go:build dev && !nodev

package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// TestDevRunsAndStopsOnInterrupt runs the README's run command as an
// operator would: it serves decisions from the example config, and Ctrl-C
// stops it cleanly; a second run keeps the data and does not reload.
func TestDevRunsAndStopsOnInterrupt(t *testing.T) {
	bin := buildRegiond(t, "dev")
	data := t.TempDir()
	etcdURL, listen := "http://"+freeAddr(t), freeAddr(t)
	example, err := os.ReadFile("../../examples/routing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(t.TempDir(), "edited.yaml")
	pl := "PL: {targets: [{pool: eu-central, weight: 70}, {pool: eu-west, weight: 30}]"
	if !bytes.Contains(example, []byte(pl)) {
		t.Fatalf("examples/routing.yaml has no %q to edit", pl)
	}
	if err := os.WriteFile(edited, bytes.Replace(example, []byte(pl), []byte("PL: {targets: [{pool: eu-west, weight: 60}, {pool: eu-central, weight: 40}]"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 3; run++ {
		var out bytes.Buffer
		config := "../../examples/routing.yaml"
		if run == 3 { // edited since: not loaded, and said how to apply it
			config = edited
		}
		cmd := exec.Command(bin, "dev", "--data-dir", data, "--client-url", etcdURL, "--listen", listen,
			"--config", config, "--log-level", "warn")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var d struct{ Pool, Route string }
		ok := false
		for i := 0; i < 300 && !ok; i++ {
			time.Sleep(50 * time.Millisecond)
			resp, err := http.Get("http://" + listen + "/v1/resolve?country=PL&key=viewer-42")
			if err != nil {
				continue
			}
			ok = resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&d) == nil
			resp.Body.Close()
		}
		if !ok || d.Route != "PL" || !strings.HasPrefix(d.Pool, "eu-") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("run %d: no PL decision from regiond dev (got %+v)\n%s", run, d, out.String())
		}
		if run == 1 { // SIGHUP is no stop: said, and it serves on
			cmd.Process.Signal(syscall.SIGHUP)
			time.Sleep(200 * time.Millisecond)
			resp, err := http.Get("http://" + listen + "/v1/resolve?country=PL&key=viewer-42")
			if err != nil || resp.StatusCode != 200 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("after SIGHUP: %v %v\n%s", resp, err, out.String())
			}
			resp.Body.Close()
		}
		cmd.Process.Signal(syscall.SIGINT)
		waitErr := make(chan error, 1)
		go func() { waitErr <- cmd.Wait() }()
		select {
		case err := <-waitErr:
			if err != nil {
				t.Fatalf("run %d: regiond dev exited with %v after Ctrl-C\n%s", run, err, out.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-waitErr // the output is complete once Wait returned
			t.Fatalf("run %d: regiond dev still running 20s after Ctrl-C\n%s", run, out.String())
		}
		want := []string{"loaded ../../examples/routing.yaml into the empty store", "pool drain eu-central"}
		switch run {
		case 2:
			want = []string{"store already holds the config of ../../examples/routing.yaml (epoch 1)"}
		case 3:
			want = []string{"store already holds a config (epoch 1) that differs from " + edited + "; not loading it",
				"regionctl --endpoints=" + etcdURL + " diff -f " + edited, "regionctl --endpoints=" + etcdURL + " apply -f " + edited,
				"another --data-dir (or remove " + data + ")"}
		}
		for _, w := range append(want, "curl '", "country=PL&key=viewer-42") {
			if !strings.Contains(out.String(), w) {
				t.Fatalf("run %d output lacks %q:\n%s", run, w, out.String())
			}
		}
		if run == 1 && !strings.Contains(out.String(), "regiond: SIGHUP ignored: regiond has nothing to reload") {
			t.Fatalf("SIGHUP not said:\n%s", out.String())
		}
		if _, err := os.Stat(filepath.Join(data, "regiond.sock")); !os.IsNotExist(err) {
			t.Fatalf("run %d: socket left behind after a clean stop (%v)", run, err)
		}
	}
}

func TestFlagErrorsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"--listen", "0.0.0.0:7420"}, {"--prefix", "nope"}, {"--log-level", "loud"}} {
		cmd := newRootCommand()
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if err == nil || exitCode(err) != 2 {
			t.Errorf("regiond %v: err %v (exit %d), want a usage error (exit 2)", args, err, exitCode(err))
		}
	}
}

// TestDevHelpShowsTheCaps: regiond dev has the API's caps too.
func TestDevHelpShowsTheCaps(t *testing.T) { helpShowsTheCaps(t, "dev", "--help") }

// TestDevFailsBeforeStartingEtcd: a --config that does not parse, an API
// port in use, or a --client-url off loopback stops regiond dev before its
// etcd starts (no etcd data is left in --data-dir), naming the file's
// problem or the flag.
func TestDevFailsBeforeStartingEtcd(t *testing.T) {
	bin := buildRegiond(t, "dev")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("pools:\n  p: {host: h, residncy: eu}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a config that does not parse", []string{"--config", bad, "--listen", freeAddr(t)}, "residncy: unknown field"},
		{"the API port in use", []string{"--config", "../../examples/routing.yaml", "--listen", taken.Addr().String()}, "pick another port with --listen"},
		// The embedded etcd has no authentication: never off loopback.
		{"a client URL off loopback", []string{"--listen", freeAddr(t), "--client-url", "http://0.0.0.0:2379"}, `--client-url "http://0.0.0.0:2379": want a loopback http URL`},
		{"a peer URL off loopback", []string{"--listen", freeAddr(t), "--peer-url", "http://0.0.0.0:2380"}, `--peer-url "http://0.0.0.0:2380": want a loopback http URL`},
		{"a peer URL without its port", []string{"--listen", freeAddr(t), "--peer-url", "http://127.0.0.1"}, `--peer-url "http://127.0.0.1": want a loopback http URL with a port`},
	} {
		data := t.TempDir()
		cmd := exec.Command(bin, append([]string{"dev", "--data-dir", data, "--client-url", "http://" + freeAddr(t)}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v\n%s\nwant a failure naming %q", tc.name, err, out, tc.want)
		}
		if _, err := os.Stat(filepath.Join(data, "etcd")); !os.IsNotExist(err) {
			t.Errorf("%s: etcd data left in --data-dir (%v)", tc.name, err)
		}
	}
}

// TestDevEtcdPortInUseLeavesNoSocket: regiond dev whose etcd cannot
// listen (--client-url's port taken) fails saying so, and leaves no
// socket in --data-dir: the agent made before etcd is stopped as a stop
// does (its socket was left behind).
func TestDevEtcdPortInUseLeavesNoSocket(t *testing.T) {
	bin := buildRegiond(t, "dev")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	data := t.TempDir()
	out, err := exec.Command(bin, "dev", "--data-dir", data, "--client-url", "http://"+taken.Addr().String(), "--listen", freeAddr(t),
		"--config", "../../examples/routing.yaml").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pick another with --client-url") {
		t.Fatalf("etcd's port taken: %v\n%s\nwant a failure naming --client-url", err, out)
	}
	if _, err := os.Stat(filepath.Join(data, "regiond.sock")); !os.IsNotExist(err) {
		t.Fatalf("socket left in --data-dir (%v)\n%s", err, out)
	}
}

// TestDevPeerURLAndStopLog: --peer-url puts the embedded etcd's peer
// listener where it says (it took a random port, with no flag to move it),
// and a stop logs "stopping embedded etcd" before etcd stops (seconds with
// an agent's watch open, which were silent) and "embedded etcd stopped"
// after, both after the agent stopped.
func TestDevPeerURLAndStopLog(t *testing.T) {
	bin := buildRegiond(t, "dev")
	peer, listen := freeAddr(t), freeAddr(t)
	var out bytes.Buffer
	cmd := exec.Command(bin, "dev", "--data-dir", t.TempDir(), "--client-url", "http://"+freeAddr(t), "--peer-url", "http://"+peer,
		"--listen", listen, "--config", "../../examples/routing.yaml")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Kill()
		<-waitErr
	}
	up := false
	for i := 0; i < 300 && !up; i++ {
		time.Sleep(50 * time.Millisecond)
		resp, err := http.Get("http://" + listen + "/v1/status")
		if err == nil {
			up = resp.StatusCode == 200
			resp.Body.Close()
		}
	}
	if !up {
		stop()
		t.Fatalf("regiond dev did not serve\n%s", out.String())
	}
	c, err := net.DialTimeout("tcp", peer, 5*time.Second)
	if err != nil {
		stop()
		t.Fatalf("nothing listens on --peer-url %s: %v\n%s", peer, err, out.String())
	}
	c.Close()
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("regiond dev exited with %v after Ctrl-C\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		stop()
		t.Fatalf("regiond dev still running 30s after Ctrl-C\n%s", out.String())
	}
	log := out.String()
	agent, stopping, stopped := strings.Index(log, `msg="regiond agent stopped"`), strings.Index(log, `msg="stopping embedded etcd"`), strings.Index(log, `msg="embedded etcd stopped"`)
	if agent < 0 || stopping < agent || stopped < stopping {
		t.Fatalf("want the agent stopped, then \"stopping embedded etcd\", then \"embedded etcd stopped\" logged:\n%s", log)
	}
}

// TestTryTargetsFollowTheConfig: the start banner's examples use a
// country and a pool of the config in force, not the example fleet's.
func TestTryTargetsFollowTheConfig(t *testing.T) {
	cfg, err := routing.ParseConfig([]byte(`
pools:
  us-iad: {host: iad.example.net, residency: us, status: active}
  apac-sin: {host: sin.example.net, residency: apac, status: active}
routes:
  _default: {targets: [{pool: us-iad, weight: 100}]}
  JP: {targets: [{pool: apac-sin, weight: 100}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cc, pool := tryTargets(cfg); cc != "JP" || pool != "apac-sin" {
		t.Errorf("tryTargets: %s %s, want JP apac-sin", cc, pool)
	}
}

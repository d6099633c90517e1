package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/routing"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// regionctlBinary builds cmd/regionctl once per test run.
func regionctlBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			binErr = fmt.Errorf("building regionctl for the test: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "regionctl-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "regionctl")
		out, err := exec.Command(goTool, "build", "-o", binPath, "github.com/regiond/regiond/cmd/regionctl").CombinedOutput()
		if err != nil {
			binErr = &buildError{out: string(out), err: err}
		}
	})
	if binErr != nil {
		t.Fatalf("go build regionctl: %v", binErr)
	}
	return binPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// startHeartbeat runs `regionctl heartbeat` as a subprocess.
func (e *tenv) startHeartbeat(t *testing.T, bin, instance string) (*exec.Cmd, *logbuf.Buffer) {
	t.Helper()
	return e.startHeartbeatTTL(t, bin, instance, "2s")
}

// startHeartbeatTTL is startHeartbeat with a lease of ttl: a test that
// waits for no lease to end takes a long one, which a loaded machine's
// late keep-alives do not end under it.
func (e *tenv) startHeartbeatTTL(t *testing.T, bin, instance, ttl string) (*exec.Cmd, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, "--endpoints", strings.Join(testServer.Endpoints, ","), "--prefix", e.prefix,
		"heartbeat", "eu-central", "--instance", instance, "--addr", "10.0.0.1:443", "--ttl", ttl)
	out := &logbuf.Buffer{} // read while the process writes
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

// healthLease returns the lease of a health key; 0 when it is absent.
func (e *tenv) healthLease(instance string) int64 {
	e.t.Helper()
	resp, err := testClient.Get(context.Background(), e.ks.RoutingKey(routing.HealthKey("eu-central", instance)))
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	var h routing.Health
	if err := json.Unmarshal(resp.Kvs[0].Value, &h); err != nil || h.Addr != "10.0.0.1:443" || h.Since == "" {
		e.t.Fatalf("health value %s: %v", resp.Kvs[0].Value, err)
	}
	return resp.Kvs[0].Lease
}

// revokeHealthLease revokes the lease of a health key under its running
// heartbeat and returns it. On a busy machine the heartbeat may have
// re-granted on its own meanwhile: then the new lease is revoked.
func (e *tenv) revokeHealthLease(t *testing.T, instance string) int64 {
	t.Helper()
	for range 5 {
		lease := e.healthLease(instance)
		if lease == 0 {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		_, err := testClient.Revoke(context.Background(), clientv3.LeaseID(lease))
		if err == nil {
			return lease
		}
		t.Logf("revoke lease %x: %v; retrying", lease, err)
	}
	t.Fatal("could not revoke the heartbeat's lease")
	return 0
}

// TestHeartbeat runs two heartbeat processes with a 2s TTL: the keys live
// past the TTL, one re-grants after its lease is revoked under it and then
// vanishes within the TTL of a SIGKILL; the other is removed at once on
// SIGTERM.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	bin := regionctlBinary(t)
	e := newEnv(t)
	e.seed()
	killed, killedOut := e.startHeartbeat(t, bin, "fra-kill")
	termed, termedOut := e.startHeartbeat(t, bin, "fra-term")
	if _, ok := poll.Until(10*time.Second, func() bool { return e.healthLease("fra-kill") != 0 && e.healthLease("fra-term") != 0 }); !ok {
		t.Fatalf("health keys not written:\n%s\n%s", killedOut, termedOut)
	}
	time.Sleep(2500 * time.Millisecond) // longer than the TTL: kept alive
	if _, ok := poll.Until(time.Second, func() bool { return e.healthLease("fra-kill") != 0 && e.healthLease("fra-term") != 0 }); !ok {
		t.Fatal("health key expired while its heartbeat runs")
	}

	// Losing the lease under a running heartbeat: it grants a new one.
	lease := e.revokeHealthLease(t, "fra-kill")
	took, ok := poll.Until(5*time.Second, func() bool { l := e.healthLease("fra-kill"); return l != 0 && l != lease })
	if !ok {
		t.Fatalf("heartbeat did not re-grant after its lease was revoked:\n%s", killedOut)
	}
	t.Logf("re-granted %s after the lease was revoked", took.Round(time.Millisecond))

	if err := termed.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := termed.Wait(); err != nil {
		t.Fatalf("heartbeat on SIGTERM: %v\n%s", err, termedOut)
	}
	if e.healthLease("fra-term") != 0 {
		t.Fatal("health key still there right after SIGTERM")
	}

	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	took, ok = poll.Until(6*time.Second, func() bool { return e.healthLease("fra-kill") == 0 })
	t.Logf("health key gone %s after SIGKILL (TTL 2s)", took.Round(time.Millisecond))
	// The lease ends at most a TTL after its last keepalive; allow 2×TTL
	// for a busy machine (etcd's expiry is not exact, etcd#9395).
	if !ok || took > 4*time.Second {
		t.Fatalf("health key outlived SIGKILL by %s (TTL 2s)", took)
	}
}

// TestHeartbeatWaitsForEtcd: a heartbeat started while etcd is
// unreachable (an origin that boots first) retries in the process, a
// SIGTERM meanwhile exits 0, and once etcd listens the health key is
// written; a SIGTERM then revokes it.
func TestHeartbeatWaitsForEtcd(t *testing.T) {
	t.Parallel()
	bin := regionctlBinary(t)
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	const prefix = "/hbwait"
	// The pool exists when the heartbeat first reaches etcd (else it
	// exits 1: no such pool): stored beforehand by the same member,
	// listening elsewhere, in the data directory it restarts from.
	dir := t.TempDir()
	seedEtcd(t, dir, prefix+"/routing/"+routing.PoolKey("eu-central"), `{"host":"edge-fra-1.example.net:443","residency":"eu","status":"active","health_check":true}`)
	start := func(instance string) (*exec.Cmd, *logbuf.Buffer) {
		cmd := exec.Command(bin, "--endpoints", url, "--dial-timeout", "300ms", "--prefix", prefix,
			"heartbeat", "eu-central", "--instance", instance, "--addr", "10.0.0.1:443", "--ttl", "2s")
		out := &logbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, out
	}
	stopped, stoppedOut := start("fra-stop")
	waiting, waitingOut := start("fra-wait")
	for _, o := range []*logbuf.Buffer{stoppedOut, waitingOut} {
		if _, ok := poll.Until(30*time.Second, func() bool { return strings.Contains(o.String(), "heartbeat: etcd unreachable; retrying") }); !ok {
			t.Fatalf("no retry while etcd is unreachable:\n%s", o)
		}
	}
	if err := stopped.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := stopped.Wait(); err != nil {
		t.Fatalf("SIGTERM while waiting for etcd: %v, want exit 0\n%s", err, stoppedOut)
	}

	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: dir, ClientURL: url, PeerURL: seedPeerURL(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	key := prefix + "/routing/" + routing.HealthKey("eu-central", "fra-wait")
	exists := func() bool {
		r, err := cli.Get(context.Background(), key)
		return err == nil && len(r.Kvs) == 1 && r.Kvs[0].Lease != 0
	}
	if _, ok := poll.Until(60*time.Second, exists); !ok {
		t.Fatalf("health key %s not written once etcd listens:\n%s", key, waitingOut)
	}
	if err := waiting.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waiting.Wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, waitingOut)
	}
	if exists() {
		t.Fatal("health key still there right after SIGTERM")
	}
}

// seedEtcd starts an etcd member with data directory dir on a free client
// port, puts key=value and stops it; seedPeerURL(dir) is its peer URL, to
// restart it from dir elsewhere.
func seedEtcd(t *testing.T, dir, key, value string) {
	t.Helper()
	peer, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	if err := os.WriteFile(filepath.Join(dir, "peer-url"), []byte(peerURL), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: dir, PeerURL: peerURL})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(context.Background(), key, value); err != nil {
		t.Fatal(err)
	}
}

// seedPeerURL is the peer URL seedEtcd gave the member in dir.
func seedPeerURL(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "peer-url"))
	return string(b)
}

// TestHeartbeatPutsItsKeyBack: a running heartbeat keeps its key, not
// only its lease. A delete by hand is undone under the same lease, and a
// second heartbeat with the same --instance (and --addr: a different one
// is refused at its start, TestHeartbeatRefusesAnotherAddrsKey) is named
// as a conflict; when that one stops (revoking its lease, so the key
// goes), the first puts the key back, saying the other one's stop deleted
// it. Before, the key stayed gone while the process ran on: a live
// origin looked dead to every agent.
func TestHeartbeatPutsItsKeyBack(t *testing.T) {
	t.Parallel()
	bin := regionctlBinary(t)
	e := newEnv(t)
	e.seed()
	// Leases of 30 s: under load (16 on 2 cores) a 2 s lease ended
	// between late keep-alives, and a new one's put read as a fight.
	first, firstOut := e.startHeartbeatTTL(t, bin, "fra-keep", "30s")
	var lease int64
	if _, ok := poll.Until(10*time.Second, func() bool { lease = e.healthLease("fra-keep"); return lease != 0 }); !ok {
		t.Fatalf("health key not written:\n%s", firstOut)
	}
	key := e.ks.RoutingKey(routing.HealthKey("eu-central", "fra-keep"))

	if _, err := testClient.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if _, ok := poll.Until(5*time.Second, func() bool { return e.healthLease("fra-keep") == lease }); !ok {
		t.Fatalf("the deleted key was not put back under lease %x:\n%s", lease, firstOut)
	}
	if _, ok := poll.Until(5*time.Second, func() bool {
		return strings.Contains(firstOut.String(), "the marker was deleted by someone else (a hand edit such as etcdctl del, or another heartbeat with the same --instance stopping) while this heartbeat runs; put it back under its lease")
	}); !ok { // logged just after the put
		t.Fatalf("the put back is not logged:\n%s", firstOut)
	}

	// Put by hand without a lease: it would outlive the heartbeat (a
	// stopped origin alive for ever): taken back under the lease.
	if _, err := testClient.Put(context.Background(), key, `{"addr":"10.0.0.1:443","since":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	if _, ok := poll.Until(5*time.Second, func() bool { return e.healthLease("fra-keep") == lease }); !ok {
		t.Fatalf("the leaseless key was not taken back under lease %x:\n%s", lease, firstOut)
	}
	if _, ok := poll.Until(5*time.Second, func() bool {
		return strings.Contains(firstOut.String(), "the marker was put without a lease (it would outlive this process) while this heartbeat runs; put it back under its lease")
	}); !ok {
		t.Fatalf("the take-back is not logged:\n%s", firstOut)
	}

	second, secondOut := e.startHeartbeatTTL(t, bin, "fra-keep", "30s")
	var other int64
	if _, ok := poll.Until(10*time.Second, func() bool { other = e.healthLease("fra-keep"); return other != 0 && other != lease }); !ok {
		t.Fatalf("the second heartbeat did not put its key:\n%s", secondOut)
	}
	if _, ok := poll.Until(5*time.Second, func() bool {
		return strings.Contains(firstOut.String(), "the marker is held by another lease") && strings.Contains(firstOut.String(), "--instance must be unique")
	}); !ok {
		t.Fatalf("the conflict is not named:\n%s", firstOut)
	}
	if got := e.healthLease("fra-keep"); got != other {
		t.Fatalf("the first heartbeat fought for the key (lease %x, want the second's %x)", got, other)
	}
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second heartbeat on SIGTERM: %v\n%s", err, secondOut)
	}
	if _, ok := poll.Until(5*time.Second, func() bool { return e.healthLease("fra-keep") == lease }); !ok {
		t.Fatalf("the key was not put back under lease %x once the second heartbeat stopped (now %x):\n%s", lease, e.healthLease("fra-keep"), firstOut)
	}
	// Said as it is: the other heartbeat's stop deleted it (it said "the
	// marker was deleted while this heartbeat runs", as of a hand's del).
	if _, ok := poll.Until(5*time.Second, func() bool {
		return strings.Contains(firstOut.String(), "the marker was deleted by someone else (the other heartbeat with the same --instance, whose lease held it, stopped or died; or a hand edit) while this heartbeat runs; put it back under its lease") &&
			strings.Contains(firstOut.String(), fmt.Sprintf("other_lease=%x", other))
	}); !ok {
		t.Fatalf("the put back after the other heartbeat's stop is not logged as such:\n%s", firstOut)
	}
	// The second, with the same --addr, took the key over at its start
	// (as a restarted instance does) and said so.
	if !strings.Contains(secondOut.String(), "took over the marker from another lease with the same --addr") {
		t.Fatalf("the takeover is not logged:\n%s", secondOut)
	}
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil || e.healthLease("fra-keep") != 0 {
		t.Fatalf("first heartbeat on SIGTERM: %v, lease %x\n%s", err, e.healthLease("fra-keep"), firstOut)
	}
}

// TestPoolRmNamesLiveHealthKeys: removing a pool while a heartbeat keeps
// one of its health keys alive warns on stderr naming that key, and that
// its heartbeat keeps running (a pool re-created with that id would count
// it); the pool is removed all the same. It used to print just "removed",
// the heartbeat carrying on silently for ever.
func TestPoolRmNamesLiveHealthKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "pool", "set", "test-hb", "--host", "edge-hb-1.example.net:443", "--residency", "eu")
	lease, err := testClient.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = testClient.Revoke(context.Background(), lease.ID) })
	key := e.ks.RoutingKey(routing.HealthKey("test-hb", "fra-1"))
	if _, err := testClient.Put(context.Background(), key, `{"addr":"10.0.0.1:443","since":"2026-01-01T00:00:00Z"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	r := e.must(ExitOK, "pool", "rm", "test-hb", "--reason", "gone")
	want := "regionctl: warning: pool test-hb has 1 live health key(s): " + key + " (addr 10.0.0.1:443); their heartbeats keep running"
	if !strings.Contains(r.stdout, "pool test-hb: removed") || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "a pool created again with id test-hb would count them") {
		t.Fatalf("pool rm with a live health key: %s; want it removed and %q", r, want)
	}
	// A pool without health keys: no warning.
	e.must(ExitOK, "pool", "set", "test-hb", "--host", "edge-hb-1.example.net:443", "--residency", "eu")
	if _, err := testClient.Revoke(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	if r := e.must(ExitOK, "pool", "rm", "test-hb"); strings.Contains(r.stderr, "health key") {
		t.Fatalf("pool rm without health keys warns: %s", r)
	}
}

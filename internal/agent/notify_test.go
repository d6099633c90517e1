package agent_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
)

// notifySocket is a datagram socket as systemd's $NOTIFY_SOCKET, whose
// datagrams the returned channel carries.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	return path, listenNotify(t, path)
}

// listenNotify listens as systemd's $NOTIFY_SOCKET at path; the channel
// carries its datagrams.
func listenNotify(t *testing.T, path string) <-chan string {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan string, 64)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := c.Read(b)
			if err != nil {
				close(got)
				return
			}
			got <- string(b[:n])
		}
	}()
	return got
}

// nextNotification waits (bounded) for a datagram that satisfies ok and
// returns it, failing the test naming what it waited for and what came.
func nextNotification(t *testing.T, got <-chan string, what string, ok func(string) bool) string {
	t.Helper()
	var seen []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m, open := <-got:
			if !open {
				t.Fatalf("notify socket closed waiting for %s; got %q", what, seen)
			}
			if ok(m) {
				return m
			}
			seen = append(seen, m)
		case <-deadline:
			t.Fatalf("no notification %s within 30s; got %q", what, seen)
		}
	}
}

// TestNotifiesSystemd: under a unit of Type=notify the agent says READY=1
// once its API answers, then keeps systemd's one-line status of what it
// serves: the epoch and revision it follows, and when etcd goes away, the
// time it last confirmed them and why; at the end, STOPPING=1.
func TestNotifiesSystemd(t *testing.T) {
	srv, err := devetcd.Start(t.Context(), devetcd.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var closeOnce sync.Once
	stopEtcd := func() { closeOnce.Do(srv.Close) }
	t.Cleanup(stopEtcd)
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	rev := loadExample(t, cli)
	cli.Close()
	path, got := notifySocket(t)
	dir := t.TempDir()
	cfg := offlineConfig(dir)
	cfg.Endpoints, cfg.DialTimeout, cfg.StatusTTL = srv.Endpoints, time.Second, 2*time.Second
	t.Setenv("NOTIFY_SOCKET", path) // as systemd sets it for Type=notify
	h := runAgent(t, dir, cfg)

	ready := nextNotification(t, got, "READY=1", func(m string) bool { return strings.Contains(m, "READY=1") })
	var st api.Status
	if code := h.get("/v1/status", &st); code != 200 { // answered: the listeners were up at READY=1
		t.Fatalf("/v1/status after READY=1: %d", code)
	}
	if !strings.Contains(ready, "\nSTATUS=") {
		t.Fatalf("READY=1 without a status: %q", ready)
	}
	following := nextNotification(t, got, "the status of the table followed", func(m string) bool {
		return strings.HasPrefix(m, "STATUS=serving epoch ") && strings.HasSuffix(m, ", following etcd")
	})
	var epoch, revision int64
	if _, err := fmt.Sscanf(following, "STATUS=serving epoch %d (revision %d), following etcd", &epoch, &revision); err != nil || revision < rev {
		t.Fatalf("status %q (%v): want the revision of the loaded example, %d or later", following, err, rev)
	}

	url := srv.Endpoints[0]
	stopEtcd()
	away := nextNotification(t, got, "the status once etcd is away", func(m string) bool {
		return strings.Contains(m, ", last confirmed by etcd ") && strings.Contains(m, "etcd unreachable: "+url)
	})
	if !strings.HasPrefix(away, "STATUS=serving epoch ") || strings.Contains(away, "\n") {
		t.Fatalf("status with etcd away: %q; want one line naming what is served", away)
	}

	h.stop()
	nextNotification(t, got, "STOPPING=1", func(m string) bool { return strings.HasPrefix(m, "STOPPING=1\nSTATUS=stopping") })
}

// TestReadyIsSentAgainAndWatchdogPings: a READY=1 whose send failed (the
// notify socket not there yet) is sent again at the next tick, rather than
// never (systemd would wait for it until TimeoutStartSec, then kill the
// agent; the packaging review); under WatchdogSec= ($WATCHDOG_USEC for
// this pid) the agent sends WATCHDOG=1 every third of it, with etcd away
// too (the pings stand for the API answering, not for etcd).
func TestReadyIsSentAgainAndWatchdogPings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(t.TempDir(), "notify")
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "900000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	h := runAgent(t, dir, offlineConfig(dir)) // etcd away all along
	if code := h.get("/healthz", nil); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	// The agent's first READY=1 went nowhere; now systemd listens.
	got := listenNotify(t, path)
	nextNotification(t, got, "READY=1 sent again", func(m string) bool { return strings.HasPrefix(m, "READY=1\nSTATUS=") })
	for range 4 {
		nextNotification(t, got, "WATCHDOG=1", func(m string) bool { return m == "WATCHDOG=1" })
	}
}

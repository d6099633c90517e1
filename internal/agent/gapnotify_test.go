package agent

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

// seededAgent is an agent serving t (nil: none yet) from its snapshot,
// last confirmed at synced, etcd away for why ("": no word yet).
func seededAgent(t *routing.Table, synced time.Time, why string) (*Agent, *logbuf.Buffer) {
	var logs logbuf.Buffer
	a := &Agent{log: slog.New(slog.NewTextHandler(&logs, nil)), seed: t, seedAt: synced}
	if why != "" {
		a.etcdErr.Store(&why)
	}
	a.api = api.New(api.Config{Node: "node-1", Logger: a.log}, source{a})
	return a, &logs
}

// compiled is a table at revision 42 of kvs.
func compiled(kvs ...routing.KV) *routing.Table {
	return routing.Compile(42, kvs, nil, routing.CompileOptions{Now: time.Now()})
}

var (
	poolKV  = routing.KV{Key: "pools/eu-a", Value: []byte(`{"host":"eu-a.example.net","residency":"eu"}`)}
	routeKV = routing.KV{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"eu-a","weight":100}]}`)}
)

// TestGapStatusLineSaysWhatIsServed guards statusLine (systemd's STATUS=,
// docs/agent.md): the time last confirmed in UTC whatever its zone; a
// table without pools and refused keys (one is enough) named after a ";";
// with no table, "no routing table yet", and etcd's error when there is
// one; a long error cut to one bounded line.
func TestGapStatusLineSaysWhatIsServed(t *testing.T) {
	synced := time.Date(2024, 5, 1, 12, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	a, _ := seededAgent(compiled(poolKV, routeKV), synced, "etcd unreachable")
	if got, want := a.statusLine(), "serving epoch 0 (revision 42), last confirmed by etcd 2024-05-01 10:00:00 UTC; etcd unreachable"; got != want {
		t.Errorf("status line %q, want %q", got, want)
	}
	a, _ = seededAgent(compiled(routeKV), synced, "x")
	if got := a.statusLine(); !strings.Contains(got, "; the table has no pools") {
		t.Errorf("a table without pools: %q; want it named", got)
	}
	a, _ = seededAgent(compiled(poolKV, routeKV, routing.KV{Key: "pools/bad", Value: []byte(`{`)}), synced, "x")
	if got := a.statusLine(); !strings.Contains(got, "; 1 keys skipped") {
		t.Errorf("a table with one key skipped: %q; want it named", got)
	}
	a, _ = seededAgent(nil, time.Time{}, "")
	if got := a.statusLine(); got != "no routing table yet: listing etcd" {
		t.Errorf("no table, no error: %q", got)
	}
	a, _ = seededAgent(nil, time.Time{}, "etcd unreachable: http://127.0.0.1:1")
	if got := a.statusLine(); !strings.HasPrefix(got, "no routing table yet") || !strings.HasSuffix(got, "etcd unreachable: http://127.0.0.1:1") {
		t.Errorf("no table, etcd away: %q; want both said", got)
	}
	a, _ = seededAgent(nil, time.Time{}, strings.Repeat("é", 1000))
	if got := a.statusLine(); len([]rune(got)) > 300 || !strings.HasSuffix(got, "…") {
		t.Errorf("a 1000-character error: a line of %d characters; want it cut (…) to a short one", len([]rune(got)))
	}
}

// notifyListen listens as systemd's $NOTIFY_SOCKET at path.
func notifyListen(t *testing.T, path string) <-chan string {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan string, 256)
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := c.Read(b)
			if err != nil {
				return
			}
			got <- string(b[:n])
		}
	}()
	return got
}

// runNotify runs a.notifySystemd under a unit of Type=notify whose
// watchdog is watchdog (0: none) until the test ends.
func runNotify(t *testing.T, a *Agent, socket string, watchdog time.Duration) {
	t.Helper()
	t.Setenv("NOTIFY_SOCKET", socket)
	if watchdog > 0 {
		t.Setenv("WATCHDOG_USEC", strconv.FormatInt(watchdog.Microseconds(), 10))
		t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.notifySystemd(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// next returns the next datagram within 2 s.
func next(t *testing.T, got <-chan string, what string) string {
	t.Helper()
	select {
	case m := <-got:
		return m
	case <-time.After(2 * time.Second):
		t.Fatalf("no notification (%s) within 2 s", what)
		return ""
	}
}

// TestGapNotifyStatusIsOneLineSentOnce guards the STATUS= protocol: the
// line is one line (an error with a newline in it is joined), and a
// changed line is sent once, not again at every tick until the next
// change.
func TestGapNotifyStatusIsOneLineSentOnce(t *testing.T) {
	a, _ := seededAgent(nil, time.Time{}, "first\nsecond")
	path := filepath.Join(t.TempDir(), "notify")
	got := notifyListen(t, path)
	runNotify(t, a, path, 150*time.Millisecond) // ticks every 50 ms
	if m := next(t, got, "READY=1"); m != "READY=1\nSTATUS=no routing table yet (no snapshot): first second" {
		t.Fatalf("first notification %q; want READY=1 and a one-line status", m)
	}
	why := "changed"
	a.etcdErr.Store(&why)
	var statuses []string
	deadline := time.After(600 * time.Millisecond) // a dozen ticks
	for {
		select {
		case m := <-got:
			if strings.HasPrefix(m, "STATUS=") {
				statuses = append(statuses, m)
			}
			continue
		case <-deadline:
		}
		break
	}
	if len(statuses) != 1 || statuses[0] != "STATUS=no routing table yet (no snapshot): changed" {
		t.Fatalf("status notifications after one change, over a dozen ticks: %q; want the new line once", statuses)
	}
}

// TestGapNotifyFailureLoggedOnce guards send's memory of a failure: a
// notify socket that is not there is said once, not at every tick, and
// its return once.
func TestGapNotifyFailureLoggedOnce(t *testing.T) {
	a, logs := seededAgent(nil, time.Time{}, "")
	path := filepath.Join(t.TempDir(), "notify")
	runNotify(t, a, path, 150*time.Millisecond) // ticks every 50 ms, each failing
	time.Sleep(400 * time.Millisecond)
	if n := strings.Count(logs.String(), "cannot notify systemd"); n != 1 {
		t.Fatalf("a notify socket missing for 8 ticks: said %d times, want once:\n%s", n, logs.String())
	}
	got := notifyListen(t, path)
	// A tick's WATCHDOG=1 may pass before the next tick's READY=1.
	for m := next(t, got, "READY=1 sent again"); !strings.HasPrefix(m, "READY=1\n"); m = next(t, got, "READY=1 sent again") {
		if m != "WATCHDOG=1" {
			t.Fatalf("a notification before READY=1 once systemd listens: %q", m)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(logs.String(), "notifying systemd again"); n != 1 {
		t.Fatalf("the notify socket back: said %d times, want once:\n%s", n, logs.String())
	}
}

// TestGapWatchdogEveryThird guards the watchdog's period: WATCHDOG=1 every
// third of WatchdogSec= (docs/agent.md), so that two pings may be late
// before systemd kills the agent. Judged by the median of the gaps, which
// a loaded machine's odd late tick does not move.
func TestGapWatchdogEveryThird(t *testing.T) {
	a, _ := seededAgent(nil, time.Time{}, "")
	path := filepath.Join(t.TempDir(), "notify")
	got := notifyListen(t, path)
	runNotify(t, a, path, 600*time.Millisecond) // a third: 200 ms; a half: 300 ms
	var at []time.Time
	for len(at) < 7 {
		if m := next(t, got, "WATCHDOG=1"); m == "WATCHDOG=1" {
			at = append(at, time.Now())
		}
	}
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	if m := gaps[len(gaps)/2]; m > 250*time.Millisecond {
		t.Fatalf("WATCHDOG=1 gaps %v (median %v) under WatchdogSec=600ms; want a third of it, 200 ms", gaps, m)
	}
}

package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGapFDBudgetNeverGivesAnUnusableCap guards fdBudget's floor and its
// blocking cap: over every file descriptor limit from nothing to well
// past the caps, a budget it accepts fits the limit, leaves the blocking
// cap at least 1 (0 would be taken as the API's default, 128) and below
// the connection cap (a blocking query holds a connection: plain
// requests must find one), also when the lowered connection cap equals
// the blocking cap; and the smallest budget it takes (4 connections a
// listener) is taken.
func TestGapFDBudgetNeverGivesAnUnusableCap(t *testing.T) {
	for _, ls := range []int{1, 2} {
		for limit := uint64(64 + 20); limit < 64+20+2*300; limit++ {
			conns, blocking, err := fdBudget(256, 128, 64, ls, limit, 20)
			if err != nil {
				continue
			}
			if blocking < 1 || blocking >= conns || uint64(conns*ls)+20+64 > limit {
				t.Fatalf("limit %d, %d listeners: %d connections, %d blocking; want 1 <= blocking < connections, fitting the limit", limit, ls, conns, blocking)
			}
		}
	}
	if conns, blocking, err := fdBudget(256, 128, 64, 2, 64+20+2*128, 20); err != nil || conns != 128 || blocking != 64 {
		t.Fatalf("a budget of 128 connections a listener, 128 blocking: %d, %d, %v; want 128, 64", conns, blocking, err)
	}
	if conns, blocking, err := fdBudget(256, 128, 64, 2, 64+20+2*4, 20); err != nil || conns != 4 || blocking != 2 {
		t.Fatalf("4 connections a listener: %d, %d, %v; want 4, 2 (the smallest budget taken)", conns, blocking, err)
	}
	if _, _, err := fdBudget(256, 128, 64, 2, 64+20+2*3, 20); err == nil {
		t.Fatal("3 connections a listener accepted")
	}
}

// TestGapFDLimitReadsTheSoftLimitAndTheOpenFDs guards fdLimit: the limit
// is the soft one (what open fails at), not the hard one, and the
// descriptors in use are counted.
func TestGapFDLimitReadsTheSoftLimitAndTheOpenFDs(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	orig := rl
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig)
	soft := rl.Max - 1
	if soft > 1<<20 {
		soft = 1 << 20
	}
	rl.Cur = soft
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	limit, before := fdLimit()
	if limit != soft || before < 3 {
		t.Fatalf("fdLimit = %d, %d; want the soft limit %d (hard %d) and at least stdin, stdout and stderr", limit, before, soft, rl.Max)
	}
	dir := t.TempDir()
	for i := range 10 {
		f, err := os.Create(filepath.Join(dir, string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
	}
	if _, after := fdLimit(); after < before+10 {
		t.Fatalf("fds in use %d, then %d with 10 files opened: want at least %d", before, after, before+10)
	}
}

// TestGapAgentAppliesTheLoweredConnectionCap guards New's use of the
// fitted cap: under a file descriptor limit too low for
// --max-connections, the listener keeps the lowered cap (and its
// connections_limit gauge says it), not the flag's.
func TestGapAgentAppliesTheLoweredConnectionCap(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	orig := rl
	_, inUse := fdLimit()
	rl.Cur = inUse + 64 + 40 // about 40 connections for the one listener
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Endpoints, cfg.Node, cfg.Logger = []string{"http://127.0.0.1:1"}, "node-1", slog.New(slog.DiscardHandler)
	cfg.Socket, cfg.Listen, cfg.Snapshot = filepath.Join(dir, "run", "regiond.sock"), "", filepath.Join(dir, "shm", "table.json")
	a, err := New(cfg)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { a.closeListeners(); a.snapLock.Close() }()
	if got := cap(a.unixLn.sem); got >= cfg.MaxConnections || got > 50 {
		t.Fatalf("connection cap %d under a limit leaving about 40; want it lowered from %d", got, cfg.MaxConnections)
	}
	if g := testutil.ToFloat64(a.unixLn.m.limit); int(g) != cap(a.unixLn.sem) {
		t.Fatalf("connections_limit %v, cap %d", g, cap(a.unixLn.sem))
	}
}

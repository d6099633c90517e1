package php_test

// The example's timeouts under php-fpm and nginx.

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/phpfront"
)

// fpmChildren returns the pids of php-fpm master's children.
func fpmChildren(t *testing.T, master int) []int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(master) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestStuckChildIsReclaimed: with the example's timeouts, a php-fpm child
// stuck in a request is killed after 5 s (request_terminate_timeout) and
// replaced, so the next request is served; and nginx answers a request
// php-fpm does not answer with a 504 after 5 s (fastcgi_read_timeout), not
// after nginx's default minute.
func TestStuckChildIsReclaimed(t *testing.T) {
	// Mostly waiting out the two 5 s timeouts: beside the other parallel
	// tests, and the two side by side (subtests run from two goroutines,
	// each on a php-fpm and nginx of its own: free port, own directory;
	// the child stopped is found under its own master).
	t.Parallel()
	script, err := filepath.Abs(filepath.Join("testdata", "stuck.php"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s *phpfront.Server)
	}{
		{"stuck-child-killed", stuckChildKilled},
		{"stopped-child-504", stoppedChildTimesOut},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(c.name, func(t *testing.T) {
				c.run(t, startFront(t, phpfront.Config{Script: script, Snapshot: filepath.Join(t.TempDir(), "table.json"), Children: 1}))
			})
		}()
	}
	wg.Wait()
}

// stuckChildKilled: the child stuck in a request is killed within 9 s
// and replaced, and fpm.log says why.
func stuckChildKilled(t *testing.T, s *phpfront.Server) {
	began := time.Now()
	resp, _ := get(t, s, "/?stuck=1", "", 30*time.Second)
	took := time.Since(began)
	if resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusGatewayTimeout || took > 9*time.Second {
		t.Errorf("stuck request: status %d after %v, want 502 or 504 within 9 s", resp.StatusCode, took)
	}
	// The child was killed and replaced: the next request is served at
	// once, not after the stuck one's minute.
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, body := get(t, s, "/", "", 30*time.Second)
		if resp.StatusCode == http.StatusOK && body == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the stuck request: status %d %q, want 200 (the stuck child replaced)\n%s", resp.StatusCode, body, s.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b, _ := os.ReadFile(filepath.Join(s.Dir(), "fpm.log")); !strings.Contains(string(b), "execution timed out") {
		t.Errorf("fpm.log says nothing of a timed out child:\n%s", b)
	}
}

// stoppedChildTimesOut: a child that does not run at all (stopped:
// php-fpm's timeout does not apply to a request it has not accepted):
// nginx gives up after 5 s.
func stoppedChildTimesOut(t *testing.T, s *phpfront.Server) {
	kids := fpmChildren(t, s.FPMPid())
	if len(kids) != 1 {
		t.Fatalf("php-fpm children %v, want 1", kids)
	}
	if err := syscall.Kill(kids[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(kids[0], syscall.SIGCONT)
	began := time.Now()
	resp, _ := get(t, s, "/", "", 30*time.Second)
	took := time.Since(began)
	if resp.StatusCode != http.StatusGatewayTimeout || took > 8*time.Second {
		t.Errorf("request to a stopped child: status %d after %v, want 504 within 8 s", resp.StatusCode, took)
	}
}

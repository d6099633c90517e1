package faultsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/routing"
)

// agentProc is one regiond agent process: the production binary with its
// own API port, snapshot file and node name. It keeps its port and files
// across restarts, as a node does.
type agentProc struct {
	name     string
	bin      string
	args     []string
	env      []string // added to the test's environment (REGIOND_PASSWORD)
	dir      string
	addr     string // 127.0.0.1:port of its API
	snapshot string
	logPath  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	gen    int // incarnation, +1 on every start
	// floor is the lowest revision the current incarnation may serve: the
	// revision its snapshot file held when the previous one was killed.
	floor int64
}

// newAgent prepares an agent against endpoints (not started).
func newAgent(t *testing.T, bin, name string, endpoints []string, prefix string, extra ...string) *agentProc {
	t.Helper()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "snap"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{name: name, bin: bin, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port),
		snapshot: filepath.Join(dir, "snap", "table.json"), logPath: filepath.Join(dir, "regiond.log")}
	a.args = append([]string{
		"--endpoints=" + strings.Join(endpoints, ","),
		"--prefix=" + prefix,
		"--node=" + name,
		"--listen=" + a.addr,
		"--socket=",
		"--snapshot=" + a.snapshot,
		// Health is not what this suite checks: with an hour of grace every
		// pool counts as healthy, so a table is a function of etcd's state
		// alone and can be compared with a reference compile.
		"--health-grace=1h",
		"--dial-timeout=2s",
		"--log-level=debug",
	}, extra...)
	t.Cleanup(func() { a.stop() })
	return a
}

// start starts the agent's process.
func (a *agentProc) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running() {
		return fmt.Errorf("%s is running", a.name)
	}
	f, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(a.bin, a.args...)
	if a.env != nil {
		cmd.Env = append(os.Environ(), a.env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", a.name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	a.cmd, a.exited = cmd, exited
	a.gen++
	return nil
}

func (a *agentProc) running() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// Running reports whether the process runs, and its incarnation.
func (a *agentProc) Running() (bool, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running(), a.gen
}

// kill ends the process with SIGKILL (no lease revoked, no file finished)
// and records the revision its snapshot file holds: the next incarnation
// must not serve an older one.
func (a *agentProc) kill() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.running() {
		return
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	if b, err := atomicfile.ReadFile(a.snapshot); err == nil {
		if t, _, err := routing.LoadTableJSON(b); err == nil {
			a.floor = t.Revision()
		}
	}
}

// Floor returns the lowest revision the current incarnation may serve.
func (a *agentProc) Floor() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.floor
}

// stop ends the process with SIGTERM (SIGKILL after 5s).
func (a *agentProc) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.running() {
		return
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(5 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
	}
}

// logTail returns the last n lines of the agent's log.
func (a *agentProc) logTail(n int) string {
	b, _ := os.ReadFile(a.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// apiClient is an HTTP client for agents' loopback APIs.
var apiClient = &http.Client{Timeout: 5 * time.Second,
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, DisableCompression: true}}

// get fetches path from the agent's API and returns the status and body.
func (a *agentProc) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := apiClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// agentStatus is the part of /v1/status the suite reads.
type agentStatus struct {
	Revision  int64 `json:"revision"`
	Connected bool  `json:"connected"`
	Stale     bool  `json:"stale"`
}

// status reads /v1/status.
func (a *agentProc) status(ctx context.Context) (agentStatus, error) {
	var st agentStatus
	code, b, err := a.get(ctx, "/v1/status")
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("%s /v1/status: %d %s", a.name, code, b)
	}
	return st, json.Unmarshal(b, &st)
}

// waitUp waits until the agent answers /healthz.
func (a *agentProc) waitUp(ctx context.Context) error {
	for {
		if code, _, err := a.get(ctx, "/healthz"); err == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not answering /healthz: %w\n%s", a.name, ctx.Err(), a.logTail(30))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

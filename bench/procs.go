package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/regiond/regiond/internal/freeport"
)

// goBuild builds pkg (a package path, or a module path such as
// go.etcd.io/etcd/server/v3) into out, from the module root, with the
// given build flags (e.g. "-tags", "nodev").
func goBuild(ctx context.Context, root, out, pkg string, flags ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build -o %s %s: %w\n%s", out, pkg, err, stderr.String())
	}
	return nil
}

// proc is a child process whose output goes to a log file. It is in its own
// process group (a terminal Ctrl-C reaches only the bench, which then stops
// it in order) and, on Linux, is killed if the bench dies.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProc(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then kills. Safe to call twice.
func (p *proc) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail returns the last lines of the process's log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// etcdProc is a single-member etcd on loopback.
type etcdProc struct {
	*proc
	clientURL string
}

func startEtcd(ctx context.Context, bin, dataDir, logPath string) (*etcdProc, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		cport, err := freeport.Get()
		if err != nil {
			return nil, err
		}
		pport, err := freeport.Get()
		if err != nil {
			return nil, err
		}
		curl := fmt.Sprintf("http://127.0.0.1:%d", cport)
		purl := fmt.Sprintf("http://127.0.0.1:%d", pport)
		dir := filepath.Join(dataDir, strconv.Itoa(attempt))
		p, err := startProc("etcd", logPath, nil, bin,
			"--name=bench", "--data-dir="+dir,
			"--listen-client-urls="+curl, "--advertise-client-urls="+curl,
			"--listen-peer-urls="+purl, "--initial-advertise-peer-urls="+purl,
			"--initial-cluster=bench="+purl, "--initial-cluster-state=new",
			"--log-level=warn")
		if err != nil {
			return nil, err
		}
		e := &etcdProc{proc: p, clientURL: curl}
		if lastErr = e.waitHealthy(ctx, 30*time.Second); lastErr == nil {
			return e, nil
		}
		e.stop(5 * time.Second)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, lastErr
}

// waitHealthy polls etcd's /health until it reports healthy.
func (e *etcdProc) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: time.Second}
	for {
		if e.exited() {
			return fmt.Errorf("etcd exited at start: %v\n%s", e.err, e.logTail())
		}
		resp, err := hc.Get(e.clientURL + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && bytes.Contains(b, []byte(`"health":"true"`)) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd at %s not healthy after %v: %v\n%s", e.clientURL, timeout, err, e.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// agentProc is a regiond agent subprocess with its API on loopback TCP.
type agentProc struct {
	*proc
	base     string // http://127.0.0.1:PORT
	snapshot string
	started  time.Time
	http     *http.Client
}

type agentOpts struct {
	env                         string // extra environment, "K=V K=V" (e.g. GOGC=50 GOMAXPROCS=1)
	bin, endpoint, prefix, node string
	dir                         string // socket and log live here
	snapshot                    string
	cpuprofile                  string // profagent only
	noSnapshot                  bool   // run with --snapshot="" (diagnostic)
}

func startAgent(o agentOpts) (*agentProc, error) {
	port, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.dir, 0o750); err != nil {
		return nil, err
	}
	var env []string
	if o.cpuprofile != "" {
		env = append(env, "REGIOND_CPUPROFILE="+o.cpuprofile)
	}
	env = append(env, strings.Fields(o.env)...)
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	snapshot := o.snapshot
	if o.noSnapshot {
		snapshot = ""
	}
	started := time.Now()
	p, err := startProc("regiond", filepath.Join(o.dir, "regiond.log"), env, o.bin,
		"--endpoints="+o.endpoint, "--prefix="+o.prefix, "--node="+o.node,
		"--socket="+filepath.Join(o.dir, "regiond.sock"), "--listen="+listen,
		"--snapshot="+snapshot, "--log-level=warn")
	if err != nil {
		return nil, err
	}
	return &agentProc{proc: p, base: "http://" + listen, snapshot: o.snapshot, started: started,
		http: newHTTPClient()}, nil
}

// newHTTPClient returns a keep-alive client for tight loopback polling.
func newHTTPClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConns:        8,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
}

// get fetches a path of the agent's API and returns the status and body.
func (a *agentProc) get(path string) (int, []byte, error) {
	resp, err := a.http.Get(a.base + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitFor polls cond every interval until it returns true, the process
// exits, ctx ends or timeout passes.
func (a *agentProc) waitFor(ctx context.Context, what string, timeout, interval time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if a.exited() {
			return fmt.Errorf("regiond exited while waiting for %s: %v\n%s", what, a.err, a.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("regiond: no %s after %v\n%s", what, timeout, a.logTail())
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(interval)
	}
	return nil
}

// metric returns the value of an unlabelled metric from /metrics.
func (a *agentProc) metric(name string) (float64, error) {
	code, b, err := a.get("/metrics")
	if err != nil {
		return 0, err
	}
	if code != 200 {
		return 0, fmt.Errorf("/metrics: HTTP %d", code)
	}
	return parseMetric(b, name)
}

func parseMetric(b []byte, name string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		return strconv.ParseFloat(strings.TrimSpace(rest), 64)
	}
	return 0, fmt.Errorf("metric %s not found in /metrics", name)
}

// procStatus returns fields of /proc/<pid>/status in bytes (VmHWM, VmRSS).
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb << 10, err
	}
	return 0, errors.New("no " + field + " in /proc/" + strconv.Itoa(pid) + "/status")
}

package etcdproc

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/freeport"
)

// ProxyConfig configures a grpc-proxy.
type ProxyConfig struct {
	// Members are the indexes of the members the proxy forwards to; none
	// means all.
	Members []int
	// ReadyTimeout bounds each wait for the proxy to serve; zero means 30s.
	ReadyTimeout time.Duration
	// Args are extra flags of `etcd grpc-proxy start`, e.g. "--debug".
	Args []string
	// AuthOn: the cluster has authentication on, so the proxy's own
	// health check (an anonymous read and watch) fails; the proxy is
	// taken as serving once its HTTP endpoint answers at all.
	AuthOn bool
	// TLS, when set, makes the proxy serve TLS to its clients and dial
	// etcd with TLS (StartProxyTo; a Cluster's members serve plain HTTP).
	TLS *ProxyTLS
}

// ProxyTLS are the TLS files of a grpc-proxy in a fleet that uses client
// certificates, as docs/operations.md starts it.
type ProxyTLS struct {
	// CAFile verifies etcd's certificates (--cacert) and the proxy's
	// clients' (--trusted-ca-file: a client must present one it signed).
	CAFile string
	// CertFile and KeyFile are what the proxy serves its clients
	// (--cert-file, --key-file).
	CertFile, KeyFile string
	// UpstreamCertFile and UpstreamKeyFile are the proxy's client
	// certificate to etcd (--cert, --key); etcd's grpc-proxy refuses one
	// with a common name.
	UpstreamCertFile, UpstreamKeyFile string
	// Dial is a client's TLS configuration of the proxy (trusting CAFile,
	// presenting a client certificate): for the wait until it serves and
	// for Client.
	Dial *tls.Config
}

// Proxy is an etcd gRPC proxy (`etcd grpc-proxy start`, from the same etcd
// binary as the members) listening on 127.0.0.1. Its address stays the
// same across Stop, Kill and Start, so clients of it reconnect to the
// proxy started again.
type Proxy struct {
	// Addr is the proxy's listen address, "127.0.0.1:port".
	Addr string
	// LogPath is the file that receives the proxy's output, of every run.
	LogPath string

	t       testing.TB
	bin     string
	args    []string
	timeout time.Duration
	authOn  bool        // see ProxyConfig.AuthOn
	dial    *tls.Config // ProxyTLS.Dial; nil for plain HTTP

	mu  sync.Mutex
	run *proxyRun // nil while stopped
}

// proxyRun is one process of a proxy.
type proxyRun struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	waitErr error         // its exit status, once exited
}

var proxyCount atomic.Int64 // proxies started by this test process, for their names

// StartProxy starts a grpc-proxy in front of the cluster on a free
// loopback port and waits until it serves a read and a watch
// (/proxy/health). It is stopped when the test ends, before the cluster.
func (c *Cluster) StartProxy(t testing.TB, cfg ProxyConfig) *Proxy {
	t.Helper()
	var eps []string
	for _, u := range c.Endpoints(cfg.Members...) {
		eps = append(eps, strings.TrimPrefix(u, "http://"))
	}
	return startProxy(t, eps, c.dir, cfg)
}

// StartProxyTo starts a grpc-proxy in front of the etcd at endpoints
// ("host:port", or URLs) on a free loopback port, its data and log in
// t.TempDir(), and waits until it serves as StartProxy does; cfg.Members
// is ignored. It is stopped when the test ends.
func StartProxyTo(t testing.TB, endpoints []string, cfg ProxyConfig) *Proxy {
	t.Helper()
	var eps []string
	for _, u := range endpoints {
		u = strings.TrimPrefix(u, "http://")
		eps = append(eps, strings.TrimPrefix(u, "https://"))
	}
	return startProxy(t, eps, t.TempDir(), cfg)
}

func startProxy(t testing.TB, eps []string, dir string, cfg ProxyConfig) *Proxy {
	t.Helper()
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	name := fmt.Sprintf("proxy%d", proxyCount.Add(1)-1)
	p := &Proxy{t: t, bin: Binary(t), timeout: cfg.ReadyTimeout, authOn: cfg.AuthOn, LogPath: filepath.Join(dir, name+".log")}
	var tlsArgs []string
	if x := cfg.TLS; x != nil {
		p.dial = x.Dial
		tlsArgs = []string{"--cacert=" + x.CAFile, "--cert=" + x.UpstreamCertFile, "--key=" + x.UpstreamKeyFile,
			"--cert-file=" + x.CertFile, "--key-file=" + x.KeyFile, "--trusted-ca-file=" + x.CAFile}
	}
	dataDir := filepath.Join(dir, name)
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			p.dumpLog()
		}
	})
	for attempt := 1; ; attempt++ {
		port, err := freeport.Get()
		if err != nil {
			t.Fatalf("etcdproc: %v", err)
		}
		p.Addr = fmt.Sprintf("127.0.0.1:%d", port)
		p.args = append(append([]string{"grpc-proxy", "start",
			"--endpoints=" + strings.Join(eps, ","),
			"--listen-addr=" + p.Addr,
			"--advertise-client-url=" + p.Addr, // enables /proxy/health (a client of the proxy itself)
			"--data-dir=" + dataDir,
		}, tlsArgs...), cfg.Args...)
		err = p.start()
		if err == nil {
			return p
		}
		if errors.Is(err, errPortTaken) && attempt < 3 {
			t.Logf("etcdproc: %s: %v; trying another port", name, err)
			continue
		}
		p.dumpLog()
		t.Fatalf("etcdproc: %s: %v", name, err)
	}
}

// URL returns the proxy's client URL, "http://127.0.0.1:port", or
// "https://…" when it serves TLS.
func (p *Proxy) URL() string {
	if p.dial != nil {
		return "https://" + p.Addr
	}
	return "http://" + p.Addr
}

// Client returns a client of the proxy alone, closed when the test ends.
func (p *Proxy) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}, DialTimeout: 5 * time.Second, TLS: p.dial, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdproc: client of the proxy at %s: %v", p.Addr, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Start starts the stopped proxy again on the same address and waits
// until it serves. It fails the test if the proxy is running or cannot
// start.
func (p *Proxy) Start() {
	p.t.Helper()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		// A port released a moment ago can be bound again at once (Go
		// listeners set SO_REUSEADDR); someone else taking it meanwhile
		// is the one case worth a retry.
		if err = p.start(); err == nil || !errors.Is(err, errPortTaken) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		p.dumpLog()
		p.t.Fatalf("etcdproc: start the proxy again on %s: %v", p.Addr, err)
	}
}

// Stop ends the proxy (SIGTERM, then SIGKILL after 5s) and waits for it to
// exit. Stopping a stopped proxy does nothing.
func (p *Proxy) Stop() { p.end(syscall.SIGTERM) }

// Kill ends the proxy with SIGKILL and waits for it to exit: no goodbye
// to its clients, connections reset.
func (p *Proxy) Kill() { p.end(syscall.SIGKILL) }

func (p *Proxy) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run != nil {
		return fmt.Errorf("the proxy on %s is already running", p.Addr)
	}
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("proxy log: %w", err)
	}
	defer f.Close() // the process has its own descriptor
	fmt.Fprintf(f, "--- etcdproc: %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the proxy: %w", err)
	}
	r := &proxyRun{cmd: cmd, exited: make(chan struct{})}
	go func() {
		r.waitErr = cmd.Wait()
		close(r.exited)
	}()
	if err := p.waitServing(r); err != nil {
		cmd.Process.Kill()
		<-r.exited
		return err
	}
	p.run = r
	return nil
}

// waitServing waits until /proxy/health answers 200 (a read and a watch
// through the proxy worked), the process exits, or the ready timeout.
func (p *Proxy) waitServing(r *proxyRun) error {
	deadline := time.Now().Add(p.timeout)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: p.dial}}
	defer hc.CloseIdleConnections()
	for {
		select {
		case <-r.exited:
			if b, err := os.ReadFile(p.LogPath); err == nil && strings.Contains(string(b), "address already in use") {
				return fmt.Errorf("listen on %s: %w", p.Addr, errPortTaken)
			}
			return fmt.Errorf("the proxy exited while starting: %v (log %s)", r.waitErr, p.LogPath)
		default:
		}
		if resp, err := hc.Get(p.URL() + "/proxy/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || p.authOn {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the proxy on %s not serving after %s", p.Addr, p.timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// end signals the running proxy and waits for it to exit (SIGKILL after
// 5s of waiting for another signal).
func (p *Proxy) end(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.run
	if r == nil {
		return
	}
	p.run = nil
	r.cmd.Process.Signal(sig)
	select {
	case <-r.exited:
		return
	case <-time.After(5 * time.Second):
	}
	p.t.Logf("etcdproc: the proxy on %s did not stop within 5s of %v; killing it", p.Addr, sig)
	r.cmd.Process.Kill()
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		p.t.Logf("etcdproc: the proxy (pid %d) did not exit after SIGKILL", r.cmd.Process.Pid)
	}
}

func (p *Proxy) dumpLog() {
	lines, err := tail(p.LogPath, logTail)
	if err != nil {
		p.t.Logf("etcdproc: proxy log: %v", err)
		return
	}
	p.t.Logf("etcdproc: last %d lines of the proxy's log (%s):\n%s", len(lines), p.LogPath, strings.Join(lines, "\n"))
}

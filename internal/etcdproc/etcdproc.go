// Package etcdproc runs real multi-member etcd clusters, as separate etcd
// processes on 127.0.0.1, for tests that need what one embedded member
// cannot show: a member cut off from its peers, leader changes, failover
// between endpoints.
//
//	c := etcdproc.Start(t, etcdproc.Config{Members: 3})
//	cli := c.Client(t, 2)   // talks to member 2 only
//	c.Partition(2)          // member 2 can no longer reach its peers, nor they it
//	c.Heal(2)
//	c.Freeze(2)             // its peer traffic held (a follower lagging behind), until
//	c.Thaw(2)
//
// Members are indexed from 0 and named "m0", "m1", …. Clients reach every
// member directly on its client URL; only peer (raft) traffic is routed
// through proxies that a test can cut.
//
// # Topology
//
// etcd members talk to each other over HTTP, and both ways: member i sends
// raft messages to member j over connections i dials to j (pipeline and
// snapshot POSTs) and over stream connections j dials to i (j's stream GET,
// on which i writes). So a partition must cut both the connections i dials
// and the connections dialed to i. A proxy in front of each member's peer
// listener only does the second half: i, dialing out, would still reach the
// others, and raft would carry on. One proxy per ordered pair i→j cannot be
// expressed either: a member's ID (and the cluster ID) is a hash of its
// advertised peer URLs, so every member must know member j by the same URL.
//
// Instead each member advertises a peer URL whose host, "mJ.etcdproc.invalid",
// resolves nowhere, and is started with HTTP_PROXY set (etcd's peer transport
// honours it; it skips loopback addresses, hence the names):
//
//	member i ──HTTP_PROXY──▶ out[i] ──▶ router ──host mJ──▶ in[j] ──▶ member j's peer listener
//
// out[i] and in[i] are internal/tcpproxy proxies; the router is an HTTP
// forward proxy shared by the cluster. Every connection member i dials
// passes out[i], every connection to member i passes in[i], so Partition(i)
// severs exactly those two and Heal(i) restores them. A member that ignored
// the proxy could not resolve its peers' names at all: the cluster would fail
// to form instead of silently bypassing the cut.
//
// # gRPC proxy
//
// StartProxy runs etcd's own gRPC proxy (`etcd grpc-proxy start`, from the
// same binary) in front of the cluster, on a free 127.0.0.1 port, the path
// a large fleet takes to etcd:
//
//	p := c.StartProxy(t, etcdproc.ProxyConfig{}) // forwards to every member
//	cli := p.Client(t)                           // or an endpoint p.URL()
//	p.Stop(); p.Start()                          // "restart the proxy": same address
//	p.Kill(); p.Start()                          // SIGKILL: connections reset, no goodbye
//
// The proxy dials the members' client URLs directly (no peer router on that
// path). StartProxyTo starts one in front of any etcd (an embedded one
// serving TLS, say), with ProxyConfig.TLS for a fleet of client
// certificates: TLS on both sides, as docs/operations.md starts it. It is stopped when the test ends, before the cluster; its log
// (every run, appended) is printed if the test failed.
//
// # Lifetime
//
// The etcd binary is built once per test process (see Binary). Members run
// with --heartbeat-interval=50 --election-timeout=500, keep their data and
// logs in t.TempDir(), and are stopped (SIGTERM, then SIGKILL) when the test
// ends; if the test failed, the tail of each member's log is printed.
package etcdproc

import (
	"bufio"
	"context"
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
	"github.com/regiond/regiond/internal/tcpproxy"
)

// Timing flags of every member: short, so that an election takes well under
// a second and a member cut off notices it has no leader within one.
const (
	HeartbeatInterval = 50 * time.Millisecond
	ElectionTimeout   = 500 * time.Millisecond
)

// Config configures a cluster.
type Config struct {
	// Members is the number of members; zero means 3.
	Members int
	// ReadyTimeout bounds the wait for every member to report healthy
	// (building etcd not included); zero means 30s.
	ReadyTimeout time.Duration
	// Args are extra flags for every member, e.g. "--log-level=debug".
	Args []string
}

// Cluster is a running etcd cluster.
type Cluster struct {
	// Members are the cluster's members, in index order.
	Members []*Member

	t         testing.TB
	dir       string
	router    *router
	routerLog *os.File
	stopOnce  sync.Once
	rootPW    atomic.Pointer[string] // SetRootPassword
}

// SetRootPassword has the cluster's own requests (MemberStatus, Leader,
// MoveLeader) log in as root with password: once etcd's authentication
// is on, etcd answers a member's status to an admin only.
func (c *Cluster) SetRootPassword(password string) { c.rootPW.Store(&password) }

// admin returns the client config of the cluster's own requests to
// endpoints: as root once SetRootPassword was called.
func (c *Cluster) admin(endpoints []string) clientv3.Config {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if pw := c.rootPW.Load(); pw != nil {
		cfg.Username, cfg.Password = "root", *pw
	}
	return cfg
}

// Member is one etcd process of a cluster.
type Member struct {
	// Name is the member's name: "m" and its index.
	Name string
	// ClientURL is the member's client URL, served directly (no proxy).
	ClientURL string
	// PeerURL is the peer URL the member advertises; only the cluster's
	// peer router knows its host.
	PeerURL string
	// LogPath is the file that receives the member's output.
	LogPath string

	peerAddr string          // the member's own peer listener
	host     string          // the host of PeerURL
	in, out  *tcpproxy.Proxy // connections to it, connections from it
	cut      atomic.Bool     // partitioned
	cmd      *exec.Cmd       // nil until started
	bin      string          // the binary and flags it was started with
	args     []string
	exited   chan struct{} // closed when the process has exited
	waitErr  error         // the process's exit status, once exited
}

var clusters atomic.Int64

// errPortTaken is a member failing to bind a port found free a moment
// before: the cluster is started again on other ports.
var errPortTaken = errors.New("a port was taken by someone else")

// Start builds etcd if needed, starts a cluster in t.TempDir() and waits
// until every member reports healthy. The cluster is stopped when the test
// ends.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	bin := Binary(t)
	if cfg.Members <= 0 {
		cfg.Members = 3
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	for attempt := 1; ; attempt++ {
		c, err := start(t, bin, cfg)
		if err == nil {
			return c
		}
		if errors.Is(err, errPortTaken) && attempt < 3 {
			t.Logf("etcdproc: %v; starting the cluster again on other ports", err)
			c.stop(false)
			continue
		}
		c.dumpLogs()
		c.stop(false)
		t.Fatalf("etcdproc: %v", err)
	}
}

func start(t testing.TB, bin string, cfg Config) (*Cluster, error) {
	c := &Cluster{t: t, dir: t.TempDir()}
	t.Cleanup(func() { c.stop(true) })
	hosts := map[string]string{}
	var err error
	for i := range cfg.Members {
		m := &Member{Name: fmt.Sprintf("m%d", i), exited: make(chan struct{})}
		c.Members = append(c.Members, m)
		var clientPort, peerPort int
		if clientPort, err = freeport.Get(); err != nil {
			return c, err
		}
		if peerPort, err = freeport.Get(); err != nil {
			return c, err
		}
		m.ClientURL = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
		m.peerAddr = fmt.Sprintf("127.0.0.1:%d", peerPort)
		m.host = m.Name + ".etcdproc.invalid"
		m.PeerURL = fmt.Sprintf("http://%s:%d", m.host, peerPort)
		m.LogPath = filepath.Join(c.dir, m.Name+".log")
		if m.in, err = tcpproxy.New(m.peerAddr); err != nil {
			return c, err
		}
		hosts[m.host] = m.in.Addr()
	}
	if c.routerLog, err = os.Create(filepath.Join(c.dir, "router.log")); err != nil {
		return c, err
	}
	if c.router, err = startRouter(hosts, c.routerLog); err != nil {
		return c, err
	}
	var initial []string
	for _, m := range c.Members {
		if m.out, err = tcpproxy.New(c.router.addr()); err != nil {
			return c, err
		}
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	token := fmt.Sprintf("etcdproc-%d-%d", os.Getpid(), clusters.Add(1))
	for _, m := range c.Members {
		args := []string{
			"--name=" + m.Name,
			"--data-dir=" + filepath.Join(c.dir, m.Name),
			"--listen-client-urls=" + m.ClientURL,
			"--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=http://" + m.peerAddr,
			"--initial-advertise-peer-urls=" + m.PeerURL,
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--initial-cluster-token=" + token,
			fmt.Sprintf("--heartbeat-interval=%d", HeartbeatInterval.Milliseconds()),
			fmt.Sprintf("--election-timeout=%d", ElectionTimeout.Milliseconds()),
			"--max-txn-ops=8192",
		}
		if err := m.start(bin, append(args, cfg.Args...)); err != nil {
			return c, err
		}
	}
	return c, c.waitHealthy(cfg.ReadyTimeout, c.Members)
}

func (m *Member) start(bin string, args []string) error {
	// Appended to, so that a restarted member's log follows its first life.
	f, err := os.OpenFile(m.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the process has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = memberEnv(m.out.Addr())
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.Name, err)
	}
	exited := make(chan struct{})
	m.cmd, m.bin, m.args, m.exited = cmd, bin, args, exited
	go func() {
		m.waitErr = cmd.Wait()
		close(exited)
	}()
	return nil
}

// memberEnv is cleanEnv with the member's outbound proxy as HTTP_PROXY.
func memberEnv(out string) []string {
	return append(cleanEnv(), "HTTP_PROXY=http://"+out)
}

// cleanEnv is the test process's environment without anything that would
// reconfigure etcd (ETCD_* variables are flags) or its HTTP proxies.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUEST_METHOD":
			continue
		}
		if strings.HasPrefix(name, "ETCD_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// waitHealthy waits until every one of members answers /health with 200 (it has a
// leader and serves a linearizable read), a member exits, or timeout.
func (c *Cluster) waitHealthy(timeout time.Duration, members []*Member) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	pending := append([]*Member(nil), members...)
	for {
		var still []*Member
		for _, m := range pending {
			select {
			case <-m.exited:
				if m.logContains("address already in use") {
					return fmt.Errorf("%s: %w", m.Name, errPortTaken)
				}
				return fmt.Errorf("%s exited while starting: %v (log %s)", m.Name, m.waitErr, m.LogPath)
			default:
			}
			if resp, err := hc.Get(m.ClientURL + "/health"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					continue
				}
			}
			still = append(still, m)
		}
		if pending = still; len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy after %s", pending[0].Name, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Partition cuts member i off from every other member, both ways: the
// connections it dials and the connections dialed to it are closed and
// refused until Heal. Clients still reach it on its client URL.
func (c *Cluster) Partition(i int) {
	m := c.Members[i]
	m.cut.Store(true)
	m.out.Sever()
	m.in.Sever()
}

// Heal undoes Partition(i).
func (c *Cluster) Heal(i int) {
	c.t.Helper()
	m := c.Members[i]
	if err := m.in.Restore(); err != nil {
		c.t.Fatalf("etcdproc: heal %s: %v", m.Name, err)
	}
	if err := m.out.Restore(); err != nil {
		c.t.Fatalf("etcdproc: heal %s: %v", m.Name, err)
	}
	m.cut.Store(false)
}

// Freeze holds member i's peer traffic, both ways, without closing a
// connection (tcpproxy.Proxy.Freeze): a follower that lags, still sure of
// its leader until its election timeout, which applies nothing the
// others commit meanwhile and still answers its clients from what it
// has. Thaw delivers what was held.
func (c *Cluster) Freeze(i int) {
	m := c.Members[i]
	m.in.Freeze()
	m.out.Freeze()
}

// Thaw undoes Freeze(i).
func (c *Cluster) Thaw(i int) {
	m := c.Members[i]
	m.in.Thaw()
	m.out.Thaw()
}

// Endpoints returns the client URLs of the given members, in that order;
// none means all.
func (c *Cluster) Endpoints(members ...int) []string {
	if len(members) == 0 {
		for i := range c.Members {
			members = append(members, i)
		}
	}
	var eps []string
	for _, i := range members {
		eps = append(eps, c.Members[i].ClientURL)
	}
	return eps
}

// Client returns a client of the given members (none means all), closed
// when the test ends.
func (c *Cluster) Client(t testing.TB, members ...int) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(members...),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdproc: client of %v: %v", c.Endpoints(members...), err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// MemberStatus returns member i's own view of itself: its ID, the leader it
// knows (0 for none), its raft term and applied index.
func (c *Cluster) MemberStatus(ctx context.Context, i int) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(c.admin(c.Endpoints(i)))
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return cli.Status(sctx, c.Members[i].ClientURL)
}

// Leader returns the index of the member that reports itself leader,
// waiting up to 10s for an election. When two do (a frozen member still
// sure of a term the others have left), the one of the higher raft term
// wins.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		best, term := -1, uint64(0)
		for i, m := range c.Members {
			if m.cut.Load() || !m.Running() {
				continue
			}
			st, err := c.MemberStatus(context.Background(), i)
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId && st.RaftTerm >= term {
				best, term = i, st.RaftTerm
			}
		}
		if best >= 0 {
			return best
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdproc: no leader after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MoveLeader makes member to the leader (if it is not already) and waits,
// up to 10s, until it reports itself leader. A failed status read or
// move is retried until then.
func (c *Cluster) MoveLeader(t testing.TB, to int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		from := c.Leader(t)
		if from == to {
			return
		}
		if err := c.moveLeader(from, to); err != nil {
			t.Logf("etcdproc: move leader %s → %s: %v (retrying)", c.Members[from].Name, c.Members[to].Name, err)
			time.Sleep(100 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdproc: %s still not leader after 10s", c.Members[to].Name)
		}
	}
}

// moveLeader asks member from, the leader, to hand leadership to member to.
func (c *Cluster) moveLeader(from, to int) error {
	st, err := c.MemberStatus(context.Background(), to)
	if err != nil {
		return fmt.Errorf("status of %s: %w", c.Members[to].Name, err)
	}
	cli, err := clientv3.New(c.admin(c.Endpoints(from)))
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cli.MoveLeader(ctx, st.Header.MemberId)
	return err
}

// stop stops every member (SIGTERM, SIGKILL after 5s), the proxies and
// the router. With dump, a failed test prints the tail of each log.
func (c *Cluster) stop(dump bool) {
	c.stopOnce.Do(func() {
		// One at a time, with a pause: a leader told to stop first hands
		// leadership to the follower it believes connected, and waits up
		// to ~6s for it. A member stopped a moment before still looks
		// connected until a stream retry or write fails (~100ms).
		for i, m := range c.Members {
			if m.cmd == nil {
				continue
			}
			if i > 0 {
				time.Sleep(stopPause)
			}
			m.stop(c.t)
		}
		for _, m := range c.Members {
			if m.in != nil {
				m.in.Close()
			}
			if m.out != nil {
				m.out.Close()
			}
		}
		if c.router != nil {
			c.router.close()
		}
		if c.routerLog != nil {
			c.routerLog.Close()
		}
		if dump && c.t.Failed() {
			c.dumpLogs()
		}
	})
}

// stopPause is the pause between stopping two members.
const stopPause = 300 * time.Millisecond

// stop ends the member's process: SIGTERM, then SIGKILL after 5s.
func (m *Member) stop(t testing.TB) {
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
		return
	case <-time.After(5 * time.Second):
	}
	t.Logf("etcdproc: %s did not stop within 5s of SIGTERM; killing it", m.Name)
	m.cmd.Process.Kill()
	select {
	case <-m.exited:
	case <-time.After(5 * time.Second):
		t.Logf("etcdproc: %s (pid %d) did not exit after SIGKILL", m.Name, m.cmd.Process.Pid)
	}
}

// logTail is how many lines of each member's log a failed test prints.
const logTail = 150

func (c *Cluster) dumpLogs() {
	for _, m := range c.Members {
		if m.LogPath == "" {
			continue
		}
		lines, err := tail(m.LogPath, logTail)
		if err != nil {
			c.t.Logf("etcdproc: %s log: %v", m.Name, err)
			continue
		}
		status := "running"
		select {
		case <-m.exited:
			status = fmt.Sprintf("exited: %v", m.waitErr)
		default:
		}
		c.t.Logf("etcdproc: last %d lines of %s's log (%s):\n%s", len(lines), m.Name, status, strings.Join(lines, "\n"))
	}
	if lines, err := tail(filepath.Join(c.dir, "router.log"), 40); err == nil && len(lines) > 0 {
		c.t.Logf("etcdproc: last %d lines of the peer router's log:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}

func (m *Member) logContains(s string) bool {
	b, err := os.ReadFile(m.LogPath)
	return err == nil && strings.Contains(string(b), s)
}

func tail(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines, sc.Err()
}

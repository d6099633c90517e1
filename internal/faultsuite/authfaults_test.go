package faultsuite

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/gobuild"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/routing"
)

var (
	flagAuthMode   = flag.String("authfault.mode", "simple", "etcd --auth-token of TestAuthFaultsReconverge: simple or jwt")
	flagAuthTTL    = flag.Int("authfault.ttl", 3, "token TTL in seconds (--auth-token-ttl for simple, ttl= for jwt)")
	flagAuthRounds = flag.Int("authfault.rounds", 1, "rounds of the fault list")
	flagAuthOnly   = flag.String("authfault.only", "", "comma-separated fault names to run (empty: all)")
)

const (
	authUser     = "agent"
	authPassword = "agent-pw"
	authRootPw   = "root-pw"
	authRole     = authUser + "-rw"
	hbPool       = "hb-pool"
	hbKey        = prefix + "health/" + hbPool + "/i1"
)

// TestAuthFaultsReconverge runs the fault suite's agents (and a regionctl
// heartbeat) against a 3-member etcd with authentication ON and a short
// token TTL (3 s), one agent behind etcd's grpc-proxy, while root writes
// every 50 ms, and checks, fault by fault, that every agent is connected
// again at etcd's revision, serving a table equal to a fresh compile of
// etcd's state, with its status key back, and the heartbeat's health key
// present, within 60 s of the fault's end (the auth fault review measured
// at most 33 s, most within 3). go test ./... runs a CI-sized list (a
// leader killed, a member restarted, losing the simple tokens it issued,
// the agents' password changed and back, their role revoked and granted
// again); AUTHFAULT=1 runs every fault of the list, each a round of
// -authfault.rounds, and -authfault.mode=jwt etcd's JWT tokens:
//
//	AUTHFAULT=1 go test ./internal/faultsuite -run TestAuthFaultsReconverge -v -timeout 20m \
//	    -args -authfault.mode=simple -authfault.ttl=3 -authfault.rounds=3
func TestAuthFaultsReconverge(t *testing.T) {
	t.Parallel() // mostly waiting out faults: beside TestFleetFaults
	only := *flagAuthOnly
	if only == "" && os.Getenv("AUTHFAULT") == "" {
		only = "leader-kill-restart,member0-restart,password-changed-and-back,role-revoked-and-regranted"
	}
	prebuild(true, true)
	dir := t.TempDir()
	args := []string{"--unsafe-no-fsync"}
	switch *flagAuthMode {
	case "simple":
		args = append(args, fmt.Sprintf("--auth-token-ttl=%d", *flagAuthTTL))
	case "jwt":
		pub, priv := rsaKeys(t, dir)
		args = append(args, fmt.Sprintf("--auth-token=jwt,pub-key=%s,priv-key=%s,sign-method=RS256,ttl=%ds", pub, priv, *flagAuthTTL))
	default:
		t.Fatalf("-authfault.mode %q", *flagAuthMode)
	}
	c := etcdproc.Start(t, etcdproc.Config{Members: 3, Args: args})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := devetcd.EnableAuth(ctx, c.Client(t), devetcd.Auth{RootPassword: authRootPw,
		User: authUser, Password: authPassword, Prefix: root + "/"}); err != nil {
		t.Fatal(err)
	}
	c.SetRootPassword(authRootPw) // Leader asks for the members' status
	rootCli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		Username: "root", Password: authRootPw, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rootCli.Close() })
	for k, v := range map[string]string{
		prefix + "epoch":           "1",
		prefix + "pools/" + hbPool: mustJSON(routing.Pool{Host: "hb.example.net:443", Region: "eu-a", Residency: "eu", Status: "active", HealthCheck: true}),
	} {
		if _, err := rootCli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	rec := startRecorder(t, rootCli, prefix)
	chk := &checker{refs: &refs{rec: rec, at: map[int64]*routing.Table{}}}
	proxy := c.StartProxy(t, etcdproc.ProxyConfig{AuthOn: true})

	bin := gobuild.Binary(t, "./cmd/regiond", "-tags", "nodev")
	var agents []*agentProc
	for i, eps := range [][]string{c.Endpoints(0, 1, 2), c.Endpoints(1, 2, 0), {proxy.URL()}} {
		a := newAgent(t, bin, fmt.Sprintf("agent-%d", i), eps, root, "--user="+authUser)
		a.env = []string{"REGIOND_PASSWORD=" + authPassword}
		if err := a.start(); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range agents {
				t.Logf("last lines of %s's log:\n%s", a.name, a.logTail(40))
			}
		}
	})

	ctl := gobuild.Binary(t, "./cmd/regionctl")
	var hbOut logbuf.Buffer
	hb := exec.Command(ctl, "--endpoints="+strings.Join(c.Endpoints(2, 0, 1), ","), "--prefix="+root, "--user="+authUser,
		"heartbeat", hbPool, "--instance=i1", "--addr=10.0.0.1:443", "--ttl=4s")
	hb.Env = append(os.Environ(), "REGIONCTL_PASSWORD="+authPassword)
	hb.Stdout, hb.Stderr = &hbOut, &hbOut
	hb.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := hb.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hb.Process.Kill(); hb.Wait() })

	// One writer, as root, throughout.
	var pause atomic.Bool
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan struct{})
	w := &writer{cli: rootCli, prefix: prefix, rng: mrand.New(mrand.NewPCG(1, 2))}
	go func() {
		defer close(wdone)
		for wctx.Err() == nil {
			if !pause.Load() {
				w.apply(wctx, w.next())
			}
			sleep(wctx, 50*time.Millisecond)
		}
	}()
	t.Cleanup(func() { wcancel(); <-wdone })

	cv := &converger{t: t, c: c, root: rootCli, chk: chk, agents: agents, hbOut: &hbOut}
	if d := cv.wait(ctx, "start", time.Now()); d < 0 {
		t.Fatal("never converged at start")
	}

	// restartsUnder makes change, restarts every member in turn, holds
	// 8 s, and undoes it.
	restartsUnder := func(what string, change, undo func() error) {
		mustDo(t, change)
		for i := range c.Members {
			c.Kill(i)
			time.Sleep(300 * time.Millisecond)
			c.Restart(i, 30*time.Second)
		}
		time.Sleep(8 * time.Second)
		cv.snapshot("held: " + what + ", members restarted")
		mustDo(t, undo)
	}
	faults := []struct {
		name string
		do   func()
	}{
		{"leader-kill-restart", func() {
			i := c.Leader(t)
			c.Kill(i)
			time.Sleep(2 * time.Second)
			c.Restart(i, 30*time.Second)
		}},
		{"member0-restart", func() { c.Kill(0); time.Sleep(time.Second); c.Restart(0, 30*time.Second) }},
		{"member1-restart", func() { c.Kill(1); time.Sleep(time.Second); c.Restart(1, 30*time.Second) }},
		{"rolling-restart", func() {
			for i := range c.Members {
				c.Kill(i)
				time.Sleep(500 * time.Millisecond)
				c.Restart(i, 30*time.Second)
			}
		}},
		{"freeze-member0", func() {
			c.Freeze(0)
			time.Sleep(time.Duration(*flagAuthTTL+2) * time.Second)
			c.Thaw(0)
		}},
		{"freeze-member1", func() {
			c.Freeze(1)
			time.Sleep(time.Duration(*flagAuthTTL+2) * time.Second)
			c.Thaw(1)
		}},
		{"password-changed-and-back", func() {
			mustDo(t, func() error { _, err := rootCli.UserChangePassword(ctx, authUser, "other-pw"); return err })
			time.Sleep(time.Duration(*flagAuthTTL+2) * time.Second)
			cv.snapshot("held: password changed")
			mustDo(t, func() error { _, err := rootCli.UserChangePassword(ctx, authUser, authPassword); return err })
		}},
		{"role-revoked-and-regranted", func() {
			mustDo(t, func() error { _, err := rootCli.UserRevokeRole(ctx, authUser, authRole); return err })
			time.Sleep(time.Duration(*flagAuthTTL+2) * time.Second)
			cv.snapshot("held: role revoked")
			mustDo(t, func() error { _, err := rootCli.UserGrantRole(ctx, authUser, authRole); return err })
		}},
		{"permission-revoked-and-regranted", func() {
			mustDo(t, func() error {
				_, err := rootCli.RoleRevokePermission(ctx, authRole, root+"/", clientv3.GetPrefixRangeEnd(root+"/"))
				return err
			})
			time.Sleep(time.Duration(*flagAuthTTL+2) * time.Second)
			mustDo(t, func() error {
				_, err := rootCli.RoleGrantPermission(ctx, authRole, root+"/", clientv3.GetPrefixRangeEnd(root+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			})
		}},
		{"password-changed-rolling-restart", func() {
			restartsUnder("password changed",
				func() error { _, err := rootCli.UserChangePassword(ctx, authUser, "other-pw"); return err },
				func() error { _, err := rootCli.UserChangePassword(ctx, authUser, authPassword); return err })
		}},
		{"role-revoked-rolling-restart", func() {
			restartsUnder("role revoked",
				func() error { _, err := rootCli.UserRevokeRole(ctx, authUser, authRole); return err },
				func() error { _, err := rootCli.UserGrantRole(ctx, authUser, authRole); return err })
		}},
		{"proxied-agent-killed-restarted", func() {
			agents[2].kill()
			time.Sleep(time.Duration(*flagAuthTTL+1) * time.Second)
			if err := agents[2].start(); err != nil {
				t.Fatal(err)
			}
		}},
		{"direct-agent-killed-restarted", func() {
			agents[0].kill()
			time.Sleep(time.Duration(*flagAuthTTL+1) * time.Second)
			if err := agents[0].start(); err != nil {
				t.Fatal(err)
			}
		}},
		{"proxy-killed-restarted", func() {
			proxy.Kill()
			time.Sleep(time.Second)
			proxy.Start()
		}},
		{"writes-idle-3ttl", func() {
			pause.Store(true)
			time.Sleep(time.Duration(3**flagAuthTTL) * time.Second)
			pause.Store(false)
		}},
	}
	results := map[string][]time.Duration{}
	for round := 0; round < *flagAuthRounds; round++ {
		for _, f := range faults {
			if only != "" && !slices.Contains(strings.Split(only, ","), f.name) {
				continue
			}
			offsets := cv.logOffsets()
			began := time.Now()
			f.do()
			ended := time.Now()
			d := cv.wait(ctx, f.name, ended)
			results[f.name] = append(results[f.name], d)
			t.Logf("fault %s (took %v): reconverged %v after its end; logs: %s",
				f.name, ended.Sub(began).Round(time.Millisecond), d.Round(time.Millisecond), cv.logSummary(offsets))
		}
	}
	var names []string
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ds := results[n]
		s := slices.Clone(ds)
		slices.Sort(s)
		t.Logf("RESULT %-34s median %v  all %v", n, s[len(s)/2].Round(time.Millisecond), ds)
	}
	t.Logf("heartbeat output:\n%s", hbOut.String())
	for _, e := range chk.Errs() {
		t.Error(e)
	}
}

// converger waits for, and measures, the fleet's reconvergence.
type converger struct {
	t      *testing.T
	c      *etcdproc.Cluster
	root   *clientv3.Client
	chk    *checker
	agents []*agentProc
	hbOut  *logbuf.Buffer
}

// wait waits (up to 90s) until every agent is connected, without
// etcd_error, at etcd's current revision or later, serves a table equal
// to the reference at its revision, has its status key in etcd
// (connected), and the heartbeat's key is present. It returns how long
// after since that was; it fails the test if it took over 60s.
func (cv *converger) wait(ctx context.Context, name string, since time.Time) time.Duration {
	t := cv.t
	var target int64
	for target == 0 {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cv.root.Get(gctx, prefix+"epoch")
		cancel()
		if err == nil {
			target = resp.Header.Revision
		} else if time.Since(since) > 60*time.Second {
			t.Fatalf("%s: root cannot read etcd 60s after the fault: %v", name, err)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	seenErr := map[string]map[string]bool{}
	var last string
	deadline := since.Add(90 * time.Second)
	var trail []string
	prev := ""
	for {
		last = cv.check(ctx, target, seenErr)
		if k := blockerKind(last); k != prev {
			trail = append(trail, fmt.Sprintf("+%v %s", time.Since(since).Round(100*time.Millisecond), k))
			prev = k
		}
		if last == "" {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	d := time.Since(since)
	if d > 3*time.Second {
		t.Logf("%s: blockers until converged: %s", name, strings.Join(trail, " → "))
	}
	for a, errs := range seenErr {
		var es []string
		for e := range errs {
			es = append(es, e)
		}
		sort.Strings(es)
		t.Logf("%s: %s etcd_error values seen while converging: %q", name, a, es)
	}
	if last != "" || d > 60*time.Second {
		t.Errorf("%s: not reconverged %v after the fault (target revision %d): %s", name, d.Round(time.Millisecond), target, last)
		for _, a := range cv.agents {
			t.Logf("%s: last lines of %s's log:\n%s", name, a.name, a.logTail(30))
		}
		t.Logf("%s: heartbeat output:\n%s", name, tail(cv.hbOut.String(), 20))
		return -1
	}
	return d
}

// blockerKind shortens check's answer to what blocks, for the trail.
func blockerKind(s string) string {
	if s == "" {
		return "converged"
	}
	name, rest, _ := strings.Cut(s, " ")
	switch {
	case strings.HasPrefix(rest, "status: "):
		var st struct {
			Connected bool   `json:"connected"`
			Revision  int64  `json:"revision"`
			EtcdError string `json:"etcd_error"`
		}
		json.Unmarshal([]byte(strings.TrimPrefix(rest, "status: ")), &st)
		e := st.EtcdError
		if len(e) > 70 {
			e = e[:70] + "…"
		}
		return fmt.Sprintf("%s connected=%v etcd_error=%q", name, st.Connected, e)
	case len(s) > 90:
		return s[:90] + "…"
	}
	return s
}

// check returns "" when converged at target, else what is missing.
func (cv *converger) check(ctx context.Context, target int64, seenErr map[string]map[string]bool) string {
	for _, a := range cv.agents {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		code, b, err := a.get(cctx, "/v1/status")
		cancel()
		if err != nil || code != 200 {
			return fmt.Sprintf("%s /v1/status: %d %v", a.name, code, err)
		}
		var st struct {
			Revision    int64  `json:"revision"`
			Connected   bool   `json:"connected"`
			EtcdError   string `json:"etcd_error"`
			StatusError string `json:"status_error"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return err.Error()
		}
		for _, e := range []string{"etcd_error: " + st.EtcdError, "status_error: " + st.StatusError} {
			if !strings.HasSuffix(e, ": ") {
				if seenErr[a.name] == nil {
					seenErr[a.name] = map[string]bool{}
				}
				seenErr[a.name][e] = true
			}
		}
		if !st.Connected || st.EtcdError != "" || st.Revision < target {
			return fmt.Sprintf("%s status: %s", a.name, b)
		}
		cctx, cancel = context.WithTimeout(ctx, 12*time.Second)
		rev, err := cv.chk.checkTable(cctx, a)
		cancel()
		if err != nil {
			return fmt.Sprintf("%s table: %v", a.name, err)
		}
		if rev < target {
			return fmt.Sprintf("%s table at %d < %d", a.name, rev, target)
		}
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cv.root.Get(gctx, root+"/agents/"+a.name)
		cancel()
		if err != nil || len(resp.Kvs) == 0 {
			return fmt.Sprintf("%s status key absent (%v)", a.name, err)
		}
		var ks routing.AgentStatus
		if json.Unmarshal(resp.Kvs[0].Value, &ks) != nil || !ks.Connected {
			return fmt.Sprintf("%s status key: %s", a.name, resp.Kvs[0].Value)
		}
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := cv.root.Get(gctx, hbKey)
	cancel()
	if err != nil || len(resp.Kvs) == 0 {
		return fmt.Sprintf("heartbeat key absent (%v)", err)
	}
	return ""
}

// snapshot logs every agent's /v1/status and login/connection gauges now.
func (cv *converger) snapshot(what string) {
	for _, a := range cv.agents {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, st, _ := a.get(ctx, "/v1/status")
		_, m, _ := a.get(ctx, "/metrics")
		cancel()
		var gauges []string
		for _, l := range strings.Split(string(m), "\n") {
			if strings.HasPrefix(l, "regiond_agent_etcd_") || strings.HasPrefix(l, "regiond_agent_connected") || strings.HasPrefix(l, "regiond_agent_watch") || strings.HasPrefix(l, "regiond_agent_status_put") {
				gauges = append(gauges, l)
			}
		}
		cv.t.Logf("%s: %s /v1/status %s\n  metrics: %s", what, a.name, st, strings.Join(gauges, " | "))
	}
}

func (cv *converger) logOffsets() []int64 {
	var offs []int64
	for _, a := range cv.agents {
		fi, err := os.Stat(a.logPath)
		if err != nil {
			offs = append(offs, 0)
			continue
		}
		offs = append(offs, fi.Size())
	}
	return offs
}

// logSummary counts WARN and ERROR lines each agent logged since offsets,
// with the most frequent messages.
func (cv *converger) logSummary(offs []int64) string {
	var out []string
	for i, a := range cv.agents {
		b, _ := os.ReadFile(a.logPath)
		if int64(len(b)) < offs[i] {
			continue
		}
		counts := map[string]int{}
		var warn, errs int
		for _, line := range strings.Split(string(b[offs[i]:]), "\n") {
			var lv string
			switch {
			case strings.Contains(line, "level=WARN"), strings.Contains(line, `"level":"WARN"`):
				lv, warn = "WARN", warn+1
			case strings.Contains(line, "level=ERROR"), strings.Contains(line, `"level":"ERROR"`):
				lv, errs = "ERROR", errs+1
			default:
				continue
			}
			msg := line
			if j := strings.Index(line, "msg="); j >= 0 {
				msg = line[j:]
				if k := strings.Index(msg, "\" "); k > 0 {
					msg = msg[:k+1]
				}
			}
			counts[lv+" "+msg]++
		}
		var top []string
		for m, n := range counts {
			top = append(top, fmt.Sprintf("%d× %s", n, m))
		}
		sort.Slice(top, func(x, y int) bool { return top[x] > top[y] })
		if len(top) > 4 {
			top = top[:4]
		}
		out = append(out, fmt.Sprintf("\n    %s: %d WARN, %d ERROR %v", a.name, warn, errs, top))
	}
	return strings.Join(out, "")
}

// mustDo retries f (a request to etcd just after a fault) up to 20
// times, 200 ms apart.
func mustDo(t *testing.T, f func() error) {
	t.Helper()
	for i := 0; ; i++ {
		err := f()
		if err == nil {
			return
		}
		if i == 20 {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rsaKeys writes an RSA key pair for etcd's JWT tokens and returns the
// public and private key files.
func rsaKeys(t *testing.T, dir string) (string, string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv := filepath.Join(dir, "jwt.pub"), filepath.Join(dir, "jwt.key")
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

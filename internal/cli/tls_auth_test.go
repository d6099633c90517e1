package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
)

// runEnv runs regionctl in-process with exactly args and env (no test
// defaults), and reports how long it took.
func runEnv(env map[string]string, args ...string) (result, time.Duration) {
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	code := run(ctx, args, &out, &errb, func(k string) string { return env[k] })
	return result{code: code, stdout: out.String(), stderr: errb.String()}, time.Since(start)
}

// tlsFlags are the connection flags of a client trusted by srv.
func tlsFlags(srv *devetcd.Server, certs *devetcd.TestCerts, prefix string) []string {
	return []string{"--endpoints", srv.Endpoints[0], "--cacert", certs.CAFile,
		"--cert", certs.ClientCertFile, "--key", certs.ClientKeyFile, "--prefix", prefix}
}

// TestTLS: regionctl reaches an etcd that serves TLS and requires client
// certificates, with the TLS flags or their REGIONCTL_* variables; without
// the CA or the client certificate it exits 4 within the dial timeout,
// naming the endpoint and the TLS flags.
func TestTLS(t *testing.T) {
	t.Parallel()
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	ep := srv.Endpoints[0]
	const prefix = "/tls"

	r, _ := runEnv(nil, append(tlsFlags(srv, certs, prefix), "apply", "-f", exampleConfig, "--reason", "over TLS")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "epoch 0 → 1") {
		t.Fatalf("apply over TLS: %s", r)
	}
	r, _ = runEnv(nil, append(tlsFlags(srv, certs, prefix), "get", "pools")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "edge-fra-1.example.net") {
		t.Fatalf("get over TLS: %s", r)
	}
	env := map[string]string{"REGIONCTL_ENDPOINTS": ep, "REGIONCTL_CACERT": certs.CAFile,
		"REGIONCTL_CERT": certs.ClientCertFile, "REGIONCTL_KEY": certs.ClientKeyFile, "REGIONCTL_PREFIX": prefix}
	if r, _ := runEnv(env, "get", "routes"); r.code != ExitOK || !strings.Contains(r.stdout, "eu-general") {
		t.Fatalf("get with TLS from REGIONCTL_*: %s", r)
	}
	// In resolve, --key is the sticky key: the TLS key comes from
	// REGIONCTL_KEY, and a --cert without it says so.
	r, _ = runEnv(nil, append(tlsFlags(srv, certs, prefix), "resolve", "PL")...)
	if r.code != ExitUsage || !strings.Contains(r.stderr, "in resolve, --key is the sticky key; set the TLS key with REGIONCTL_KEY") {
		t.Fatalf("resolve with the TLS flags typed: %s", r)
	}
	if r, _ := runEnv(map[string]string{"REGIONCTL_KEY": certs.ClientKeyFile}, "--endpoints", ep, "--cacert", certs.CAFile,
		"--cert", certs.ClientCertFile, "--prefix", prefix, "resolve", "PL", "--key", "viewer-1"); r.code != ExitOK {
		t.Fatalf("resolve with the TLS key from REGIONCTL_KEY: %s", r)
	}
	// An endpoint without a scheme takes TLS from the flags.
	bare := strings.TrimPrefix(ep, "https://")
	if r, _ := runEnv(nil, "--endpoints", bare, "--cacert", certs.CAFile, "--cert", certs.ClientCertFile,
		"--key", certs.ClientKeyFile, "--prefix", prefix, "get", "pools"); r.code != ExitOK {
		t.Fatalf("scheme-less endpoint with TLS flags: %s", r)
	}
	// A TLS file that does not load is a usage error.
	if r, _ := runEnv(nil, "--endpoints", ep, "--cacert", certs.ClientKeyFile, "--prefix", prefix, "get"); r.code != ExitUsage ||
		!strings.Contains(r.stderr, "no PEM certificate found") {
		t.Fatalf("--cacert with a key file: %s", r)
	}

	// etcd's client hides the handshake error behind its retries: the
	// probe times out, so these exit 4 (unreachable) after --dial-timeout,
	// and the message says what the endpoint's own dial found.
	for name, tc := range map[string]struct{ args, why []string }{
		"without --cacert": {[]string{"--endpoints", ep, "--cert", certs.ClientCertFile, "--key", certs.ClientKeyFile},
			[]string{ep + ": TLS handshake: ", "certificate signed by unknown authority"}},
		"without --cert": {[]string{"--endpoints", ep, "--cacert", certs.CAFile},
			[]string{ep + ": TLS: the server refused this client's certificate after the handshake", "(this client presents no certificate: --cert, --key)"}},
		"no TLS flags": {[]string{"--endpoints", ep}, []string{ep + ": TLS handshake: ", "certificate signed by unknown authority"}},
		"http:// to TLS": {[]string{"--endpoints", "http://" + bare},
			[]string{"http://" + bare + ": the server there speaks TLS: use https://"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, took := runEnv(nil, append(tc.args, "--prefix", prefix, "--dial-timeout", "1s", "get")...)
			want := "regionctl: etcd unreachable at " + tc.args[1] + ": no answer within 1s"
			if r.code != ExitUnreachable || !strings.Contains(r.stderr, want) || took > 10*time.Second {
				t.Fatalf("want exit 4 with %q within 3s, got after %s: %s", want, took, r)
			}
			for _, w := range tc.why {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not say %q: %s", w, r)
				}
			}
		})
	}
	if r, _ := runEnv(nil, "--endpoints", "http://"+bare, "--cacert", certs.CAFile, "--prefix", prefix, "get"); r.code != ExitUsage ||
		!strings.Contains(r.stderr, "write https://") {
		t.Fatalf("http:// with --cacert: %s, want exit 2 saying to write https://", r)
	}
}

// TestAuth: against an etcd with TLS and authentication on, a user whose
// role has readwrite on the prefix writes with --user and
// REGIONCTL_PASSWORD (or --user name:password); a wrong password, a
// missing user and a prefix outside the role exit 1 naming the user (or
// the certificate's CN), the endpoint and, for a write verb refused its
// first read, what a write needs and the role that holds it; they write
// nothing.
func TestAuth(t *testing.T) {
	t.Parallel()
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	const prefix = "/auth"
	a := devetcd.EnableTestAuth(t, srv, prefix+"/")
	ep := srv.Endpoints[0]
	flags := tlsFlags(srv, certs, prefix)
	pw := map[string]string{"REGIONCTL_PASSWORD": a.Password}

	r, took := runEnv(pw, append(flags, "--user", a.User, "apply", "-f", exampleConfig, "--reason", "x")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "epoch 0 → 1") {
		t.Fatalf("apply with --user and REGIONCTL_PASSWORD: %s", r)
	}
	t.Logf("authenticated apply took %s", took)
	r, _ = runEnv(nil, append(flags, "--user", a.User+":"+a.Password, "pool", "drain", "eu-north", "--reason", "y")...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "epoch 1 → 2") {
		t.Fatalf("drain with --user name:password: %s", r)
	}
	// The audit records carry the etcd user and never the password.
	root, err := srv.ClientAs("root", a.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ks, _ := keyspace.New(prefix)
	for epoch := int64(1); epoch <= 2; epoch++ {
		resp, err := root.Get(context.Background(), ks.Audit(epoch))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("audit %d: %v", epoch, err)
		}
		var rec routing.Audit
		if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.User != a.User || strings.Contains(string(resp.Kvs[0].Value), a.Password) {
			t.Fatalf("audit %d = %s (%v)", epoch, resp.Kvs[0].Value, err)
		}
	}
	written := func() int64 {
		resp, err := root.Get(context.Background(), prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	before := written()

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"wrong password", map[string]string{"REGIONCTL_PASSWORD": "wrong"}, append(flags, "--user", a.User),
			"regionctl: authentication failed for user " + a.User + " at " + ep + ": etcdserver: authentication failed, invalid user ID or password"},
		{"wrong password in --user", nil, append(flags, "--user", a.User+":wrong"),
			"regionctl: authentication failed for user " + a.User + " at " + ep},
		{"unknown user", map[string]string{"REGIONCTL_PASSWORD": "x"}, append(flags, "--user", "mallory"),
			"regionctl: authentication failed for user mallory at " + ep},
		// Without --user, etcd takes the client certificate's CN as the
		// user: no such user exists.
		{"no user", nil, flags,
			"regionctl: permission denied for user " + devetcd.TestClientCN + " at " + ep + ": read " + prefix + "/routing/epoch needs " +
				commitNeeds(prefix) + " (role regiond-operator): etcdserver: permission denied"},
		{"prefix outside the role", pw, append(tlsFlags(srv, certs, "/elsewhere"), "--user", a.User),
			"regionctl: permission denied for user " + a.User + " at " + ep + ": read /elsewhere/routing/epoch needs " +
				commitNeeds("/elsewhere") + " (role regiond-operator): etcdserver: permission denied"},
	} {
		r, took := runEnv(tc.env, append(tc.args, "pool", "undrain", "eu-north", "--reason", "z")...)
		if r.code != ExitRefused || !strings.Contains(r.stderr, tc.want) || took > 10*time.Second {
			t.Errorf("%s: want exit 1 with %q within 3s, got after %s: %s", tc.name, tc.want, took, r)
		}
	}
	if after := written(); after != before {
		t.Fatalf("a refused client wrote to etcd (revision %d → %d)", before, after)
	}
}

// openPTY opens a pseudo-terminal and returns its controller (non-blocking:
// reads take deadlines) and its terminal end, both closed when the test
// ends.
func openPTY(t *testing.T) (ctl, tty *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	ctl = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { ctl.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pty's terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return ctl, tty
}

// TestAuthAsksForThePassword: --user without a password asks for it on
// the terminal that is standard input, without echo, as etcdctl does, and
// logs in with it; without a terminal (a script) it is a usage error
// naming REGIONCTL_PASSWORD, and nothing is dialed.
func TestAuthAsksForThePassword(t *testing.T) {
	t.Parallel()
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	const prefix = "/ask"
	a := devetcd.EnableTestAuth(t, srv, prefix+"/")
	flags := append(tlsFlags(srv, certs, prefix), "--user", a.User, "apply", "-f", exampleConfig, "--reason", "asked")

	ctl, tty := openPTY(t)
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), stdinHook{}, io.Reader(tty)), 30*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, flags, &out, &errb, func(string) string { return "" }) }()
	// The password is typed once the terminal's echo is off (regionctl
	// is reading it), as a person would after the prompt.
	for i := 0; ; i++ {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		if i == 1000 {
			t.Fatal("regionctl never turned the terminal's echo off to read the password")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := ctl.Write([]byte(a.Password + "\n")); err != nil {
		t.Fatal(err)
	}
	code := <-done
	if code != ExitOK || !strings.Contains(out.String(), "epoch 0 → 1") {
		t.Fatalf("apply with the password typed at the prompt: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "Password of etcd user "+a.User+": ") || strings.Contains(errb.String()+out.String(), a.Password) {
		t.Fatalf("the prompt: stderr %q; want it to ask for %s's password and never show it", errb.String(), a.User)
	}
	// What the terminal showed: no echo of the password, and its echo
	// back on.
	if err := ctl.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	shown, _ := io.ReadAll(ctl)
	if strings.Contains(string(shown), a.Password) {
		t.Fatalf("the terminal echoed the password: %q", shown)
	}
	if tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil || tio.Lflag&unix.ECHO == 0 {
		t.Fatalf("the terminal's echo is left off (%v)", err)
	}

	// No terminal, no password: exit 2, naming the ways to give one.
	var out2, errb2 strings.Builder
	ctx2 := context.WithValue(context.Background(), stdinHook{}, io.Reader(strings.NewReader(a.Password+"\n")))
	code = run(ctx2, flags, &out2, &errb2, func(string) string { return "" })
	if code != ExitUsage || !strings.Contains(errb2.String(), "--user "+a.User+": no password: set REGIONCTL_PASSWORD, or give --user "+a.User+":PASSWORD") {
		t.Fatalf("--user without a password and no terminal: exit %d %q, want 2 naming REGIONCTL_PASSWORD", code, errb2.String())
	}
}

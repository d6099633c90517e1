package etcddiag_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/freeport"
)

// closedEndpoint returns an http:// URL of a loopback port nothing
// listens on (reserved by freeport, never bound).
func closedEndpoint(t *testing.T) string {
	t.Helper()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// TestCheckNamesTheEndpointsThatTookTheConnection protects Check's second
// result and Describe, which store's UnreachableError and the agent's
// etcd_error print (exit 4's message): the failures joined with "; ",
// the endpoints that took the connection named, each of them, as "etcd
// did not answer" (a member without a leader), and nothing at all when
// every endpoint took the connection (the agent calls
// Describe(Check(...)) whatever Check found). Only the 3-member quorum
// test in internal/cli covered any of it.
func TestCheckNamesTheEndpointsThatTookTheConnection(t *testing.T) {
	live := devetcd.NewTest(t).Endpoints[0]
	down1, down2 := closedEndpoint(t), closedEndpoint(t)

	why, connected := etcddiag.Check(context.Background(), []string{down1, live, down2}, nil)
	parts := strings.Split(why, "; ")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], down1+": dial: ") || !strings.HasPrefix(parts[1], down2+": dial: ") {
		t.Errorf("Check why = %q, want %s's and %s's dial errors, in order, joined with \"; \"", why, down1, down2)
	}
	if !slices.Equal(connected, []string{live}) {
		t.Errorf("Check connected = %q, want [%s]", connected, live)
	}
	const noLeader = ": took the connection, but etcd did not answer: has the cluster a leader, a quorum of its members up?"
	if got, want := etcddiag.Describe(why, connected), why+"; "+live+noLeader; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	if got := etcddiag.Describe(why, nil); got != why {
		t.Errorf("Describe(why, no endpoint connected) = %q, want why alone, %q", got, why)
	}

	// Two members that took the connection (a 3-member cluster, one down):
	// both named.
	why, connected = etcddiag.Check(context.Background(), []string{live, down1, live}, nil)
	if got, want := etcddiag.Describe(why, connected), live+", "+live+noLeader; !strings.HasSuffix(got, want) {
		t.Errorf("Describe = %q, want it to end %q", got, want)
	}

	// Every endpoint took the connection: nothing to say.
	why, connected = etcddiag.Check(context.Background(), []string{live}, nil)
	if why != "" || !slices.Equal(connected, []string{live}) {
		t.Errorf("Check(a live etcd) = %q, %q; want \"\", [%s]", why, connected, live)
	}
	if got := etcddiag.Describe(why, connected); got != "" {
		t.Errorf("Describe(Check(a live etcd)) = %q, want \"\"", got)
	}
}

// TestWhyOverTLSWithoutTheCA protects the default TLS config of an
// https:// endpoint given no TLS flags (the system's roots, as the etcd
// client uses): an operator who forgot --cacert for etcd's private CA is
// told the certificate's authority is unknown, not that all is well. It
// also bounds the check of a healthy TLS endpoint (the read that waits
// for a TLS 1.3 refusal of the client certificate), which a caller pays
// on every failed request.
func TestWhyOverTLSWithoutTheCA(t *testing.T) {
	certs := devetcd.NewTestCerts(t)
	secure := devetcd.NewTestTLS(t, certs)
	ep := secure.Endpoints[0]
	if got := etcddiag.Why(context.Background(), []string{ep}, nil); !strings.Contains(got, ep+": TLS handshake: ") ||
		!strings.Contains(got, "certificate signed by unknown authority") {
		t.Errorf("Why(https, no --cacert) = %q, want the TLS handshake's unknown authority", got)
	}
	good, err := certs.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got := etcddiag.Why(context.Background(), []string{ep}, good); got != "" {
		t.Errorf("Why(https, right) = %q, want \"\"", got)
	}
	if d := time.Since(start); d > 3*etcddiag.Timeout {
		t.Errorf("Why(a healthy TLS endpoint) took %v, want well under %v", d, 3*etcddiag.Timeout)
	}
}

// startUnixEtcd starts an embedded etcd serving clients at clientURL, a
// unix:// or unixs:// URL (a socket file relative to the working
// directory), its peer URL a unix socket too; tlsInfo, when not nil,
// serves TLS and requires client certificates.
func startUnixEtcd(t *testing.T, clientURL string, tlsInfo *devetcd.TestCerts) {
	t.Helper()
	dir := t.TempDir()
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "data")
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu, err := url.Parse(clientURL)
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse("unix://" + filepath.Join(dir, "peer.sock"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if tlsInfo != nil {
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = tlsInfo.ServerCertFile, tlsInfo.ServerKeyFile
		cfg.ClientTLSInfo.TrustedCAFile, cfg.ClientTLSInfo.ClientCertAuth = tlsInfo.CAFile, true
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready after 30s")
	}
}

// TestWhyOverUnixSockets protects the unix and unixs schemes, which
// Endpoints accepts and the etcd client dials: Why dials the socket, and
// speaks TLS to a unixs:// one (its file named "localhost", the name the
// server certificate holds: the etcd client takes the file's name as the
// server name). A unixs endpoint taken as plaintext, or dialed as TCP,
// would be named wrongly.
func TestWhyOverUnixSockets(t *testing.T) {
	t.Chdir(t.TempDir())
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	certs := devetcd.NewTestCerts(t)
	startUnixEtcd(t, "unix://etcd.sock", nil)
	startUnixEtcd(t, "unixs://localhost", certs)
	good, err := certs.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ep   string
		tls  bool
		want string // in Why; "": Why is ""
	}{
		{"unix://etcd.sock", false, ""},
		{"unixs://localhost", true, ""},
		{"unix://localhost", false, "unix://localhost: the server there speaks TLS: use unixs://"},
		{"unixs://etcd.sock", true, "unixs://etcd.sock: TLS handshake: the server closed the connection (a plaintext port? then unix://)"},
		{"unix://nosuch.sock", false, "unix://nosuch.sock: dial: "},
		// Absolute paths, as etcd's client dials them (the path after
		// "://"; for TLS the file's name is the server name): Why said
		// "not a URL" of a URL the client used.
		{"unix://" + wd + "/etcd.sock", false, ""},
		{"unixs://" + wd + "/localhost", true, ""},
		{"unix://" + wd + "/localhost", false, "the server there speaks TLS: use unixs://"},
		{"unix://" + wd + "/nosuch.sock", false, wd + "/nosuch.sock: dial: "},
	} {
		eps, err := etcddiag.Endpoints([]string{tc.ep}, tc.tls)
		if err != nil {
			t.Fatalf("Endpoints(%s): %v", tc.ep, err)
		}
		cfg := good
		if !tc.tls {
			cfg = nil
		}
		got := etcddiag.Why(context.Background(), eps, cfg)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("Why(%s) = %q, want %q", tc.ep, got, tc.want)
		}
		if tc.want == "" { // the etcd client agrees
			cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: cfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = cli.Get(ctx, "k")
			cancel()
			cli.Close()
			if err != nil {
				t.Errorf("the etcd client at %s: %v", tc.ep, err)
			}
		}
	}
}

// noSource is an api.Source the 404 path never asks.
type noSource struct{ api.Source }

// TestWhyNamesHTTPServersThatAreNotEtcd protects the check of GET
// /version's body ("etcdserver") and of /proxy/health's answer: an HTTP
// server answering 200 to everything is not etcd, and regiond's own API
// (the documented usual mix-up), whose 404 is a JSON body without
// "health", is named as not etcd rather than taken for a grpc-proxy (or
// crashing the check).
func TestWhyNamesHTTPServersThatAreNotEtcd(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer ok.Close()
	regiond := httptest.NewServer(api.New(api.Config{Node: "n1"}, noSource{}).Handler(true))
	defer regiond.Close()
	for _, tc := range []struct{ ep, want string }{
		{ok.URL, ok.URL + ": an HTTP server that is not etcd answers there (GET /version: 200 OK)"},
		{regiond.URL, regiond.URL + ": an HTTP server that is not etcd answers there (GET /version: 404 Not Found): check the port (regiond's own API"},
	} {
		if got := etcddiag.Why(context.Background(), []string{tc.ep}, nil); !strings.Contains(got, tc.want) {
			t.Errorf("Why = %q, want it to contain %q", got, tc.want)
		}
	}
}

// TestWhyGivesUpOnAnHTTPServerThatHangs protects the bound of each HTTP
// question (GET /version) by Timeout, not by the caller's context: a
// plaintext server that refuses the TLS hello at once but never answers
// the GET must not hold a command's diagnosis until its own deadline.
func TestWhyGivesUpOnAnHTTPServerThatHangs(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	got := etcddiag.Why(ctx, []string{hung.URL}, nil)
	if d := time.Since(start); d > 10*etcddiag.Timeout {
		t.Errorf("Why(an HTTP server that never answers) took %v (= %q), want about %v", d, got, etcddiag.Timeout)
	}
}

// TestEndpointsEdges protects what TestEndpoints leaves out: a trailing
// "/" is no path (etcdctl takes https://etcd-1:2379/), a URL without a
// host is refused, an empty list (--endpoints "" parses to none) is
// refused, and so is an empty endpoint anywhere in the list (a,,b), not
// only first.
func TestEndpointsEdges(t *testing.T) {
	if got, err := etcddiag.Endpoints([]string{"http://127.0.0.1:2379/"}, false); err != nil || !slices.Equal(got, []string{"http://127.0.0.1:2379/"}) {
		t.Errorf("Endpoints(a trailing slash) = %q, %v; want it accepted", got, err)
	}
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"http://:2379"}, `--endpoints "http://:2379": want scheme://host:port`},
		{[]string{}, "--endpoints is empty"},
		{[]string{"127.0.0.1:2379", "", "127.0.0.1:2380"}, `--endpoints "127.0.0.1:2379,,127.0.0.1:2380": an empty endpoint (a stray comma?)`},
	} {
		if got, err := etcddiag.Endpoints(tc.in, false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Endpoints(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.want)
		}
	}
	if got := etcddiag.Why(context.Background(), []string{"http://"}, nil); got != "http://: not a URL of the form http(s)://host:port" {
		t.Errorf("Why(http://) = %q", got)
	}
}

// TestHintOnRealEtcdRefusals protects Hint against the errors a real etcd
// client returns, not constructed ones: NOSPACE (a put and a lease grant
// under the alarm) gets the way out; an unreachable etcd ("context
// deadline exceeded"), a compacted revision, a refused login and a
// permission denied get none, and an etcd with authentication on is no
// failure of Why's (the endpoint took the connection: the login is what
// is refused).
func TestHintOnRealEtcdRefusals(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	ctx := context.Background()
	noHint := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		if h := etcddiag.Hint(err); h != "" || etcddiag.NoSpace(err) {
			t.Errorf("Hint(%s: %v) = %q, want \"\"", what, err, h)
		}
	}

	// etcd unreachable: the request's deadline passes.
	gctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := devetcd.NewGoneClient(t).Put(gctx, "k", "v")
	cancel()
	noHint("put to a gone etcd", err)

	// A compacted revision.
	first, err := cli.Put(ctx, "k", "1")
	if err != nil {
		t.Fatal(err)
	}
	last, err := cli.Put(ctx, "k", "2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, last.Header.Revision); err != nil {
		t.Fatal(err)
	}
	_, err = cli.Get(ctx, "k", clientv3.WithRev(first.Header.Revision))
	noHint("get at a compacted revision", err)

	// NOSPACE.
	disarm := devetcd.RaiseNoSpaceAlarm(t, cli)
	_, err = cli.Put(ctx, "k", "3")
	if h := etcddiag.Hint(err); h != etcddiag.NoSpaceHint {
		t.Errorf("Hint(put under NOSPACE: %v) = %q, want NoSpaceHint", err, h)
	}
	_, err = cli.Grant(ctx, 60)
	if h := etcddiag.Hint(fmt.Errorf("grant lease: %w", err)); h != etcddiag.NoSpaceHint {
		t.Errorf("Hint(lease grant under NOSPACE: %v) = %q, want NoSpaceHint", err, h)
	}
	disarm()

	// Authentication on.
	a := devetcd.EnableTestAuth(t, srv, "/p/")
	_, err = srv.ClientAs(a.User, "wrong")
	noHint("login with a wrong password", err)
	user, err := srv.ClientAs(a.User, a.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	_, err = user.Put(ctx, "/elsewhere", "x")
	noHint("put outside the user's prefix", err)
	if got := etcddiag.Why(ctx, srv.Endpoints, nil); got != "" {
		t.Errorf("Why(an etcd with authentication on) = %q, want \"\"", got)
	}
}

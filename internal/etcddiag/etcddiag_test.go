package etcddiag_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/etcdproc"
	"github.com/regiond/regiond/internal/freeport"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// TestWhy names what is wrong at each endpoint of a real etcd: plaintext
// and TLS (with client certificates), dialed right and wrong.
func TestWhy(t *testing.T) {
	plain := devetcd.NewTest(t)
	certs := devetcd.NewTestCerts(t)
	secure := devetcd.NewTestTLS(t, certs)
	good, err := certs.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := devetcd.NewTestCerts(t).ClientTLSConfig() // another CA's pool and certificate
	if err != nil {
		t.Fatal(err)
	}
	noCert := good.Clone()
	noCert.Certificates, noCert.GetClientCertificate = nil, nil
	expired, expiredAt := expiredClient(t, certs)
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	closed := fmt.Sprintf("http://127.0.0.1:%d", port)
	httpsEP, plainEP := secure.Endpoints[0], plain.Endpoints[0]
	asHTTP := strings.Replace(httpsEP, "https://", "http://", 1)
	asHTTPS := strings.Replace(plainEP, "http://", "https://", 1)
	// A plaintext HTTP/1 server that is not etcd (as regiond's own API).
	notEtcd := httptest.NewServer(http.NotFoundHandler())
	defer notEtcd.Close()
	notEtcdEP := notEtcd.URL
	// A path that drops every packet, connections open, in front of each.
	silentPlain := frozenProxy(t, plainEP)
	silentTLS := strings.Replace(frozenProxy(t, httpsEP), "http://", "https://", 1)

	for _, tc := range []struct {
		name      string
		endpoints []string
		tls       *tls.Config
		want      []string // each in the answer; none: ""
	}{
		{"plaintext, right", []string{plainEP}, nil, nil},
		{"TLS, right", []string{httpsEP}, good, nil},
		{"nothing listening", []string{closed}, nil, []string{closed + ": dial: ", "connection refused"}},
		{"another CA", []string{httpsEP}, otherCA, []string{httpsEP + ": TLS handshake: ", "certificate signed by unknown authority"}},
		{"no client certificate", []string{httpsEP}, noCert, []string{httpsEP + ": TLS: the server refused this client's certificate after the handshake", "certificate required", "(this client presents no certificate: --cert, --key)"}},
		// The auth review: which certificate expired, and since when.
		{"an expired client certificate", []string{httpsEP}, expired, []string{httpsEP + ": TLS", "expired certificate",
			"(this client's certificate --cert, CN old-one, expired at " + expiredAt.Format(time.RFC3339) + ": renew it"}},
		{"http:// to TLS", []string{asHTTP}, nil, []string{asHTTP + ": the server there speaks TLS: use https://"}},
		{"https:// to plaintext", []string{asHTTPS}, good, []string{asHTTPS + ": TLS handshake: ", "the server closed the connection (a plaintext port? then http://)"}},
		{"bad scheme", []string{"htps://127.0.0.1:2379"}, nil, []string{`unknown scheme "htps"`}},
		{"one of two down", []string{plainEP, closed}, nil, []string{closed + ": dial: "}},
		{"an HTTP server, not etcd", []string{notEtcdEP}, nil, []string{notEtcdEP + ": an HTTP server that is not etcd answers there (GET /version: 404 Not Found)"}},
		{"a silent path, plaintext", []string{silentPlain}, nil, []string{silentPlain + ": " + etcddiag.Silent}},
		{"a silent path, TLS", []string{silentTLS}, good, []string{silentTLS + ": " + etcddiag.Silent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := etcddiag.Why(context.Background(), tc.endpoints, tc.tls)
			if len(tc.want) == 0 && got != "" {
				t.Errorf("Why = %q, want \"\"", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("Why = %q, want it to contain %q", got, w)
				}
			}
			if strings.Contains(got, plainEP+":") && tc.name == "one of two down" {
				t.Errorf("Why = %q names the endpoint that answers", got)
			}
		})
	}
}

// TestWhyBehindAGRPCProxy: etcd's grpc-proxy has no GET /version (404),
// so it was named "an HTTP server that is not etcd" when the members
// behind it were down; it is named as the proxy, with its health
// check's reason, and nothing is said while its members answer.
func TestWhyBehindAGRPCProxy(t *testing.T) {
	live := etcdproc.StartProxyTo(t, devetcd.NewTest(t).Endpoints, etcdproc.ProxyConfig{})
	if got := etcddiag.Why(context.Background(), []string{live.URL()}, nil); got != "" {
		t.Errorf("Why(a grpc-proxy in front of a live etcd) = %q, want \"\"", got)
	}
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	// AuthOn: taken as serving once its HTTP endpoint answers, as its
	// own health check fails with nothing behind it.
	dead := etcdproc.StartProxyTo(t, []string{fmt.Sprintf("http://127.0.0.1:%d", port)}, etcdproc.ProxyConfig{AuthOn: true})
	got := etcddiag.Why(context.Background(), []string{dead.URL()}, nil)
	for _, w := range []string{dead.URL() + ": etcd's grpc-proxy answers there, but the etcd members behind it do not answer it (GET /proxy/health: ", "check the proxy's --endpoints",
		"(a check that timed out may also be an overloaded proxy or member"} {
		if !strings.Contains(got, w) {
			t.Errorf("Why(a grpc-proxy with no etcd behind it) = %q, want it to contain %q", got, w)
		}
	}
	if strings.Contains(got, "not etcd") {
		t.Errorf("Why(a grpc-proxy with no etcd behind it) = %q: names it not etcd", got)
	}
}

// TestEndpoints: what --endpoints accepts, how bare host:port values are
// completed, and what it refuses, naming the value.
func TestEndpoints(t *testing.T) {
	for _, tc := range []struct {
		in    []string
		tls   bool
		want  string // the endpoints joined with ",", or the error's text
		isErr bool
	}{
		{[]string{"127.0.0.1:2379"}, false, "http://127.0.0.1:2379", false},
		{[]string{"127.0.0.1:2379", "https://etcd-2:2379", "unixs://etcd.sock"}, true, "https://127.0.0.1:2379,https://etcd-2:2379,unixs://etcd.sock", false},
		{[]string{"127.0.0.1:2379", " http://etcd-2:2379"}, false, "http://127.0.0.1:2379,http://etcd-2:2379", false}, // "a, b"
		{nil, false, "--endpoints is empty", true},
		{[]string{""}, false, "an empty endpoint", true},
		{[]string{"htps://127.0.0.1:2379"}, false, `unknown scheme "htps"`, true},
		{[]string{"http://127.0.0.1"}, false, `"http://127.0.0.1": want scheme://host:port: the port is missing (http://127.0.0.1:2379 for etcd's usual client port)`, true},
		// host:port needs no scheme: the port is what is missing.
		{[]string{"127.0.0.1"}, false, `"127.0.0.1": want host:port or scheme://host:port: the port is missing (127.0.0.1:2379 for etcd's usual client port)`, true},
		{[]string{"[::1]"}, true, `the port is missing ([::1]:2379 for etcd's usual client port)`, true},
		{[]string{"http://127.0.0.1:2379/v3"}, false, "want scheme://host:port, e.g.", true},
		{[]string{"http://127.0.0.1:2379"}, true, "is plaintext, but --cacert, --cert or --key ask for TLS: write https://", true},
		{[]string{"unix://etcd.sock"}, true, "write unixs://", true},
	} {
		got, err := etcddiag.Endpoints(tc.in, tc.tls)
		switch {
		case tc.isErr && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Endpoints(%q, tls %v) = %v, %v; want an error with %q", tc.in, tc.tls, got, err, tc.want)
		case !tc.isErr && (err != nil || strings.Join(got, ",") != tc.want):
			t.Errorf("Endpoints(%q, tls %v) = %v, %v; want %s", tc.in, tc.tls, got, err, tc.want)
		}
	}
}

// TestHint: etcd's NOSPACE refusal, as the client returns it or wrapped
// as text, gets the way out of the alarm; other errors get none.
func TestHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{rpctypes.ErrNoSpace, etcddiag.NoSpaceHint},
		{rpctypes.ErrGRPCNoSpace, etcddiag.NoSpaceHint},
		{fmt.Errorf("grant lease: %w", rpctypes.ErrNoSpace), etcddiag.NoSpaceHint},
		{errors.New("put x: etcdserver: mvcc: database space exceeded"), etcddiag.NoSpaceHint},
		{rpctypes.ErrPermissionDenied, ""},
		{nil, ""},
	} {
		if got := etcddiag.Hint(tc.err); got != tc.want {
			t.Errorf("Hint(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// frozenProxy returns the URL of a frozen proxy to the etcd at ep: it
// takes connections and carries nothing (tcpproxy.Proxy.Freeze).
func frozenProxy(t *testing.T, ep string) string {
	t.Helper()
	_, addr, _ := strings.Cut(ep, "://")
	p, err := tcpproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Freeze()
	return p.URL()
}

// TestWhyNamesAPeerPort: a member's peer URL given as a client endpoint
// answers GET /version as etcd, so it was "etcd did not answer" alone
// (the CLI review); it is named as the peer port, with the client port to
// give instead.
func TestWhyNamesAPeerPort(t *testing.T) {
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", port)
	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: t.TempDir(), PeerURL: peer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if got := etcddiag.Why(context.Background(), srv.Endpoints, nil); got != "" {
		t.Errorf("Why(the client URL) = %q, want \"\"", got)
	}
	got := etcddiag.Why(context.Background(), []string{peer}, nil)
	if want := peer + ": an etcd member's peer port answers there"; !strings.Contains(got, want) || !strings.Contains(got, "give the client URL") {
		t.Errorf("Why(the peer URL) = %q, want it to contain %q and the client URL to give", got, want)
	}
}

// expiredClient returns the TLS configuration of a client certificate of
// certs' CA, CN old-one, that expired a minute ago, and when.
func expiredClient(t *testing.T, certs *devetcd.TestCerts) (*tls.Config, time.Time) {
	t.Helper()
	expiredAt := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	old, err := certs.IssueClientUntil("old-one", expiredAt)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := old.TLSConfig(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	return expired, expiredAt
}

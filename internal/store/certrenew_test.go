package store

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/logbuf"
	"github.com/regiond/regiond/internal/poll"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// TestDialPresentsARenewedCertificate: a client of Dial that runs for
// long (regionctl heartbeat) presents the client certificate its files
// hold at each new connection: one renewed in place (as cert-manager or
// a cron job does) is used once the connection is made again, and the
// expiry of the certificate it started with does not cut it off.
func TestDialPresentsARenewedCertificate(t *testing.T) {
	t.Parallel()
	certs, px, short, expires := shortLivedBehindProxy(t, 3*time.Second)
	cli, err := Dial(context.Background(), DialConfig{Endpoints: []string{"https://" + px.Addr()}, CACert: certs.CAFile,
		Cert: short.CertFile, Key: short.KeyFile, ProbeKey: "/regiond/v1/routing/epoch"})
	if err != nil {
		t.Fatalf("dial with the short-lived certificate: %v", err)
	}
	defer cli.Close()

	renewed, err := certs.IssueClient("heartbeat")
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{renewed.CertFile: short.CertFile, renewed.KeyFile: short.KeyFile} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(expires) + time.Second) // the first certificate has expired
	px.Sever()
	if err := px.Restore(); err != nil {
		t.Fatal(err)
	}
	// A put on the connection the sever closed fails (Unavailable, not
	// retried by the client): the first ones may, until it connects again.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Put(pctx, "/regiond/v1/routing/health/p/i", "{}")
		pcancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("put after the certificate was renewed in place and the connection made again: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRunningHeartbeatNamesAnExpiredCertificate: a running heartbeat
// whose client certificate expired (no renewal written) cannot connect
// again once its connection drops; its retries' warnings say why, what
// each endpoint answers a dial of its own (etcddiag), as a start does.
// They said only "context deadline exceeded (check --endpoints, TLS flags
// and that the cluster has a leader)" (the auth review).
func TestRunningHeartbeatNamesAnExpiredCertificate(t *testing.T) {
	t.Parallel()
	logs, expires := heartbeatPastItsCertificate(t, 2*time.Second, time.Second)
	if _, ok := poll.Until(20*time.Second, func() bool {
		l := logs.String()
		return strings.Contains(l, "heartbeat: cannot write marker, retrying") && strings.Contains(l, "expired certificate") &&
			strings.Contains(l, "this client's certificate --cert, CN heartbeat, expired at "+expires.UTC().Truncate(time.Second).Format(time.RFC3339))
	}); !ok {
		t.Fatalf("no retry warning naming the expired certificate:\n%s", logs)
	}
}

// shortLivedBehindProxy starts an etcd with TLS behind a TCP proxy (a
// test cuts its connections with Sever) and issues a client certificate
// "heartbeat" that expires life from now, at expires.
func shortLivedBehindProxy(t *testing.T, life time.Duration) (*devetcd.TestCerts, *tcpproxy.Proxy, devetcd.ClientCert, time.Time) {
	t.Helper()
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	px, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	expires := time.Now().Add(life)
	short, err := certs.IssueClientUntil("heartbeat", expires)
	if err != nil {
		t.Fatal(err)
	}
	return certs, px, short, expires
}

// heartbeatPastItsCertificate runs a heartbeat (TTL 1 s) with a client
// certificate that expires life from now, behind a TCP proxy, waits for
// it to come up, then past the certificate's expiry, and severs the
// proxy's connections: the heartbeat must connect again, and cannot. It
// returns the heartbeat's log (text) and the certificate's expiry;
// requestTimeout is the store's.
func heartbeatPastItsCertificate(t *testing.T, life, requestTimeout time.Duration) (*logbuf.Buffer, time.Time) {
	t.Helper()
	certs, px, short, expires := shortLivedBehindProxy(t, life)
	dc := DialConfig{Endpoints: []string{"https://" + px.Addr()}, CACert: certs.CAFile, Cert: short.CertFile, Key: short.KeyFile}
	cli, err := Dial(context.Background(), dc)
	if err != nil {
		t.Fatalf("dial with the short-lived certificate: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	tc, err := dc.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	s := newStore(t, cli, Options{RequestTimeout: requestTimeout, Endpoints: dc.Endpoints, TLS: tc,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	up, stop := startHeartbeat(s, time.Second)
	t.Cleanup(func() { stop() })
	select {
	case <-up:
	case <-time.After(10 * time.Second):
		t.Fatalf("the heartbeat did not come up:\n%s", logs)
	}
	time.Sleep(time.Until(expires) + 300*time.Millisecond)
	px.Sever()
	if err := px.Restore(); err != nil {
		t.Fatal(err)
	}
	return logs, expires
}

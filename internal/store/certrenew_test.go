package store

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// TestDialPresentsARenewedCertificate: a client of Dial that runs for
// long (regionctl heartbeat) presents the client certificate its files
// hold at each new connection: one renewed in place (as cert-manager or
// a cron job does) is used once the connection is made again, and the
// expiry of the certificate it started with does not cut it off.
func TestDialPresentsARenewedCertificate(t *testing.T) {
	t.Parallel()
	certs := devetcd.NewTestCerts(t)
	srv := devetcd.NewTestTLS(t, certs)
	px, err := tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	expires := time.Now().Add(3 * time.Second)
	short, err := certs.IssueClientUntil("heartbeat", expires)
	if err != nil {
		t.Fatal(err)
	}
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

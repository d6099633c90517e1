package watch_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/watch"
)

// TestRefusalNamesWhatEtcdSawOfTheUser: with etcd's authentication on,
// the refusal in Status().Refused says what etcd saw of the client's
// user (the auth review: a certificate's user behind etcd's grpc-proxy,
// which etcd never saw, was told to check its role):
//   - a request with no user at all ("user name is empty") from a client
//     with no user: give it credentials;
//   - the same from a client presenting a certificate (UserFromCert):
//     etcd did not take the certificate (a grpc-proxy between them);
//   - a permission refusal to a certificate's common name: it must be an
//     etcd user with the role, or a proxy is between them.
func TestRefusalNamesWhatEtcdSawOfTheUser(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	devetcd.EnableTestAuth(t, srv, prefix)
	anon := devetcd.NewTestClient(t, srv)
	certs := devetcd.NewTestCerts(t)
	tlsSrv := devetcd.NewTestTLS(t, certs)
	devetcd.EnableTestAuth(t, tlsSrv, prefix)
	cc, err := certs.IssueClient("nobody")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := cc.TLSConfig(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := clientv3.New(clientv3.Config{Endpoints: tlsSrv.Endpoints, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer nobody.Close()

	for _, c := range []struct {
		name     string
		cli      *clientv3.Client
		user     string
		fromCert bool
		want     string
	}{
		{"no user", anon, "", false, "(user name is empty) to a client with no etcd user: etcd's authentication is on; give --user with $REGIOND_PASSWORD, or --cert and --key"},
		{"a certificate etcd did not take", anon, "regiond-agent-x", true,
			"(user name is empty) although this client presents a certificate whose common name is regiond-agent-x: etcd did not take it as the user, so etcd's grpc-proxy is between them"},
		{"a login's user, its token missing", anon, "alice", false,
			"(user name is empty) although this client logs in as alice: its watch stream carries no login token"},
		{"a certificate's CN that is no user", nobody, "nobody", true,
			"(permission denied) to etcd user nobody (the common name of this client's certificate): check that nobody is an etcd user whose role may read the prefix"},
	} {
		m, err := watch.New(watch.Config{Client: c.cli, Prefix: prefix, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
			NewBackoff: fastBackoff, RequestTimeout: time.Second, User: c.user, UserFromCert: c.fromCert})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); m.Run(ctx) }()
		stop := func() { cancel(); <-done }
		deadline := time.Now().Add(15 * time.Second)
		for !strings.Contains(m.Status().Refused, c.want) {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("%s: Status().Refused %q, want %q", c.name, m.Status().Refused, c.want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop()
	}
}

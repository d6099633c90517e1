package devetcd

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// NewTest starts an embedded etcd in t.TempDir() on free loopback ports and
// stops it when the test ends.
func NewTest(t testing.TB) *Server {
	t.Helper()
	srv, err := Start(context.Background(), Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// NewTestClient returns a client of srv closed when the test ends.
func NewTestClient(t testing.TB, srv *Server) *clientv3.Client {
	t.Helper()
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

package etcdproc

import (
	"testing"

	"github.com/regiond/regiond/internal/gobuild"
)

// etcdPackage is the main package of the etcd server, at the version
// go.mod requires.
const etcdPackage = "go.etcd.io/etcd/server/v3"

// Binary returns the path of an etcd server binary built from the etcd
// version in go.mod (see internal/gobuild); the same binary runs etcd's
// grpc-proxy (`etcd grpc-proxy start`).
func Binary(t testing.TB) string {
	t.Helper()
	return gobuild.Binary(t, etcdPackage)
}

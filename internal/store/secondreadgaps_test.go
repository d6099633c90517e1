package store

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
)

// TestNoPasswordUsersWithAuthOff proves that NoPasswordUsers says
// nothing, and no error, while etcd's authentication is off, even of a
// user made without a password (etcd cannot tell then): regionctl auth
// apply --passwords on a cluster still being set up goes on as before,
// for users without auth. With authentication on, the same user is
// named, and a user with a password is not.
func TestNoPasswordUsersWithAuthOff(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.UserAddWithOptions(ctx, "certonly", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserAdd(ctx, "withpw", "secret"); err != nil {
		t.Fatal(err)
	}
	st := New(cli, keyspace.Default(), Options{})
	if np, err := st.NoPasswordUsers(ctx, []string{"certonly", "withpw"}); err != nil || len(np) != 0 {
		t.Fatalf("auth off: NoPasswordUsers = %v, %v; want none, no error", np, err)
	}
	root := devetcd.EnableTestRootAuth(t, srv)
	rs := New(root, keyspace.Default(), Options{})
	if np, err := rs.NoPasswordUsers(ctx, []string{"certonly", "withpw"}); err != nil || len(np) != 1 || np[0] != "certonly" {
		t.Fatalf("auth on: NoPasswordUsers = %v, %v; want [certonly]", np, err)
	}
}

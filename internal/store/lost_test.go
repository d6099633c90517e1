package store

import (
	"context"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
)

// TestFleetWithAnOldRole: a user whose role reads agents/ but not nodes/
// (an operator's role from before node records) gets the fleet, with
// LostUnknown saying why lost nodes are not known, not an error.
func TestFleetWithAnOldRole(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	root := devetcd.EnableTestRootAuth(t, srv)
	ctx := context.Background()
	ks := keyspace.Default()
	if _, err := root.Put(ctx, ks.Node("gone"), `{"node":"gone","revision":1}`); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "old-operator"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "old-operator", ks.Routing(), clientv3.GetPrefixRangeEnd(ks.Routing()), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error {
			_, err := root.RoleGrantPermission(ctx, "old-operator", ks.AgentsPrefix(), clientv3.GetPrefixRangeEnd(ks.AgentsPrefix()), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "old-op", "pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "old-op", "old-operator"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := srv.ClientAs("old-op", "pw")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	f, err := New(cli, ks, Options{}).Fleet(ctx)
	if err != nil {
		t.Fatalf("fleet under an old role: %v", err)
	}
	if len(f.Lost) != 0 || !strings.Contains(f.LostUnknown, ks.NodesPrefix()) || !strings.Contains(f.LostUnknown, "regionctl auth apply") {
		t.Fatalf("fleet under an old role: lost %+v, lost_unknown %q", f.Lost, f.LostUnknown)
	}
	// root reads it.
	if f, err := New(root, ks, Options{}).Fleet(ctx); err != nil || len(f.Lost) != 1 || f.Lost[0].Node != "gone" || f.LostUnknown != "" {
		t.Fatalf("fleet as root: %+v %v", f, err)
	}
}

package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/etcddiag"
	"github.com/regiond/regiond/internal/keyspace"
)

// TestTokenDroppedKnowsAWatchRefusedOnItsStream: a watch created on a
// stream already open, after etcd dropped the client's token (its user's
// password changed), is refused with the token error only as text, the
// watch's cancel reason; the heartbeat (keepMarker) takes that for a
// dropped token too (etcddiag.InvalidToken), retried at debug level.
// TestHeartbeatPasswordChangedUnderIt (internal/cli) failed in CI on the
// WARN this logged while the check matched only the error values.
func TestTokenDroppedKnowsAWatchRefusedOnItsStream(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	root := devetcd.EnableTestRootAuth(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ks := keyspace.Default()
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "reader"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "reader", ks.Routing(), clientv3.GetPrefixRangeEnd(ks.Routing()), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "u", "pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "u", "reader"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := srv.ClientAs("u", "pw")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	wctx, wcancel := context.WithCancel(ctx) // one context: one stream for both watches
	defer wcancel()
	first := cli.Watch(wctx, ks.RoutingKey("pools/a"), clientv3.WithCreatedNotify())
	if resp := <-first; resp.Err() != nil || !resp.Created {
		t.Fatalf("first watch: created %v, err %v", resp.Created, resp.Err())
	}
	if _, err := root.UserChangePassword(ctx, "u", "pw2"); err != nil {
		t.Fatal(err)
	}
	var werr error
	for resp := range cli.Watch(wctx, ks.RoutingKey("pools/b"), clientv3.WithCreatedNotify()) {
		werr = resp.Err()
		break
	}
	if werr == nil {
		t.Fatal("a watch after the password change was created; want it refused for its token")
	}
	err = fmt.Errorf("watch %s: %w", ks.RoutingKey("pools/b"), werr)
	if errors.Is(err, rpctypes.ErrInvalidAuthToken) || errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
		t.Logf("etcd's client now maps the cancel reason to its error value: %v", err)
	}
	if !etcddiag.InvalidToken(err) {
		t.Fatalf("etcddiag.InvalidToken(%v) = false; want true: the heartbeat would log it at WARN", err)
	}
}

package relogin_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/relogin"
)

// TestLoginRenewedAfterARestore: etcd restored from a backup of its data
// (auth on) starts its raft log again below the index named in a client's
// token, got after the backup. etcd holds that client's requests until
// their deadline instead of refusing the token, so clientv3 never logs in
// again: without the interceptor every read times out (the agents behind
// a restore listed for good until restarted). With it, a read that timed
// out makes the client log in again, and the next reads are answered.
func TestLoginRenewedAfterARestore(t *testing.T) {
	ctx := context.Background()
	r := devetcd.NewTestRestorable(t)
	root := devetcd.EnableTestRootAuth(t, r.Server)
	root.Close()
	r.Backup()
	srv := r.Server
	// The raft log moves on past the backup's, then the clients log in.
	writer, err := srv.ClientAs("root", devetcd.TestRootPassword)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := writer.Put(ctx, "/moving-on", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	writer.Close()
	dial := func(opts ...grpc.DialOption) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, Username: "root", Password: devetcd.TestRootPassword,
			DialTimeout: 10 * time.Second, Logger: zap.NewNop(), DialOptions: opts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	plain := dial()
	renewing := dial(grpc.WithChainUnaryInterceptor(relogin.Interceptor(time.Second)))
	for _, cli := range []*clientv3.Client{plain, renewing} {
		if _, err := cli.Get(ctx, "/moving-on"); err != nil {
			t.Fatal(err)
		}
	}

	// Restore the backup in place: the same member, its raft log back
	// where it was.
	r.Restore()
	get := func(cli *clientv3.Client) error {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cli.Get(rctx, "/moving-on")
		return err
	}
	// Each client's first read after the restore is held to its
	// deadline (once the connection is back).
	for name, cli := range map[string]*clientv3.Client{"plain": plain, "renewing": renewing} {
		var err error
		for i := 0; i < 30; i++ {
			if err = get(cli); errors.Is(err, context.DeadlineExceeded) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s client: a read with the token of before the restore: %v; want it held to its deadline (etcd's simple tokens wait for their raft index)", name, err)
		}
	}
	for i := range 3 {
		if err := get(plain); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("plain client, read %d after the restore: %v; want it held still (clientv3 logs in again only when the token is refused)", i+2, err)
		}
	}
	// A login checks the password with bcrypt: seconds on a loaded
	// machine, in this race-instrumented process.
	var last error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if last = get(renewing); last == nil {
			return
		}
	}
	t.Fatalf("the renewing client's reads a minute after the restore still fail: %v", last)
}

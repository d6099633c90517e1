package store

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
)

// BenchmarkLoadPages measures Load of a routing prefix of 50,000 health
// keys (and the example's config) at two page sizes, against a real etcd:
// etcd counts the rest of the range at every page, so a read in small
// pages is quadratic in the keys (the scale review: 200k keys took 6.1 s
// in pages of 500, 1.1 s in pages of 5,000, which is DefaultPageSize).
//
//	go test ./internal/store -run '^$' -bench BenchmarkLoadPages -benchtime 5x
func BenchmarkLoadPages(b *testing.B) {
	srv := devetcd.NewTest(b)
	cli := devetcd.NewTestClient(b, srv)
	ks, err := keyspace.New("/bench-load")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const keys, perTxn = 50000, 1000
	for i := 0; i < keys; i += perTxn {
		ops := make([]clientv3.Op, 0, perTxn)
		for j := i; j < i+perTxn; j++ {
			ops = append(ops, clientv3.OpPut(ks.RoutingKey(routing.HealthKey(fmt.Sprintf("p%03d", j%500), fmt.Sprintf("i-%05d", j))), `{"addr":"10.0.0.1:443"}`))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	for _, page := range []int64{500, DefaultPageSize} {
		b.Run(fmt.Sprintf("page=%d", page), func(b *testing.B) {
			s := New(cli, ks, Options{PageSize: page})
			for b.Loop() {
				st, err := s.Load(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(st.KVs) != keys {
					b.Fatalf("loaded %d keys; want %d", len(st.KVs), keys)
				}
			}
		})
	}
}

package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEpochResetRefused: with the epoch key deleted or rewritten by hand
// to an epoch whose audit record exists (or a later one does), a write is
// refused without touching the audit trail, and the error names the newest
// audit epoch and the etcdctl command that restores the key; once it is
// run, writes go on.
func TestEpochResetRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		keep   int64 // AuditKeep
		writes int
		reset  func(ctx context.Context, cli *clientv3.Client, key string) error
	}{
		{"deleted", 0, 3, func(ctx context.Context, cli *clientv3.Client, key string) error {
			_, err := cli.Delete(ctx, key)
			return err
		}},
		{"rewritten lower", 0, 3, func(ctx context.Context, cli *clientv3.Client, key string) error {
			_, err := cli.Put(ctx, key, "1")
			return err
		}},
		{"deleted, oldest records pruned", 2, 4, func(ctx context.Context, cli *clientv3.Client, key string) error {
			_, err := cli.Delete(ctx, key)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cli, s, cfg := storeEnv(t, Options{AuditKeep: tc.keep})
			for i := range tc.writes {
				put(ctx, t, s, withPool(cfg, "eu-west", "n", fmt.Sprint(i)))
			}
			before := auditKVs(ctx, t, cli, s)
			epochKey := s.Keyspace().Epoch()
			if err := tc.reset(ctx, cli, epochKey); err != nil {
				t.Fatal(err)
			}
			_, err := s.Write(ctx, WriteRequest{Command: "after reset", Build: func(_ context.Context, cur *State) (*Plan, error) {
				return &Plan{Config: withPool(cur.Config, "eu-west", "n", "reset")}, nil
			}})
			var re *EpochResetError
			want := fmt.Sprintf("etcdctl put %s %d", epochKey, tc.writes)
			if !errors.As(err, &re) || re.Newest != int64(tc.writes) || !strings.Contains(err.Error(), want) {
				t.Fatalf("want an epoch reset naming epoch %d and %q, got %v", tc.writes, want, err)
			}
			if after := auditKVs(ctx, t, cli, s); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("audit trail changed by a refused write:\n%v\nwas\n%v", after, before)
			}
			if _, err := cli.Put(ctx, epochKey, fmt.Sprint(tc.writes)); err != nil { // what the error says to do
				t.Fatal(err)
			}
			if res := put(ctx, t, s, cfg); res.Epoch != int64(tc.writes)+1 {
				t.Fatalf("write after restoring the epoch: epoch %d", res.Epoch)
			}
		})
	}
}

// auditKVs returns every audit record as key, mod revision and value.
func auditKVs(ctx context.Context, t *testing.T, cli *clientv3.Client, s *Store) []string {
	t.Helper()
	resp, err := cli.Get(ctx, s.Keyspace().AuditPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = fmt.Sprintf("%s@%d=%s", kv.Key, kv.ModRevision, kv.Value)
	}
	return out
}

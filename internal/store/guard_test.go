package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
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

// TestHandEditMeanwhileIsNotOverwritten: a config key written around
// regionctl (etcdctl, a script) between a write's read and its commit is
// not overwritten unseen: the write is a conflict naming the key, nothing
// written, the hand edit kept (the writes review: it was overwritten,
// and the audit record named the value read as the one replaced); a
// retry builds on it, its record's "before" the hand edit. A key of no
// change of the write counts too (the whole config was validated as read).
func TestHandEditMeanwhileIsNotOverwritten(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	ks := s.Keyspace()
	hand := func(rel, value string) {
		t.Helper()
		if _, err := cli.Put(ctx, ks.RoutingKey(rel), value); err != nil {
			t.Fatal(err)
		}
	}
	epochNow := func() int64 {
		t.Helper()
		st, err := s.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Epoch
	}
	const handPool = `{"host":"hand.example.net:443","residency":"eu"}`
	for _, tc := range []struct{ rel, value string }{
		{"pools/eu-west", handPool},                                    // the key the write changes
		{"routes/MT", `{"targets":[{"pool":"eu-west","weight":100}]}`}, // a new key it does not
		{"policy/residency", ""},                                       // another kind, put again as it is
	} {
		if tc.value == "" {
			resp, err := cli.Get(ctx, ks.RoutingKey(tc.rel))
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("read %s: %v", tc.rel, err)
			}
			tc.value = string(resp.Kvs[0].Value)
		}
		epoch, builds := epochNow(), 0
		_, err := s.Write(ctx, WriteRequest{Command: "meanwhile", Build: func(_ context.Context, cur *State) (*Plan, error) {
			if builds++; builds == 1 {
				hand(tc.rel, tc.value)
			}
			return &Plan{Config: withPool(cur.Config, "eu-west", "n", tc.rel)}, nil
		}})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Key != tc.rel || !ce.Outside || !strings.Contains(err.Error(), tc.rel+" was written outside regionctl") {
			t.Fatalf("%s written between the read and the commit: want a conflict naming it, got %v", tc.rel, err)
		}
		if got := epochNow(); got != epoch {
			t.Fatalf("%s: the refused write moved the epoch %d → %d", tc.rel, epoch, got)
		}
		if resp, err := cli.Get(ctx, ks.RoutingKey(tc.rel)); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != tc.value {
			t.Fatalf("%s: the hand edit was not kept: %v %v", tc.rel, resp, err)
		}
	}

	// With --retry: the retry builds on the hand edit, and says so.
	builds := 0
	hand("pools/eu-west", `{"host":"edge-ams-1.example.net:443","residency":"eu","attrs":{"n":"x"}}`)
	res, err := s.Write(ctx, WriteRequest{Command: "retried", Retry: 1, Build: func(_ context.Context, cur *State) (*Plan, error) {
		if builds++; builds == 1 {
			hand("pools/eu-west", handPool)
		}
		return &Plan{Config: withPool(cur.Config, "eu-west", "n", "retried")}, nil
	}})
	if err != nil || res.Attempts != 2 {
		t.Fatalf("a retried write over a hand edit: %v (attempts %v)", err, res)
	}
	rec, err := s.AuditRecord(ctx, res.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Changes) != 1 || rec.Changes[0].Key != "pools/eu-west" || !strings.Contains(string(rec.Changes[0].Before), "hand.example.net") ||
		!strings.Contains(string(rec.Changes[0].After), "hand.example.net") {
		t.Fatalf("the retried write's audit record: %+v, want pools/eu-west from the hand edit's value", rec.Changes)
	}
}

// TestLastEpochIsNotWrittenPast: a write over an epoch key at MaxEpoch (a
// hand edit) is refused, nothing written: its epoch would be one every
// agent refuses as malformed (the diff review).
func TestLastEpochIsNotWrittenPast(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	if _, err := cli.Put(ctx, s.Keyspace().Epoch(), fmt.Sprint(int64(routing.MaxEpoch))); err != nil {
		t.Fatal(err)
	}
	_, err := s.Write(ctx, WriteRequest{Command: "past", Build: func(_ context.Context, cur *State) (*Plan, error) {
		return &Plan{Config: withPool(cur.Config, "eu-west", "n", "1")}, nil
	}})
	if err == nil || !strings.Contains(err.Error(), "the largest epoch") {
		t.Fatalf("a write over epoch %d: %v, want it refused", int64(routing.MaxEpoch), err)
	}
	if resp, err := cli.Get(ctx, s.Keyspace().Epoch()); err != nil || string(resp.Kvs[0].Value) != fmt.Sprint(int64(routing.MaxEpoch)) {
		t.Fatalf("epoch key after the refused write: %v %v", resp, err)
	}
}

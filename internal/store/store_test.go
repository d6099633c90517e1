package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
)

var prefixSeq atomic.Int64

// newStore returns a store under a fresh prefix of srv.
func newStore(t *testing.T, cli *clientv3.Client, opts Options) *Store {
	t.Helper()
	ks, err := keyspace.New(fmt.Sprintf("/st/%d", prefixSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return New(cli, ks, opts)
}

// storeEnv starts an embedded etcd and returns a store on a fresh prefix,
// its client, and the example fleet (not yet written).
func storeEnv(t *testing.T, opts Options) (context.Context, *clientv3.Client, *Store, *routing.Config) {
	t.Helper()
	cli := devetcd.NewTestClient(t, devetcd.NewTest(t))
	return context.Background(), cli, newStore(t, cli, opts), exampleConfig(t)
}

func exampleConfig(t testing.TB) *routing.Config {
	t.Helper()
	data, err := os.ReadFile("../../examples/routing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routing.ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// put writes a whole config as one write.
func put(ctx context.Context, t *testing.T, s *Store, cfg *routing.Config, opts ...func(*WriteRequest)) *Result {
	t.Helper()
	req := WriteRequest{Command: "test", Build: func(context.Context, *State) (*Plan, error) {
		return &Plan{Config: cfg, Prune: true}, nil
	}}
	for _, o := range opts {
		o(&req)
	}
	res, err := s.Write(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// withPool returns a copy of cfg with one pool attribute set.
func withPool(cfg *routing.Config, id, attr, val string) *routing.Config {
	c := cfg.Clone()
	p := c.Pools[id]
	p.Attrs = map[string]string{attr: val}
	c.Pools[id] = p
	return c
}

func TestPagedLoad(t *testing.T) {
	t.Parallel()
	ctx, _, s, cfg := storeEnv(t, Options{PageSize: 7})
	res := put(ctx, t, s, cfg)
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := cfg.Values()
	got, _ := st.Config.Values()
	if len(got) != len(want) || len(st.KVs) != len(want)+1 || st.Epoch != 1 || st.Revision < res.Revision {
		t.Fatalf("paged load: %d config values (want %d), %d keys, epoch %d, revision %d", len(got), len(want), len(st.KVs), st.Epoch, st.Revision)
	}
	for k, v := range want {
		if string(got[k]) != string(v) {
			t.Fatalf("%s: %s, want %s", k, got[k], v)
		}
	}
	// A later write does not show in a load at the earlier revision.
	put(ctx, t, s, withPool(cfg, "eu-west", "x", "1"))
	old, err := s.LoadAt(ctx, st.Revision)
	if err != nil || old.Epoch != 1 || old.Config.Pools["eu-west"].Attrs["x"] != "" {
		t.Fatalf("LoadAt(%d): epoch %d, err %v", st.Revision, old.Epoch, err)
	}
}

func TestAuditKeepsNewest(t *testing.T) {
	t.Parallel()
	ctx, _, s, cfg := storeEnv(t, Options{AuditKeep: 5})
	for i := range 12 {
		put(ctx, t, s, withPool(cfg, "eu-west", "n", fmt.Sprint(i)))
	}
	recs, err := s.History(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var epochs []int64
	for _, r := range recs {
		epochs = append(epochs, r.Epoch)
	}
	if fmt.Sprint(epochs) != "[12 11 10 9 8]" {
		t.Fatalf("audit epochs kept: %v, want the newest 5", epochs)
	}
}

// TestMissingAuditRecordSaysWhy: a record older than the newest AuditKeep
// is no longer kept, and says so; one deleted by hand between older and
// newer ones kept is named missing (deleted around regionctl), not "only
// the newest N are kept", wrapping ErrNotFound without its "store: "
// text; the search names the hole, and so do the gaps of a list; a
// rebuild through it (its revision compacted) stops naming it.
func TestMissingAuditRecordSaysWhy(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{AuditKeep: 5})
	var res *Result
	for i := range 8 {
		res = put(ctx, t, s, withPool(cfg, "eu-west", "n", fmt.Sprint(i))) // epochs 1 to 8; 4 to 8 kept
	}
	_, err := s.AuditRecord(ctx, 3)
	if !errors.Is(err, ErrNotFound) || err.Error() != "the audit record of epoch 3 is no longer kept: only the newest 5 are (the records kept are of epochs 4 to 8)" {
		t.Fatalf("AuditRecord(3), older than the newest 5: %v", err)
	}
	if gaps, err := s.AuditGaps(ctx, 4, 8); err != nil || len(gaps) != 0 {
		t.Fatalf("AuditGaps(4, 8) of a whole trail: %v, %v", gaps, err)
	}
	for _, n := range []int64{5, 6} {
		if _, err := cli.Delete(ctx, s.Keyspace().Audit(n)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.AuditRecord(ctx, 5)
	if !errors.Is(err, ErrNotFound) || !strings.HasPrefix(err.Error(), "the audit record of epoch 5 is missing, though older and newer ones are kept (the records kept are of epochs 4 to 8): deleted around regionctl (by hand? the operator role can write ") ||
		strings.Contains(err.Error(), "store:") {
		t.Fatalf("AuditRecord(5), deleted by hand: %v", err)
	}
	if gaps, err := s.AuditGaps(ctx, 4, 8); err != nil || fmt.Sprint(gaps) != "[5 to 6]" {
		t.Fatalf("AuditGaps(4, 8) with 5 and 6 deleted: %v, %v", gaps, err)
	}
	found, err := s.SearchHistory(ctx, func(AuditEntry) bool { return true }, 0, 0)
	if err != nil || fmt.Sprint(found.Missing) != "[5 to 6]" || len(found.Records) != 3 {
		t.Fatalf("SearchHistory with 5 and 6 deleted: %d records, missing %v, %v", len(found.Records), found.Missing, err)
	}
	if _, err := cli.Compact(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.ConfigAt(ctx, 4, cur)
	if err == nil || !strings.Contains(err.Error(), "the audit record of epoch 6 is missing, though older and newer ones are kept") || strings.Contains(err.Error(), "only the newest") {
		t.Fatalf("ConfigAt(4) through a deleted record, compacted: %v", err)
	}
}

func TestConflictAndRetry(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	other := New(cli, s.Keyspace(), Options{})
	var builds, others atomic.Int32
	req := WriteRequest{Command: "mine", Build: func(ctx context.Context, cur *State) (*Plan, error) {
		if builds.Add(1) == 1 {
			put(ctx, t, other, withPool(cfg, "eu-north", "other", fmt.Sprint(others.Add(1))))
		}
		c := cur.Config.Clone()
		p := c.Pools["eu-west"]
		p.Attrs = map[string]string{"mine": "1"}
		c.Pools["eu-west"] = p
		return &Plan{Config: c}, nil
	}}
	_, err := s.Write(ctx, req)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Epoch != 1 || ce.Now != 2 || err.Error() != "config changed concurrently (epoch 1 → 2); re-run (it builds on the new state: regionctl history 2 shows what changed)" {
		t.Fatalf("want a conflict 1 → 2, got %v", err)
	}
	builds.Store(0)
	req.Retry = 1
	res, err := s.Write(ctx, req)
	if err != nil || res.Attempts != 2 || res.Epoch != 4 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	st, _ := s.Load(ctx)
	if st.Config.Pools["eu-north"].Attrs["other"] != "2" || st.Config.Pools["eu-west"].Attrs["mine"] != "1" {
		t.Fatal("an update was lost")
	}
}

func TestRefusedWritesNothing(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	bad := cfg.Clone()
	delete(bad.Routes, routing.DefaultRoute)
	bad.Routes["PL"] = routing.Route{Targets: []routing.Target{{Pool: "us-east", Weight: 100}}}
	_, err := s.Write(ctx, WriteRequest{Build: func(context.Context, *State) (*Plan, error) { return &Plan{Config: bad}, nil }})
	var re *RefusedError
	if !errors.As(err, &re) || len(re.Errs) < 2 {
		t.Fatalf("want every problem refused, got %v", err)
	}
	resp, _ := cli.Get(ctx, s.Keyspace().Root()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if resp.Count != 0 {
		t.Fatalf("%d keys written by a refused write", resp.Count)
	}
}

// TestInvalidStoredValues: a value written around regionctl that does not
// decode is kept by plain writes, reported, and removed by a pruning one.
func TestInvalidStoredValues(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	bad := s.Keyspace().RoutingKey("routes/SK")
	if _, err := cli.Put(ctx, bad, `{"targets": "eu-central"}`); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load(ctx)
	if err != nil || len(st.Skipped) != 1 || st.Skipped[0].Key != "routes/SK" || fmt.Sprint(st.InvalidConfigKeys()) != "[routes/SK]" {
		t.Fatalf("skipped: %+v %v", st.Skipped, err)
	}
	res, err := s.Write(ctx, WriteRequest{Build: func(_ context.Context, cur *State) (*Plan, error) {
		return &Plan{Config: withPool(cur.Config, "eu-west", "a", "1")}, nil
	}})
	if err != nil || len(res.Changes) != 1 {
		t.Fatalf("plain write: %+v %v", res, err)
	}
	res = put(ctx, t, s, cfg)
	if len(res.Changes) != 2 || res.Changes[1].Key != "routes/SK" || res.Changes[1].Op != "delete" || string(res.Changes[1].Before) != `{"targets":"eu-central"}` {
		t.Fatalf("pruning write: %+v", res.Changes)
	}
	// An epoch key that is not a number stops every write.
	if _, err := cli.Put(ctx, s.Keyspace().Epoch(), "forty-two"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, WriteRequest{Build: func(_ context.Context, cur *State) (*Plan, error) {
		return &Plan{Config: withPool(cur.Config, "eu-west", "a", "2")}, nil
	}}); err == nil || !strings.Contains(err.Error(), `the epoch key `+s.Keyspace().Epoch()+` holds "forty-two", not an epoch`) ||
		!regexp.MustCompile(`The audit trail goes up to epoch ([1-9][0-9]*) \(`+regexp.QuoteMeta(s.Keyspace().AuditPrefix())+`0*([1-9][0-9]*)\)\. A retry cannot fix this: restore the epoch key, then re-run: etcdctl put `+
			regexp.QuoteMeta(s.Keyspace().Epoch())+` ([1-9][0-9]*)$`).MatchString(err.Error()) {
		t.Fatalf("write over a bad epoch, want the fix naming the newest audit epoch: %v", err)
	}
}

// TestConfigAtAfterCompaction: once the revision of an epoch is compacted
// away, its config is rebuilt from the audit trail.
func TestConfigAtAfterCompaction(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	two := withPool(cfg, "eu-west", "v", "2")
	two.Routes["SK"] = routing.Route{Targets: []routing.Target{{Pool: "eu-west", Weight: 100}}, Affinity: routing.AffinitySticky}
	put(ctx, t, s, two)
	three := withPool(two, "eu-west", "v", "3")
	delete(three.Routes, "CZ")
	delete(three.Routes, "SK")
	res := put(ctx, t, s, three)
	if _, err := cli.Compact(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for epoch, want := range map[int64]*routing.Config{1: cfg, 2: two, 3: three} {
		got, notes, err := s.ConfigAt(ctx, epoch, cur)
		if err != nil {
			t.Fatalf("ConfigAt(%d): %v", epoch, err)
		}
		if rebuilt := epoch < 3; len(notes) != map[bool]int{true: 1, false: 0}[rebuilt] ||
			rebuilt && !strings.Contains(notes[0], "is compacted: its config was rebuilt from the audit trail") {
			t.Fatalf("ConfigAt(%d) notes %q: want the rebuild said, and nothing else, when it was rebuilt", epoch, notes)
		}
		gy, _ := got.YAML()
		wy, _ := want.YAML()
		if string(gy) != string(wy) {
			t.Fatalf("ConfigAt(%d) after compaction:\n%s\nwant\n%s", epoch, gy, wy)
		}
	}
}

// TestRebuiltConfigNamesHandEdits: a config rebuilt from the audit trail
// (its epoch's revision compacted) names the keys whose value at that
// epoch the records cannot vouch for: one written by hand between the
// epoch and the next record of it (the rebuild restores the hand edit:
// the writes review found it silent), and one written by hand after the
// last commit (kept as it is); keys written by regionctl alone are not
// named.
func TestRebuiltConfigNamesHandEdits(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg) // epoch 1
	hand := func(rel, value string) {
		t.Helper()
		if _, err := cli.Put(ctx, s.Keyspace().RoutingKey(rel), value); err != nil {
			t.Fatal(err)
		}
	}
	hand("pools/eu-central", `{"host":"hand.example.net:443","residency":"eu"}`)
	put(ctx, t, s, withPool(cfg, "eu-west", "v", "2"), func(r *WriteRequest) {
		r.Build = func(_ context.Context, cur *State) (*Plan, error) {
			return &Plan{Config: withPool(withPool(cur.Config, "eu-west", "v", "2"), "eu-central", "v", "2")}, nil
		}
	}) // epoch 2, over the hand edit
	res := put(ctx, t, s, withPool(cfg, "eu-west", "v", "3"), func(r *WriteRequest) {
		r.Build = func(_ context.Context, cur *State) (*Plan, error) {
			return &Plan{Config: withPool(cur.Config, "eu-west", "v", "3")}, nil
		}
	}) // epoch 3
	if _, err := cli.Compact(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	hand("routes/SK", `{"targets":[{"pool":"eu-west","weight":100}]}`)
	cur, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, notes, err := s.ConfigAt(ctx, 1, cur)
	if err != nil {
		t.Fatal(err)
	}
	if got.Pools["eu-central"].Host != "hand.example.net:443" {
		t.Fatalf("the rebuild of epoch 1 restored eu-central as %+v; it can only restore what epoch 2's record found", got.Pools["eu-central"])
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{
		"is compacted: its config was rebuilt from the audit trail",
		`pools/eu-central: restored as epoch 2's record found it ({"host":"hand.example.net:443"`,
		"not as epoch 1 wrote it",
		"routes/SK: written around regionctl after epoch 3's commit and kept as it is now",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes of the rebuild of epoch 1 lack %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "pools/eu-west") || len(notes) != 3 {
		t.Errorf("notes name more than the hand edits:\n%s", joined)
	}
}

// TestRebuiltConfigNamesARefusedHandEdit: the rebuild of the current
// epoch once its revision is compacted (what the refused-policy message
// offered first: the diff review) restores a key written by hand since
// as the epoch's record wrote it, saying so; a key written by hand that
// no record writes cannot be known, and a value that does not decode is
// named as written by hand, with history, not "fix it first, unchanged
// since".
func TestRebuiltConfigNamesARefusedHandEdit(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	res := put(ctx, t, s, cfg)
	if _, err := cli.Compact(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	hand := func(rel, value string) {
		t.Helper()
		if _, err := cli.Put(ctx, s.Keyspace().RoutingKey(rel), value); err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	hand(routing.PolicyKey, `{"classes":{"eu":["pl"]}}`)
	cur, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, notes, err := s.ConfigAt(ctx, 1, cur)
	if err != nil {
		t.Fatalf("the rebuild of epoch 1 over a refused hand edit of the policy, which epoch 1's record wrote: %v", err)
	}
	gy, _ := got.YAML()
	wy, _ := cfg.YAML()
	if string(gy) != string(wy) {
		t.Fatalf("the rebuild of epoch 1 over a hand edit of the policy:\n%s\nwant epoch 1's\n%s", gy, wy)
	}
	if joined := strings.Join(notes, "\n"); !strings.Contains(joined, routing.PolicyKey+": written around regionctl after epoch 1's commit (at revision ") ||
		!strings.Contains(joined, "restored as epoch 1 wrote it") {
		t.Fatalf("notes of the rebuild of epoch 1 over a hand edit of the policy:\n%s\nwant the key named, restored from epoch 1's record", joined)
	}

	hand("routes/SK", `{"targets":"eu-west"}`)
	if cur, err = s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.ConfigAt(ctx, 1, cur)
	if err == nil || !strings.Contains(err.Error(), "written by hand after epoch 1's commit") || !strings.Contains(err.Error(), "history --touching routes/SK") ||
		strings.Contains(err.Error(), "unchanged since") {
		t.Fatalf("the rebuild of epoch 1 over a refused hand edit no record writes: %v; want it named as written by hand, with history", err)
	}
}

// TestRebuiltConfigRestoresAHandEditBetweenCommits: a key written by hand
// after the epoch a rebuild restores, and before a later commit (its mod
// revision past the epoch's, not past the last commit's), that no later
// record undoes, is restored as the newest record at or before the epoch
// wrote it, and named; the review found such a rollback keeping the hand
// edit with no word but the generic one.
func TestRebuiltConfigRestoresAHandEditBetweenCommits(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg) // epoch 1
	two := withPool(cfg, "eu-west", "v", "2")
	put(ctx, t, s, two) // epoch 2 writes eu-west
	three := withPool(two, "eu-central", "v", "3")
	put(ctx, t, s, three) // epoch 3, the one rolled back to, does not
	key := s.Keyspace().RoutingKey("pools/eu-west")
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	var p map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		t.Fatal(err)
	}
	p["attrs"] = map[string]string{"v": "2", "hand": "edit"}
	edited, _ := json.Marshal(p)
	if _, err := cli.Put(ctx, key, string(edited)); err != nil { // after epoch 3
		t.Fatal(err)
	}
	put(ctx, t, s, withPool(three, "eu-north", "v", "4"), func(r *WriteRequest) {
		r.Build = func(_ context.Context, cur *State) (*Plan, error) {
			return &Plan{Config: withPool(cur.Config, "eu-north", "v", "4")}, nil
		}
	}) // epoch 4, over the hand edit, not touching eu-west
	res := put(ctx, t, s, nil, func(r *WriteRequest) {
		r.Build = func(_ context.Context, cur *State) (*Plan, error) {
			c := cur.Config.Clone()
			delete(c.Routes, "CZ")
			return &Plan{Config: c}, nil
		}
	}) // epoch 5
	if _, err := cli.Compact(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := cur.Config.Pools["eu-west"].Attrs["hand"]; got != "edit" || len(cur.WrittenAround()) != 0 {
		t.Fatalf("set-up: eu-west's hand attr %q, written after the last commit %q; want the hand edit kept, before epoch 4's commit", got, cur.WrittenAround())
	}
	got, notes, err := s.ConfigAt(ctx, 3, cur)
	if err != nil {
		t.Fatal(err)
	}
	gy, _ := got.YAML()
	wy, _ := three.YAML()
	if string(gy) != string(wy) {
		t.Fatalf("the rebuild of epoch 3:\n%s\nwant epoch 3's\n%s", gy, wy)
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{
		"is compacted: its config was rebuilt from the audit trail",
		"pools/eu-west: written around regionctl after epoch 3's commit (at revision ",
		"no later record undoes it: restored as epoch 2 wrote it (",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes of the rebuild of epoch 3 lack %q:\n%s", want, joined)
		}
	}
	if len(notes) != 2 {
		t.Errorf("notes name more than the hand edit:\n%s", joined)
	}
}

// TestHeartbeatRevokesOnStop: the marker lives while Heartbeat runs and is
// gone as soon as it returns.
func TestHeartbeatRevokesOnStop(t *testing.T) {
	t.Parallel()
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	s := newStore(t, cli, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan int64, 4)
	done := make(chan error, 1)
	go func() {
		done <- s.Heartbeat(ctx, HeartbeatConfig{Pool: "eu-central", Instance: "i-1", Addr: "10.0.0.1:443", TTL: 2 * time.Second,
			OnUp: func(l int64, _ time.Duration) { up <- l }})
	}()
	<-up
	key := s.Keyspace().RoutingKey(routing.HealthKey("eu-central", "i-1"))
	if resp, err := cli.Get(context.Background(), key); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("marker missing while running: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(context.Background(), key); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("marker still there after stop: %v", err)
	}
}

// TestConfigAtNamesAHandEditItCannotUndo: rebuilt from the audit trail
// (its revision compacted), an epoch's config can hold a value written by
// hand after it, the only value the trail has for that key then: the
// error says the revision was compacted, names the key and the record its
// value came from, and what to do (it said only "rebuilt config does not
// decode").
func TestConfigAtNamesAHandEditItCannotUndo(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	put(ctx, t, s, cfg)
	two := withPool(cfg, "eu-west", "v", "2")
	put(ctx, t, s, two)
	if _, ok := two.Routes["CZ"]; !ok {
		t.Fatal("the test config has no route CZ")
	}
	if _, err := cli.Put(ctx, s.Keyspace().RoutingKey("routes/CZ"), `{"targets":[{"pool":"eu-west","weight":50}]}`); err != nil {
		t.Fatal(err)
	}
	three := withPool(two, "eu-west", "v", "3") // CZ as it was: the hand edit undone
	res := put(ctx, t, s, three)
	if res.Epoch != 3 {
		t.Fatalf("epoch %d, want 3", res.Epoch)
	}
	if _, err := cli.Compact(ctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.ConfigAt(ctx, 1, cur)
	for _, want := range []string{"epoch 1's revision ", " is compacted, so its config was rebuilt from the audit trail",
		"routes/CZ", "(its value before epoch 3, as that record holds it: ", "written around regionctl (by hand) after epoch 1, so no record holds the value it had at epoch 1 and rollback cannot restore it; apply the config wanted with routes/CZ set"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ConfigAt(1) over a hand edit: %v, want %q", err, want)
		}
	}
	if _, _, err := s.ConfigAt(ctx, 3, cur); err != nil { // its own revision: nothing rebuilt
		t.Fatalf("ConfigAt(3): %v", err)
	}
}

// TestConflictWithTheEpochGoingBack: one etcd's epoch never goes back, so
// a conflict that finds an older epoch than the read's says the endpoints
// answer from different clusters or histories, not "re-run".
func TestConflictWithTheEpochGoingBack(t *testing.T) {
	msg := (&ConflictError{Epoch: 16, Now: 15}).Error()
	if !strings.Contains(msg, "the epoch went back (16 → 15)") || !strings.Contains(msg, "different etcd clusters or histories") ||
		strings.Contains(msg, "; re-run") {
		t.Fatalf("conflict 16 → 15: %q", msg)
	}
}

package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/regiond/regiond/routing"
)

// TestResidencyShrinkRefusedByTheStore: a plan whose policy takes DE out
// of class eu (the operator drill: DE then routed to us-east) is refused
// by the write path itself, before its Txn, naming DE, its class and the
// routes, also with Force, and also for a dry run and Check (diff); with
// AllowResidencyChange it is written and says what it did. A plan that
// leaves that policy as it is afterwards is not refused. With no policy
// stored, the built-in one is the stored one.
func TestResidencyShrinkRefusedByTheStore(t *testing.T) {
	t.Parallel()
	ctx, cli, s, cfg := storeEnv(t, Options{})
	shrunk := cfg.Clone()
	eu := shrunk.Policy.Residency.Classes["eu"]
	shrunk.Policy.Residency.Classes["eu"] = slices.DeleteFunc(slices.Clone(eu), func(cc string) bool { return cc == "DE" })
	de := shrunk.Routes["DE"]
	de.Targets = []routing.Target{{Pool: "us-east", Weight: 100}}
	shrunk.Routes["DE"] = de
	const want = "policy/residency: this write takes DE out of class eu (into no class): routes/DE (us-east), routes/_default (us-east) may then send its viewers to pools of another residency than eu"

	write := func(c *routing.Config, dry, force, allow bool) (*Result, error) {
		return s.Write(ctx, WriteRequest{Command: "test", DryRun: dry, Build: func(context.Context, *State) (*Plan, error) {
			return &Plan{Config: c, Force: force, AllowResidencyChange: allow}, nil
		}})
	}
	// No policy stored: the built-in one counts (its class eu holds DE).
	for _, tc := range []struct{ dry, force bool }{{false, false}, {true, false}, {false, true}} {
		_, err := write(shrunk, tc.dry, tc.force, false)
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(re.Error(), want) || !strings.Contains(re.Error(), "--allow-residency-change") {
			t.Fatalf("dry %v force %v: %v; want refused with %q", tc.dry, tc.force, err, want)
		}
	}
	resp, err := cli.Get(ctx, s.Keyspace().Epoch())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("a refused write wrote the epoch: %v %v", resp, err)
	}
	put(ctx, t, s, cfg)
	st, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Check(st, &Plan{Config: shrunk}); err != nil || !strings.Contains(c.Problems.Error(), want) {
		t.Fatalf("Check: %+v %v; want the refusal", c, err)
	}
	res, err := write(shrunk, false, false, true)
	if err != nil || !strings.HasPrefix(res.ResidencyChanged, want[len("policy/residency: "):]) {
		t.Fatalf("allowed: %+v %v; want written, the change in ResidencyChanged", res, err)
	}
	// The policy as stored now: a plan that keeps it is not refused,
	// though DE stays in no class.
	res, err = s.Write(ctx, WriteRequest{Command: "test", Build: func(_ context.Context, cur *State) (*Plan, error) {
		return &Plan{Config: withPool(cur.Config, "eu-west", "n", "1")}, nil
	}})
	if err != nil || res.ResidencyChanged != "" {
		t.Fatalf("a write that keeps the policy: %+v %v", res, err)
	}
}

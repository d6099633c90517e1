package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// agentSkips compiles the test's stored state as an agent does and
// returns the keys it refuses (skips).
func (e *tenv) agentSkips() []string {
	e.t.Helper()
	cur, err := store.New(testClient, e.ks, store.Options{}).Load(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	now := time.Now()
	tab := routing.Compile(cur.Revision, cur.KVs, nil, routing.CompileOptions{Now: now, Start: now.Add(-routing.DefaultHealthGrace)})
	var keys []string
	for _, s := range tab.Skipped() {
		keys = append(keys, s.Key)
	}
	return keys
}

// poolOfSize returns a pool value without a status whose attr x is filled
// with fill up to n bytes in all.
func poolOfSize(n int, fill string) string {
	const head, tail = `{"host":"edge-tmp-1.example.net","residency":"eu","attrs":{"x":"`, `"}}`
	return head + strings.Repeat(fill, (n-len(head)-len(tail))/len(fill)) + tail
}

// TestValueSizeMeasuredAsStored: regionctl judges a stored value's size by
// its bytes in etcd, as the agents do, not by its own encoding of it. A
// hand-put pool whose attr is 12,000 "&" (1 byte each stored, 6 as
// regionctl's encoding escapes them) and one of exactly 64 KiB without a
// status (to which regionctl's encoding adds "status":"active") are served
// by the agent, pass validate, leave every other write free and an
// exported config applied back a no-op; a write
// that changes one is judged by the bytes it would put, and refused saying
// so. A stored value one byte over the limit is refused by both.
func TestValueSizeMeasuredAsStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	amp := poolOfSize(12072, "&")
	full := poolOfSize(routing.MaxValueSize, "x")
	if len(amp) != 12072 || len(full) != routing.MaxValueSize {
		t.Fatalf("values of %d and %d bytes, want 12072 and %d", len(amp), len(full), routing.MaxValueSize)
	}
	e.putHandEdit("pools/tamp", amp)
	e.putHandEdit("pools/full", full)
	if skips := e.agentSkips(); len(skips) != 0 {
		t.Fatalf("the agent skips %q, want none", skips)
	}
	e.must(ExitOK, "validate")
	e.must(ExitOK, "pool", "set", "eu-west", "--status", "draining", "--reason", "other pool")
	if e.get(e.ks.RoutingKey("pools/tamp")) != amp || e.get(e.ks.RoutingKey("pools/full")) != full {
		t.Fatal("the write of another pool changed the hand-put values")
	}
	// An exported config applied back changes nothing: the hand-put
	// values are not rewritten, so not judged by regionctl's encoding.
	path := writeFile(t, "fleet.yaml", e.must(ExitOK, "export").stdout)
	rev, n := e.fingerprint()
	for _, args := range [][]string{{"diff", "-f", path}, {"apply", "-f", path, "--reason", "same"}} {
		if r := e.must(ExitOK, args...); !strings.Contains(r.stdout, "no changes") {
			t.Errorf("regionctl %s: want no changes, got %s", strings.Join(args, " "), r)
		}
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}
	// Changing the 64 KiB pool puts 64 KiB and its status: too big, for
	// regionctl as for the agent that would read it.
	// The diff judges the stored side by its bytes too: valid.
	r := e.must(ExitRefused, "pool", "set", "full", "--status", "draining", "--reason", "too big")
	if want := "REFUSED pools/full: value is 65556 bytes, larger than the 65536-byte limit\n"; !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "stored value was invalid") {
		t.Errorf("pool set full: want %q and no word of an invalid stored value, got %s", want, r)
	}
	// regionctl writes "&" as \u0026: the change would put 72,000 bytes
	// of attr, and the refusal says why the value grew.
	r = e.must(ExitRefused, "pool", "set", "tamp", "--status", "draining", "--reason", "too big")
	if want := `REFUSED pools/tamp: value is 72117 bytes (as regionctl writes it: each "&", "<" and ">" as \u0026, \u003c and \u003e, 6 bytes), larger than the 65536-byte limit`; !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "stored value was invalid") {
		t.Errorf("pool set tamp: want %q and no word of an invalid stored value, got %s", want, r)
	}
	// One byte over the limit as stored: the agent skips it, validate
	// refuses it.
	e.putHandEdit("pools/full", poolOfSize(routing.MaxValueSize+1, "x"))
	if skips := e.agentSkips(); !slices.Equal(skips, []string{"pools/full"}) {
		t.Errorf("the agent skips %q, want [pools/full]", skips)
	}
	r = e.must(ExitRefused, "validate")
	if want := "pools/full: value is 65537 bytes, larger than the 65536-byte limit"; !strings.Contains(r.stderr, want) {
		t.Errorf("validate: want %q, got %s", want, r)
	}
}

package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/devetcd"
)

// poolsYAML is a config of n eu pools, each with an attr of pad bytes,
// routed from _default.
func poolsYAML(n, pad int) string {
	var b strings.Builder
	b.WriteString("pools:\n")
	for i := range n {
		fmt.Fprintf(&b, "  p%03d: {host: p%03d.example.net, residency: eu, status: active, attrs: {pad: %s}}\n", i, i, strings.Repeat("x", pad))
	}
	b.WriteString("routes:\n  _default: {targets: [{pool: p000, weight: 100}]}\n")
	return b.String()
}

// TestCommitOverEtcdLimits: a commit larger than etcd's limits is refused
// as such, naming the limit and what to do, not as "no answer" with a
// re-run called safe; its dry run warns first. Against a cluster at
// etcd's default --max-txn-ops (128), at its default --max-request-bytes
// (1.5 MiB), and over the client's own 2 MiB.
func TestCommitOverEtcdLimits(t *testing.T) {
	t.Parallel()
	srv, err := devetcd.Start(context.Background(), devetcd.Config{Dir: t.TempDir(), MaxTxnOps: 128})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	e := newEnv(t)
	e.endpoints = srv.Endpoints
	at := func(args ...string) []string { return args }

	many := writeFile(t, "many.yaml", poolsYAML(200, 1))
	dry := e.must(ExitOK, at("apply", "-f", many, "--dry-run")...)
	if !strings.Contains(dry.stderr, "warning: this commit would hold 203 operations in one transaction, over etcd's default --max-txn-ops (128)") {
		t.Fatalf("dry run of 200 pools: %s", dry)
	}
	r := e.must(ExitRefused, at("apply", "-f", many)...)
	for _, w := range []string{"refused, nothing written", "too many operations", "the commit holds 203 operations", "--max-txn-ops", "apply the config in parts"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("apply of 200 pools at max-txn-ops 128: stderr does not say %q:\n%s", w, r)
		}
	}
	if strings.Contains(r.stderr, "no answer") {
		t.Errorf("a refusal called no answer:\n%s", r)
	}

	for _, tc := range []struct {
		pools int
		says  string
	}{
		{14, "request is too large"},                   // ~1.7 MB (each value twice: the key and its audit record): etcd's 1.5 MiB
		{40, "trying to send message larger than max"}, // ~4.8 MB: the client's 2 MiB
	} {
		f := writeFile(t, fmt.Sprintf("big%d.yaml", tc.pools), poolsYAML(tc.pools, 60000))
		dry := e.must(ExitOK, at("apply", "-f", f, "--dry-run")...)
		if !strings.Contains(dry.stderr, "bytes in one request, over etcd's default --max-request-bytes (1572864)") {
			t.Errorf("dry run of %d pools of 60 kB: %s", tc.pools, dry)
		}
		r := e.must(ExitRefused, at("apply", "-f", f)...)
		for _, w := range []string{"refused, nothing written", tc.says, "--max-request-bytes", "apply the config in parts"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("apply of %d pools of 60 kB: stderr does not say %q:\n%s", tc.pools, w, r)
			}
		}
		if strings.Contains(r.stderr, "no answer") || strings.Contains(r.stderr, "re-run is safe") {
			t.Errorf("a refusal for size called no answer:\n%s", r)
		}
	}
}

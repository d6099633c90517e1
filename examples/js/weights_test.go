package js_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// TestRandomPicksFollowTheWeights: the JS reader's picks that are not
// sticky (a viewer with no key on a sticky route, any viewer on a random
// route) follow the targets' weights, as Go's do (the JS review: a
// uniform pick passed every other test). 20,000 decisions each; the
// shares are checked to within 2 points (seven standard deviations).
func TestRandomPicksFollowTheWeights(t *testing.T) {
	kvs := []routing.KV{
		{Key: "pools/a", Value: []byte(`{"host":"a.example.net:443","residency":"eu"}`), ModRevision: 2},
		{Key: "pools/b", Value: []byte(`{"host":"b.example.net:443","residency":"eu"}`), ModRevision: 2},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"a","weight":100}]}`), ModRevision: 2},
		{Key: "routes/PL", Value: []byte(`{"targets":[{"pool":"a","weight":80},{"pool":"b","weight":20}]}`), ModRevision: 2},
		{Key: "routes/DE", Value: []byte(`{"targets":[{"pool":"a","weight":30},{"pool":"b","weight":70}],"affinity":"random"}`), ModRevision: 2},
	}
	now := time.Now()
	tab := routing.Compile(2, kvs, nil, routing.CompileOptions{Now: now, Start: now.Add(-time.Hour)})
	vs, err := snapindex.KVValues(tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]json.RawMessage{}
	for _, v := range vs {
		if v.Key == "PL" || v.Key == "DE" {
			values[v.Key] = v.Value
		}
	}
	in, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	script := `
import { readFileSync } from 'node:fs';
import { decideFromValue } from './regiond.mjs';
const values = JSON.parse(readFileSync(0, 'utf8'));
const out = {};
for (const [cc, key] of [['PL', ''], ['DE', 'viewer-1']]) {
  const n = {};
  for (let i = 0; i < 20000; i++) {
    const d = decideFromValue(values[cc], key);
    n[d.pool] = (n[d.pool] || 0) + 1;
  }
  out[cc] = n;
}
console.log(JSON.stringify(out));
`
	cmd := exec.Command(node(t), "--input-type=module", "-e", script)
	cmd.Stdin = bytes.NewReader(in)
	outb, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, outb)
	}
	var got map[string]map[string]int
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("node output %s: %v", outb, err)
	}
	for cc, wantB := range map[string]float64{"PL": 0.20, "DE": 0.70} {
		share := float64(got[cc]["b"]) / 20000
		if math.Abs(share-wantB) > 0.02 {
			t.Errorf("%s: pool b got %.3f of the picks (%v), want %.2f (its weight)", cc, share, got[cc], wantB)
		}
	}
}

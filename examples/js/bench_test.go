package js_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
)

// BenchmarkJSReader runs bench/bench.mjs once on the example fleet's index
// and KV export and reports its medians (ns per decision, and the ratio to
// each figure's same-run baseline). b.N is not used: node times itself.
//
//	go test -run XXX -bench JSReader ./examples/js
func BenchmarkJSReader(b *testing.B) {
	n := node(b)
	now := time.Now()
	tab := fleettest.Scenarios(b, now)[0].Table
	idx, kv := indexFile(b, tab, now, now), kvFile(b, tab, now, now)
	out, err := exec.Command(n, filepath.Join("bench", "bench.mjs"), idx, kv).CombinedOutput()
	if err != nil {
		b.Fatalf("bench.mjs: %v: %s", err, out)
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("bench.mjs output %q: %v", out, err)
	}
	for name, raw := range res {
		var m struct {
			Median   float64 `json:"median_ns"`
			Baseline string  `json:"baseline"`
			BaseNs   float64 `json:"baseline_ns"`
			Ratio    float64 `json:"ratio"`
		}
		if json.Unmarshal(raw, &m) != nil || m.Median == 0 {
			continue
		}
		unit := strings.ReplaceAll(name, "_", "-")
		b.ReportMetric(m.Median, unit+"-ns")
		b.ReportMetric(m.Ratio, unit+"-x-"+strings.ReplaceAll(m.Baseline, "_", "-"))
		b.Logf("%s: median %.0f ns, baseline %s %.0f ns, ×%.2f", name, m.Median, m.Baseline, m.BaseNs, m.Ratio)
	}
}

package routing

import (
	"testing"
	"time"
)

// TestExplainAgreesWithResolveAfterAClockStepBack: with the clock stepped
// back before the table was built, across the end of a health grace
// window, Explain's chosen route and pool are Resolve's (the residency
// review: Explain walked at the earlier instant, the pool still in its
// grace window, and marked route DE chosen while the decision in the same
// answer was pool b via route g).
func TestExplainAgreesWithResolveAfterAClockStepBack(t *testing.T) {
	kvs := []KV{
		{Key: "pools/a", Value: []byte(`{"host":"a","residency":"eu","health_check":true}`)},
		{Key: "pools/b", Value: []byte(`{"host":"b","residency":"eu"}`)},
		{Key: "routes/_default", Value: []byte(`{"targets":[{"pool":"a","weight":100}]}`)},
		{Key: "routes/DE", Value: []byte(`{"targets":[{"pool":"a","weight":100}],"fallback":["g"]}`)},
		{Key: "routes/g", Value: []byte(`{"targets":[{"pool":"b","weight":100}]}`)},
	}
	tbl := Compile(1, kvs, nil, CompileOptions{Now: t0.Add(10 * time.Second), Start: t0, Grace: 5 * time.Second})
	for _, now := range []time.Time{t0.Add(2 * time.Second), t0.Add(10 * time.Second), t0.Add(time.Minute)} {
		d, err := tbl.Resolve("DE", "k", now)
		if err != nil || d.Pool != "b" || d.Route != "g" {
			t.Fatalf("at +%v: resolve %+v %v, want b via g (a's grace window ended before the build)", now.Sub(t0), d, err)
		}
		ex := tbl.Explain("DE", "k", now)
		last := ex.Routes[len(ex.Routes)-1]
		if ex.Decision == nil || ex.Decision.Pool != d.Pool || last.Route != d.Route || !last.Chosen {
			t.Fatalf("at +%v: explain chose route %s (chosen %v), decision %+v; resolve %s via %s", now.Sub(t0), last.Route, last.Chosen, ex.Decision, d.Pool, d.Route)
		}
		for _, r := range ex.Routes[:len(ex.Routes)-1] {
			if r.Chosen {
				t.Fatalf("at +%v: explain marks route %s chosen besides %s", now.Sub(t0), r.Route, last.Route)
			}
		}
	}
}

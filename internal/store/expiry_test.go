package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// TestExtendOfAnExpiredBoostIsChecked: boost extend of a boost past its
// expires_at (its lease renewed by an election), whose pool has been
// drained since, would make JP resolve to nothing again. The plan's
// boosts get their new expires_at before the checks run, so the extend
// is refused as a fresh boost would be; the checks saw the old, past
// expires_at and let it through before.
func TestExtendOfAnExpiredBoostIsChecked(t *testing.T) {
	cfg, err := routing.ParseConfig([]byte(`
pools:
  tokyo: {host: tokyo.example.net, residency: apac}
  extra: {host: extra.example.net, residency: apac, status: draining}
routes:
  _default: {targets: [{pool: extra, weight: 100}]}
  JP: {targets: [{pool: tokyo, weight: 100}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	ov := routing.Override{Route: "JP", Targets: []routing.Target{{Pool: "extra", Weight: 100}}, ExpiresAt: past}
	for name, st := range map[string]*State{
		"extend of the expired boost": {Config: cfg, Overrides: map[string]LiveOverride{"jp": {Override: ov, Lease: 1, ModRevision: 5}}},
		"a fresh boost":               {Config: cfg, Overrides: map[string]LiveOverride{}},
	} {
		plan := &Plan{PutOverrides: []OverridePut{{ID: "jp", Override: ov, TTL: time.Hour}}}
		_, err := (&Store{}).prepare(st, plan)
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "JP would have no eligible pool") {
			t.Errorf("%s: %v; want it refused, JP left with no eligible pool", name, err)
		}
		if plan.PutOverrides[0].Override.ExpiresAt != past {
			t.Errorf("%s: prepare changed the caller's plan", name)
		}
	}
}

package didyoumean

import (
	"slices"
	"strings"
	"testing"
)

// Near finds the names within two edits, their case aside, in order;
// never two short codes for each other (every pair of country codes is
// within two edits), nor anything for a name past 128 bytes.
func TestNear(t *testing.T) {
	pools := []string{"eu-central", "eu-west", "us-west", "kr-music"}
	for _, tc := range []struct {
		name  string
		names []string
		want  []string
	}{
		{"EU-Westt", pools, []string{"eu-west"}},
		{"es-west", pools, []string{"eu-west", "us-west"}},
		{"nope", pools, nil},
		{"pl", []string{"PL", "DE", "poland"}, nil},
		{"pl", []string{"plx"}, []string{"plx"}},
		{strings.Repeat("a", 129), []string{strings.Repeat("a", 129)}, nil},
	} {
		if got := Near(tc.name, tc.names); !slices.Equal(got, tc.want) {
			t.Errorf("Near(%.20q, %v) = %v, want %v", tc.name, tc.names, got, tc.want)
		}
	}
}

// NearValue finds what Near does, and the values sharing the first four
// bytes of a word further off: a value typo of a fixed set.
func TestNearValue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   []string
	}{
		{"drained", []string{"active", "draining", "down"}, []string{"draining"}},
		{"activ", []string{"active", "draining", "down"}, []string{"active"}},
		{"DRAINED", []string{"active", "draining", "down"}, []string{"draining"}},
		{"paused", []string{"active", "draining", "down"}, nil},
		{"yml", []string{"table", "json", "yaml"}, []string{"yaml"}},
		{"pool", []string{"pools", "routes", "boosts", "health", "policy", "skipped"}, []string{"pools"}},
		{"dra", []string{"draining"}, nil},
		{strings.Repeat("a", 129), []string{strings.Repeat("a", 129)}, nil},
	} {
		if got := NearValue(tc.name, tc.values); !slices.Equal(got, tc.want) {
			t.Errorf("NearValue(%.20q, %v) = %v, want %v", tc.name, tc.values, got, tc.want)
		}
	}
}

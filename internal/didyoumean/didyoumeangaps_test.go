package didyoumean

import (
	"slices"
	"strings"
	"testing"
)

// TestDistance protects the edit distance itself, which cli (verbs,
// flags), flagerr and routing's field hints compare with their own
// thresholds: insertions, deletions and substitutions each cost one, a
// transposition two, equal strings none.
func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"abc", "abc", 0},
		{"abc", "abd", 1},
		{"a", "b", 1},
		{"kitten", "sitting", 3},
		{"eu-central", "eu-centarl", 2},
		{"residency", "residncy", 1},
		{"flaw", "lawn", 2},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestNearEdges protects Near's bounds: two edits (a transposition) are
// near, the names' own case aside (a name stored in capitals), and a
// name of exactly 128 bytes is still looked up.
func TestNearEdges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
		want  []string
	}{
		{"eu-centarl", []string{"eu-central", "us-west"}, []string{"eu-central"}},
		{"eu-west", []string{"EU-West", "us-east"}, []string{"EU-West"}},
		{strings.Repeat("a", 128), []string{strings.Repeat("a", 127)}, []string{strings.Repeat("a", 127)}},
	} {
		if got := Near(tc.name, tc.names); !slices.Equal(got, tc.want) {
			t.Errorf("Near(%.20q, %v) = %v, want %v", tc.name, tc.names, got, tc.want)
		}
	}
}

// TestNearValueEdges protects NearValue's stem of exactly four bytes
// ("routing" shares "rout" with "routes", three edits off), its two-edit
// reach, its short-code rule (two names of two bytes or less are never
// near), and values shorter than the stem (no panic).
func TestNearValueEdges(t *testing.T) {
	sections := []string{"pools", "routes", "boosts", "health", "policy", "skipped"}
	for _, tc := range []struct {
		name   string
		values []string
		want   []string
	}{
		{"routing", sections, []string{"routes"}},
		{"josn", []string{"table", "json", "yaml"}, []string{"json"}},
		{"eu", []string{"us", "eu-central"}, nil},
		{"table", []string{"csv", "tsv"}, nil},
	} {
		if got := NearValue(tc.name, tc.values); !slices.Equal(got, tc.want) {
			t.Errorf("NearValue(%q, %v) = %v, want %v", tc.name, tc.values, got, tc.want)
		}
	}
}

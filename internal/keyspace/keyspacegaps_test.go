package keyspace

import (
	"strings"
	"testing"
)

// TestKeysUnderAnotherRoot protects every key of the layout
// (docs/keys-and-values.md) under a --prefix other than the default, and
// the node record's key, which TestKeys leaves out: New keeps the root it
// is given, and no key falls back to DefaultRoot or to another key's
// prefix (agents/ for nodes/ would make a node record its status key).
func TestKeysUnderAnotherRoot(t *testing.T) {
	s, err := New("/acme/regiond")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, got, want string }{
		{"Root", s.Root(), "/acme/regiond"},
		{"Routing", s.Routing(), "/acme/regiond/routing/"},
		{"RoutingKey", s.RoutingKey("pools/eu-central"), "/acme/regiond/routing/pools/eu-central"},
		{"Epoch", s.Epoch(), "/acme/regiond/routing/epoch"},
		{"AuditPrefix", s.AuditPrefix(), "/acme/regiond/audit/"},
		{"Audit", s.Audit(7), "/acme/regiond/audit/00000000000000000007"},
		{"AgentsPrefix", s.AgentsPrefix(), "/acme/regiond/agents/"},
		{"Agent", s.Agent("edge-fra-1"), "/acme/regiond/agents/edge-fra-1"},
		{"NodesPrefix", s.NodesPrefix(), "/acme/regiond/nodes/"},
		{"Node", s.Node("edge-fra-1"), "/acme/regiond/nodes/edge-fra-1"},
		{"Default().Node", Default().Node("n1"), "/regiond/v1/nodes/n1"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.what, tc.got, tc.want)
		}
	}
	if rel, ok := s.Rel("/acme/regiond/routing/routes/PL"); !ok || rel != "routes/PL" {
		t.Errorf("Rel = %q, %v", rel, ok)
	}
	if _, ok := s.Rel("/regiond/v1/routing/routes/PL"); ok {
		t.Error("Rel accepted a key of the default root under /acme/regiond")
	}
}

// TestParseAuditRefusesWhatIsNoEpoch protects ParseAudit's parse of the
// 20 digits (a key of the right length that is not a number is no audit
// key) and its range: epochs go up to 2^53-1, past 32 bits.
func TestParseAuditRefusesWhatIsNoEpoch(t *testing.T) {
	s := Default()
	if _, err := s.ParseAudit("/regiond/v1/audit/0000000000000000004x"); err == nil || !strings.Contains(err.Error(), "is not an audit key") {
		t.Errorf("ParseAudit(a non-number) error = %v, want it refused", err)
	}
	const maxEpoch = 1<<53 - 1
	if n, err := s.ParseAudit(s.Audit(maxEpoch)); err != nil || n != maxEpoch {
		t.Errorf("ParseAudit(Audit(2^53-1)) = %d, %v", n, err)
	}
}

// TestValidNode protects the --node check (agent.Config.Validate): a
// node name is one key segment, so an empty name, a '/' and white space
// of each kind are refused.
func TestValidNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"edge-fra-1", true},
		{"edge.fra_1", true},
		{"", false},
		{"edge/fra", false},
		{"edge fra", false},
		{"edge\tfra", false},
		{"edge-fra\n", false},
		{"edge-fra\r", false},
		{"edge\vfra", false},
		{"edge\ffra", false},
		{"edge\u00a0fra", false},
		{"edge\u0085fra", false},
		{"edge-fra-ü", true},
	} {
		if got := ValidNode(tc.name); got != tc.ok {
			t.Errorf("ValidNode(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

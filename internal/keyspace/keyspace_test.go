package keyspace

import (
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name, root string
		ok         bool
		says       string // in the error
	}{
		{"default", "/regiond/v1", true, ""},
		{"short", "/r", true, ""},
		{"no leading slash", "regiond/v1", false, "must start with '/'"},
		{"trailing slash", "/regiond/v1/", false, "not end with one"},
		{"double slash", "/regiond//v1", false, "has an empty segment ('//')"},
		{"trailing space", "/regiond/v1 ", false, "has white space"},
		{"a space inside", "/regiond /v1", false, "has white space"},
		{"empty", "", false, "must start with '/'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.root)
			if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New(%q) error = %v, want ok=%v saying %q", tc.root, err, tc.ok, tc.says)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	s := Default()
	if got := s.RoutingKey("pools/eu-central"); got != "/regiond/v1/routing/pools/eu-central" {
		t.Errorf("RoutingKey = %q", got)
	}
	if rel, ok := s.Rel("/regiond/v1/routing/routes/PL"); !ok || rel != "routes/PL" {
		t.Errorf("Rel = %q, %v", rel, ok)
	}
	if _, ok := s.Rel("/regiond/v1/agents/n1"); ok {
		t.Error("Rel accepted a key outside the routing prefix")
	}
	if got := s.Audit(42); got != "/regiond/v1/audit/00000000000000000042" {
		t.Errorf("Audit = %q", got)
	}
	if n, err := s.ParseAudit(s.Audit(42)); err != nil || n != 42 {
		t.Errorf("ParseAudit = %d, %v", n, err)
	}
	if _, err := s.ParseAudit("/regiond/v1/audit/42"); err == nil {
		t.Error("ParseAudit accepted an unpadded key")
	}
	if got := s.Epoch(); got != "/regiond/v1/routing/epoch" {
		t.Errorf("Epoch = %q", got)
	}
	if got := s.Agent("n1"); got != "/regiond/v1/agents/n1" {
		t.Errorf("Agent = %q", got)
	}
}

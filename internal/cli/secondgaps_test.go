package cli

import (
	"strings"
	"testing"
)

// TestValidateStoredRefusalsNotServedAlike guards the other half of
// validate's stored-config rule (docs/regionctl.md, validate): only a
// refused health key or a key outside the grammar is warned of; a
// refused route, boost, residency policy or epoch is served from its last
// good value (not alike by every agent) and stays a problem: REFUSED on
// stderr, exit 1, nothing on stdout in a table, and with -o json valid
// false with each named in problems, the source the stored config.
func TestValidateStoredRefusalsNotServedAlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.putHandEdit("health/eu-central/i1", `{"addr":42}`) // served alike: a warning
	e.putHandEdit("routes/DE", `{"targets":"nope"}`)
	e.putHandEdit("overrides/b1", `{"pool":42}`)
	e.putHandEdit("policy/residency", `{"classes":"nope"}`)
	e.putHandEdit("epoch", `abc`)
	r := e.must(ExitRefused, "validate")
	if r.stdout != "" {
		t.Errorf("validate (table) of a refused stored config printed %q on stdout", r.stdout)
	}
	for _, want := range []string{"REFUSED routes/DE", "REFUSED overrides/b1", "REFUSED policy/residency", "REFUSED the epoch key holds"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("validate: stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "REFUSED health/") || !strings.Contains(r.stderr, "warning: health/eu-central/i1") {
		t.Errorf("validate: the health key is not a warning alone:\n%s", r.stderr)
	}
	var got struct {
		Source   string   `json:"source"`
		Valid    bool     `json:"valid"`
		Problems []string `json:"problems"`
	}
	mustJSON(t, e.must(ExitRefused, "validate", "-o", "json").stdout, &got)
	all := strings.Join(got.Problems, "\n")
	if got.Valid || !strings.HasPrefix(got.Source, "stored config at epoch ") || strings.Contains(all, "health/") {
		t.Errorf("validate -o json of a refused stored config: %+v", got)
	}
	for _, want := range []string{"routes/DE", "overrides/b1", "policy/residency", "epoch key"} {
		if !strings.Contains(all, want) {
			t.Errorf("validate -o json: problems %q lack %q", got.Problems, want)
		}
	}
}

// TestValidateYAMLOfARefusal guards -o yaml of validate's refusals, as
// -o json's (the output formats carry the same fields): a file that does
// not decode and a file the whole-config rules refuse both say valid
// false and their problems on stdout, exit 1.
func TestValidateYAMLOfARefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, body := range map[string]string{
		"unparsable.yaml": "pools:\n  eu-west: {host: w.example.net, residency: eu, status: bogus}\n",
		"invalid.yaml":    "pools:\n  eu-west: {host: w.example.net, residency: eu, status: active}\nroutes:\n  _default: {targets: [{pool: nosuch, weight: 100}]}\n",
	} {
		r := e.must(ExitRefused, "validate", "-f", writeFile(t, name, body), "-o", "yaml")
		if !strings.Contains(r.stdout, "valid: false\n") || !strings.Contains(r.stdout, "problems:\n- ") {
			t.Errorf("validate -o yaml of %s: stdout %q, want valid false and the problems", name, r.stdout)
		}
	}
}

package cli

import (
	"strings"
	"testing"
)

// TestValidateWarnsOfKeysServedAlike: validate of the stored config
// counts a refused pool or route as a problem (exit 1), but a health key
// whose value does not decode (a live instance whatever its value) and a
// key outside the grammar (in no table) are served alike by every agent:
// no config's problem, and not the operator's role's to delete. They are
// warned of on stderr and the exit code stays 0.
func TestValidateWarnsOfKeysServedAlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.putHandEdit("health/eu-central/i1", `{"addr":42}`)
	e.putHandEdit("pools/Bad_Id", `{"host":"x.example.net","residency":"eu","status":"active"}`)
	r := e.must(ExitOK, "validate")
	if !strings.HasPrefix(r.stdout, "valid: stored config at epoch ") {
		t.Errorf("validate with keys served alike: stdout %q, want valid", r.stdout)
	}
	for _, want := range []string{"regionctl: warning: health/eu-central/i1: addr:", "a health key: a live instance whatever its value",
		"pools/Bad_Id", "a key outside the grammar: in no table", "served alike by every agent"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("validate: stderr %q lacks %q", r.stderr, want)
		}
	}

	e.putHandEdit("pools/eu-central", `{"host":"x.example.net","residency":"eu","status":"bogus"}`)
	r = e.must(ExitRefused, "validate")
	if !strings.Contains(r.stderr, "REFUSED pools/eu-central: status") || strings.Contains(r.stderr, "REFUSED health/") {
		t.Errorf("validate with a refused pool: stderr %q, want the pool refused and the health key not", r.stderr)
	}
}

// TestValidateJSONOfARefusal: validate -o json of an invalid config says
// valid false and its problems on stdout, as diff -o json does, besides
// the REFUSED lines on stderr and exit 1: for a file the whole-config rules
// refuse (with its counts) and for one whose values do not decode.
func TestValidateJSONOfARefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	invalid := writeFile(t, "invalid.yaml", "pools:\n  eu-west: {host: w.example.net, residency: eu, status: active}\nroutes:\n  _default: {targets: [{pool: nosuch, weight: 100}]}\n")
	var got struct {
		Source   string   `json:"source"`
		Pools    int      `json:"pools"`
		Valid    bool     `json:"valid"`
		Problems []string `json:"problems"`
	}
	r := e.must(ExitRefused, "validate", "-f", invalid, "-o", "json")
	mustJSON(t, r.stdout, &got)
	if got.Valid || got.Source != invalid || got.Pools != 1 || len(got.Problems) == 0 || !strings.Contains(strings.Join(got.Problems, "\n"), "nosuch") {
		t.Errorf("validate -o json of refused values: %+v", got)
	}
	got.Problems = nil
	unparsable := writeFile(t, "unparsable.yaml", "pools:\n  eu-west: {host: w.example.net, residency: eu, status: bogus}\n")
	mustJSON(t, e.must(ExitRefused, "validate", "-f", unparsable, "-o", "json").stdout, &got)
	if got.Valid || got.Source != unparsable || len(got.Problems) == 0 {
		t.Errorf("validate -o json of a value that does not decode: %+v", got)
	}
	if r := e.must(ExitRefused, "validate", "-f", invalid); r.stdout != "" {
		t.Errorf("validate (table) of refused values printed %q on stdout", r.stdout)
	}
}

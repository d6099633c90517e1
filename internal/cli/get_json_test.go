package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestGetShowsEmptySectionsAndWarnsOfAnEmptyPrefix: get -o json has every
// section asked for, {} or [] when empty, and no other; a prefix with
// nothing stored says so on stderr (a wrong --prefix looks like an empty
// cluster otherwise), while one with a config does not.
func TestGetShowsEmptySectionsAndWarnsOfAnEmptyPrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.must(ExitOK, "get", "-o", "json")
	if !strings.Contains(r.stderr, "nothing is stored under "+e.prefix+"/routing/ (epoch 0): is --prefix right") {
		t.Errorf("get on an empty prefix: stderr %q, want it to ask whether --prefix is right", r.stderr)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"pools": "{}", "routes": "{}", "boosts": "{}", "health": "{}", "skipped": "[]", "policy_default": "true"} {
		if got := string(all[k]); got != want {
			t.Errorf("get -o json on an empty prefix: %s = %q, want %s", k, got, want)
		}
	}
	// The policy shown is the built-in default, and says so.
	if r := e.must(ExitOK, "get", "policy"); !strings.Contains(r.stdout, "(the built-in default: no policy key is stored") {
		t.Errorf("get policy with no policy key: %s; want it marked as the built-in default", r)
	}
	e.seed() // examples/routing.yaml stores a policy
	if r := e.must(ExitOK, "get", "policy"); strings.Contains(r.stdout, "built-in default") {
		t.Errorf("get policy with a policy key: %s; want no built-in default mark", r)
	}
	if r := e.must(ExitOK, "get", "policy", "-o", "json"); strings.Contains(r.stdout, "policy_default") {
		t.Errorf("get policy -o json with a policy key: %s; want no policy_default", r)
	}
	r = e.must(ExitOK, "get", "health", "-o", "json")
	var one map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &one); err != nil {
		t.Fatal(err)
	}
	if string(one["health"]) != "{}" || one["pools"] != nil || one["routes"] != nil || r.stderr != "" {
		t.Errorf("get health -o json: %s (stderr %q), want health {} alone and no warning", r.stdout, r.stderr)
	}
	// resolve of a name that is not a country code says how it was taken.
	r = e.must(ExitOK, "resolve", "Poland")
	if !strings.Contains(r.stderr, `"Poland" is not an assigned ISO 3166-1 alpha-2 country code: resolved as _unknown`) {
		t.Errorf("resolve Poland: stderr %q, want it to say it was resolved as _unknown", r.stderr)
	}
	if r = e.must(ExitOK, "resolve", "pl"); r.stderr != "" {
		t.Errorf("resolve pl: stderr %q, want none", r.stderr)
	}
	// The audit command quotes what a shell needs quoted.
	e.must(ExitOK, "pool", "drain", "eu-north", "--reason", "disk swap; rack 4")
	if rec := e.audit(2); rec.Command != "pool drain eu-north --reason 'disk swap; rack 4'" {
		t.Errorf("audit command %q, want the reason quoted", rec.Command)
	}
}

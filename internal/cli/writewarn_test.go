package cli

import (
	"strings"
	"testing"
)

// TestWritesWarnOfTheConfigTheyMake: pool and route writes, and their dry
// runs, warn on stderr of what validate warns of in the config they
// make, the exit code unchanged (route set --fallback na-general of DE
// said nothing; diff -f did).
func TestWritesWarnOfTheConfigTheyMake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	const want = "regionctl: warning: the config after this write: routes/DE: fallback na-general can never serve DE (class eu): none of its pools (us-east, us-west) is of class eu"
	for _, args := range [][]string{
		{"route", "set", "DE", "--fallback", "na-general", "--reason", "x", "--dry-run"},
		{"route", "set", "DE", "--fallback", "na-general", "--reason", "x"},
		{"pool", "set", "eu-north", "--attr", "max_rps=301", "--dry-run"},
		{"pool", "drain", "eu-north"},
	} {
		if r := e.must(ExitOK, args...); strings.Count(r.stderr, want) != 1 {
			t.Errorf("regionctl %s: %s; want once %q", strings.Join(args, " "), r, want)
		}
	}
	// Refused, it warns too (the warnings of the config it proposed).
	if r := e.must(ExitRefused, "route", "set", "PL", "--target", "us-east=100"); !strings.Contains(r.stderr, want) {
		t.Errorf("a refused route set: %s; want the warning", r)
	}
	// apply and rollback warn of the config they make their own way
	// (naming the file, the epoch), once, not twice; a boost changes no
	// config, and warns of none.
	file := writeFile(t, "de.yaml", "routes:\n  DE: {targets: [{pool: eu-central, weight: 100}], fallback: [na-general], attrs: {lang: de}}\n")
	if r := e.must(ExitOK, "apply", "-f", file, "--dry-run"); strings.Count(r.stderr, "routes/DE: fallback na-general can never serve DE") != 1 ||
		!strings.Contains(r.stderr, file+" with the stored config: routes/DE: fallback na-general") {
		t.Errorf("apply --dry-run of a file: %s; want the warning once, naming the file", r)
	}
	if r := e.must(ExitOK, "rollback", "2", "--dry-run"); strings.Count(r.stderr, "routes/DE: fallback na-general can never serve DE") != 1 {
		t.Errorf("rollback --dry-run to epoch 2 (DE falling back on na-general): %s; want the warning once", r)
	}
	if r := e.must(ExitOK, "boost", "FR", "--target", "eu-west=100", "--ttl", "1m", "--dry-run"); strings.Contains(r.stderr, "can never serve") {
		t.Errorf("boost: %s; want no config warning", r)
	}
	// A write that puts the config back warns of nothing.
	if r := e.must(ExitOK, "route", "set", "DE", "--fallback", "eu-general"); len(otherWarnings(r.stderr)) > 0 {
		t.Errorf("route set DE --fallback eu-general: %s; want no warning", r)
	}
}

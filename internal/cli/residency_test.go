package cli

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/regiond/regiond/routing"
)

// exampleWithout returns the example fleet with DE taken out of class eu
// and, when deUS, DE's route sent to us-east: the operator drill's
// gdpr2.yaml.
func exampleWithout(t *testing.T, deUS bool) string {
	t.Helper()
	data, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if !strings.Contains(s, "FR, DE, GR") || !strings.Contains(s, "DE: {targets: [{pool: eu-central, weight: 100}]") {
		t.Fatal("the example fleet changed: DE's class entry or route is not where the test looks")
	}
	s = strings.Replace(s, "FR, DE, GR", "FR, GR", 1)
	if deUS {
		s = strings.Replace(s, "DE: {targets: [{pool: eu-central, weight: 100}]", "DE: {targets: [{pool: us-east, weight: 100}]", 1)
	}
	return s
}

// deRefusal is what the refusal of the drill's write says: DE, its class,
// the routes that may then send DE's viewers to pools of another
// residency (its own route and _default, both to us-east), and the flag.
var deRefusal = []string{
	"REFUSED policy/residency: this write takes DE out of class eu (into no class): routes/DE (us-east), routes/_default (us-east) may then send its viewers to pools of another residency than eu",
	"; put DE back in class eu, or, if its viewers are meant to leave class eu, re-run with --allow-residency-change (--force does not allow it)",
}

// TestResidencyShrinkIsRefused is the operator drill: a config file that
// deletes DE from class eu and routes DE to us-east was valid (a
// warning) and applied. Now validate still exits 0, its warning saying
// such a write is refused; apply, its dry run and diff refuse it (exit 1,
// nothing written) naming DE, class eu and the routes; --force does not
// let it through, nor REGIONCTL_ALLOW_RESIDENCY_CHANGE; only the flag on
// the command line does, with a warning and residency_changed in the
// JSON.
func TestResidencyShrinkIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	gdpr2 := writeFile(t, "gdpr2.yaml", exampleWithout(t, true))

	r := e.must(ExitOK, "validate", "-f", gdpr2)
	if !strings.Contains(r.stderr, "1 of the 30 EEA member states are in no class (DE)") ||
		!strings.Contains(r.stderr, "is refused unless given --allow-residency-change") {
		t.Fatalf("validate -f gdpr2.yaml: %s; want exit 0, warning that such a write is refused without the flag", r)
	}

	rev, n := e.fingerprint()
	for _, args := range [][]string{
		{"apply", "-f", gdpr2},
		{"apply", "-f", gdpr2, "--dry-run"},
		{"apply", "-f", gdpr2, "--force"},
		{"apply", "-f", gdpr2, "--prune", "--force", "--dry-run", "-o", "json"},
		{"diff", "-f", gdpr2},
		{"diff", "-f", gdpr2, "--force"},
	} {
		r := e.run(args...)
		proposed := r.stderr // diff prints the changes on stdout, as ever
		if args[0] == "diff" {
			proposed = r.stdout
		}
		if r.code != ExitRefused || !containsAll(r.stderr, deRefusal) || !strings.Contains(proposed, "policy residency: class eu -DE") {
			t.Errorf("regionctl %s: want exit 1 with %q, got %s", strings.Join(args, " "), deRefusal, r)
		}
	}
	// From the environment, the flag is ignored, and said to be.
	e.env = map[string]string{"REGIONCTL_ALLOW_RESIDENCY_CHANGE": "true"}
	r = e.run("apply", "-f", gdpr2)
	e.env = nil
	if r.code != ExitRefused || !containsAll(r.stderr, deRefusal) ||
		!strings.Contains(r.stderr, "regionctl: warning: REGIONCTL_ALLOW_RESIDENCY_CHANGE is set, but regionctl reads --allow-residency-change from the command line only, so it is ignored") {
		t.Errorf("apply with REGIONCTL_ALLOW_RESIDENCY_CHANGE=true: %s; want refused, the variable named as ignored", r)
	}
	if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
		t.Fatalf("etcd changed: newest revision %d → %d, keys %d → %d", rev, rev2, n, n2)
	}

	// The flag: the dry run and diff say what it does, and so does the
	// write, which is audited with it.
	const allowed = "regionctl: warning: residency change allowed (--allow-residency-change): this write takes DE out of class eu (into no class): routes/DE (us-east), routes/_default (us-east)"
	for _, args := range [][]string{{"apply", "-f", gdpr2, "--allow-residency-change", "--dry-run"}, {"diff", "-f", gdpr2, "--allow-residency-change"}} {
		if r := e.must(ExitOK, args...); !strings.Contains(r.stderr, allowed) {
			t.Errorf("regionctl %s: %s; want %q", strings.Join(args, " "), r, allowed)
		}
	}
	r = e.must(ExitOK, "apply", "-f", gdpr2, "--allow-residency-change", "--reason", "DE leaves the EU (drill)", "-o", "json")
	var out struct {
		ResidencyChanged string `json:"residency_changed"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !strings.Contains(out.ResidencyChanged, "takes DE out of class eu") || !strings.Contains(r.stderr, allowed) {
		t.Fatalf("apply --allow-residency-change: %s (%v); want written, the change in stderr and in residency_changed", r, err)
	}
	if got := e.get(e.ks.RoutingKey(routing.PolicyKey)); strings.Contains(got, `"DE"`) {
		t.Fatalf("policy after the allowed write: %s; want DE out of class eu", got)
	}
	if h := e.must(ExitOK, "history", "2", "-o", "json"); !strings.Contains(h.stdout, "--allow-residency-change") {
		t.Fatalf("the audit record of the allowed write: %s; want its command to name the flag", h)
	}
}

// TestResidencyChangesRefusedByKind: a whole class removed, a code moved
// to another class, and unknown_country_class changed are refused as a
// code removed is; with no policy stored, the built-in one counts as the
// stored one (a first apply of a narrower policy is refused, one without
// a policy section is not); adding codes to a class is not refused.
func TestResidencyChangesRefusedByKind(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	example := string(data)
	const euLine = "      eu: [AT, BE, BG, HR, CY, CZ, DK, EE, FI, FR, DE, GR, HU, IE, IT, LV, LT, LU, MT, NL, PL, PT, RO, SK, SI, ES, SE, IS, LI, NO, AX, GF, GP, MF, MQ, RE, YT]\n"
	if !strings.Contains(example, euLine) {
		t.Fatal("the example fleet's class eu is not where the test looks")
	}
	e := newEnv(t)

	// The built-in policy counts as the stored one.
	narrow := writeFile(t, "narrow.yaml", strings.Replace(example, euLine, "      eu: [DE, FR, PL]\n", 1))
	r := e.must(ExitRefused, "apply", "-f", narrow)
	if !strings.Contains(r.stderr, "REFUSED policy/residency: this write takes AT, AX, BE, BG, CY, CZ, DK, EE, ES, FI, GF, GP, GR, HR, HU, IE, IS, IT, LI, LT, LU, LV, MF, MQ, MT, NL, NO, PT, RE, RO, SE, SI, SK, YT out of class eu (into no class)") {
		t.Fatalf("first apply of a policy narrower than the built-in one: %s; want refused, naming every code it leaves out", r)
	}
	noPolicy := writeFile(t, "nopolicy.yaml", example[strings.Index(example, "pools:"):])
	e.must(ExitOK, "apply", "-f", noPolicy)
	e.must(ExitOK, "apply", "-f", exampleConfig) // the built-in policy's codes, written: no change of class

	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"class removed", strings.Replace(example, euLine, "      uk: [GB]\n", 1), []string{
			"REFUSED policy/residency: this write takes AT, AX, BE, BG, CY, CZ, DE, DK, EE, ES, FI, FR, GF, GP, GR, HR, HU, IE, IS, IT, LI, LT, LU, LV, MF, MQ, MT, NL, NO, PL, PT, RE, RO, SE, SI, SK, YT out of class eu (into no class): routes/_default (us-east) may then send their viewers to pools of another residency than eu"}},
		{"code moved", strings.Replace(exampleWithout(t, true), "    unknown_country_class: eu", "      us: [DE]\n    unknown_country_class: eu", 1), []string{
			"REFUSED policy/residency: this write takes DE out of class eu (into class us): routes/DE (us-east), routes/_default (us-east) may then send its viewers to pools of another residency than eu"}},
		{"unknown country's class", strings.Replace(example, "unknown_country_class: eu", "unknown_country_class: us", 1), []string{
			"REFUSED policy/residency: this write takes the unknown country (unknown_country_class) out of class eu (into class us): routes/_default (us-east) may then send its viewers"}},
	} {
		path := writeFile(t, "change.yaml", tc.yaml)
		rev, n := e.fingerprint()
		for _, args := range [][]string{{"apply", "-f", path}, {"apply", "-f", path, "--force", "--dry-run"}, {"diff", "-f", path}} {
			if r := e.run(args...); r.code != ExitRefused || !containsAll(r.stderr, tc.want) {
				t.Errorf("%s: regionctl %s: want exit 1 and %q, got %s", tc.name, strings.Join(args, " "), tc.want, r)
			}
		}
		if rev2, n2 := e.fingerprint(); rev2 != rev || n2 != n {
			t.Fatalf("%s: etcd changed", tc.name)
		}
		e.must(ExitOK, "apply", "-f", path, "--dry-run", "--allow-residency-change")
	}

	// Growth is not refused: GB put in a class of its own.
	e.must(ExitOK, "apply", "-f", writeFile(t, "uk.yaml", strings.Replace(example, euLine, euLine+"      uk: [GB]\n", 1)))
	// Taking it out again is.
	if r := e.must(ExitRefused, "apply", "-f", exampleConfig); !strings.Contains(r.stderr, "this write takes GB out of class uk (into no class)") {
		t.Fatalf("GB out of class uk: %s", r)
	}
	// Deleting the policy key (apply --prune of a file without one)
	// takes GB out too: the built-in policy has no class uk.
	if r := e.must(ExitRefused, "apply", "-f", noPolicy, "--prune"); !strings.Contains(r.stderr, "this write takes GB out of class uk (into no class)") {
		t.Fatalf("the policy key pruned: %s", r)
	}
}

// TestResidencyUnchangedPolicyIsNotRefused: a write that leaves the
// policy as it is goes through even when the stored policy already
// leaves EEA states in no class (the behaviour before the check: a
// stored config with such a policy stays writable): pool and route
// verbs, an apply of a file without a policy section, an apply of the
// same policy written otherwise, and one that only adds a code.
func TestResidencyUnchangedPolicyIsNotRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	without := exampleWithout(t, false)
	e.must(ExitOK, "apply", "-f", writeFile(t, "gdpr2.yaml", without), "--allow-residency-change")
	e.must(ExitOK, "pool", "drain", "eu-north", "--reason", "DE stays out of class eu")
	e.must(ExitOK, "pool", "undrain", "eu-north")
	e.must(ExitOK, "route", "set", "DE", "--target", "us-east=100")
	e.must(ExitOK, "apply", "-f", writeFile(t, "routes.yaml", "routes:\n  CZ: {targets: [{pool: eu-west, weight: 100}], fallback: [eu-general]}\n"))
	// The same classes, DE still out, written in another order: the key
	// is rewritten, no code leaves its class.
	reordered := strings.Replace(without, "[AT, BE, BG,", "[BE, AT, BG,", 1)
	r := e.must(ExitOK, "apply", "-f", writeFile(t, "reordered.yaml", reordered))
	if !strings.Contains(r.stdout, "policy residency: ") {
		t.Fatalf("the same policy reordered: %s; want written, no refusal", r)
	}
	// Growth with DE still out: CH into class eu.
	e.must(ExitOK, "apply", "-f", writeFile(t, "ch.yaml", strings.Replace(reordered, "[BE, AT, BG,", "[CH, BE, AT, BG,", 1)))
	if got := e.get(e.ks.RoutingKey(routing.PolicyKey)); strings.Contains(got, `"DE"`) || !strings.Contains(got, `"CH"`) {
		t.Fatalf("policy: %s; want CH in, DE still out", got)
	}
}

// TestResidencyRollbackIsRefused: rollback writes the policy of an
// epoch, and is refused as apply is when that takes a code out of the
// class the stored policy puts it in, in its dry run too.
func TestResidencyRollbackIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()                                                                                                       // epoch 1
	e.must(ExitOK, "apply", "-f", writeFile(t, "gdpr2.yaml", exampleWithout(t, true)), "--allow-residency-change") // epoch 2
	e.must(ExitOK, "apply", "-f", exampleConfig)                                                                   // epoch 3: DE back in class eu
	for _, args := range [][]string{{"rollback", "2"}, {"rollback", "2", "--dry-run"}, {"rollback", "2", "--force"}} {
		if r := e.run(args...); r.code != ExitRefused || !containsAll(r.stderr, deRefusal) {
			t.Errorf("regionctl %s: want exit 1 and %q, got %s", strings.Join(args, " "), deRefusal, r)
		}
	}
	if got := e.get(e.ks.Epoch()); got != "3" {
		t.Fatalf("epoch %s after the refused rollbacks, want 3", got)
	}
	r := e.must(ExitOK, "rollback", "2", "--allow-residency-change", "--reason", "back to the drill")
	if !strings.Contains(r.stderr, "residency change allowed (--allow-residency-change): this write takes DE out of class eu") {
		t.Fatalf("rollback 2 --allow-residency-change: %s; want the change warned of", r)
	}
	e.must(ExitOK, "rollback", "1") // DE back in: not refused
}

// TestResidencyCheckUsesTheWritesRead: the stored policy a write is
// judged against is the one of the read its compare-and-swap is based
// on. A write that keeps the stored policy without DE (an apply of the
// file that left DE out, to change a route) while another operator puts
// DE back in class eu meanwhile is a conflict (3), not a write that takes
// DE out again unrefused; retried, it is judged against the new policy,
// and refused.
func TestResidencyCheckUsesTheWritesRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	gdpr2 := writeFile(t, "gdpr2.yaml", exampleWithout(t, false))
	e.must(ExitOK, "apply", "-f", gdpr2, "--allow-residency-change")
	edit := writeFile(t, "gdpr2-edit.yaml", strings.Replace(exampleWithout(t, false), "CZ: {targets: [{pool: eu-central, weight: 100}]", "CZ: {targets: [{pool: eu-west, weight: 100}]", 1))
	var calls atomic.Int32
	hook := func() {
		if calls.Add(1) == 1 {
			e.must(ExitOK, "apply", "-f", exampleConfig, "--reason", "DE back in class eu")
		}
	}
	ctx := context.WithValue(context.Background(), afterReadHook{}, hook)
	if r := e.runCtx(ctx, "apply", "-f", edit); r.code != ExitConflict {
		t.Fatalf("apply with DE left out, the policy changed after its read: %s; want a conflict (3)", r)
	}
	calls.Store(0)
	e.must(ExitOK, "apply", "-f", gdpr2, "--allow-residency-change")
	if r := e.runCtx(ctx, "apply", "-f", edit, "--retry", "2"); r.code != ExitRefused || !strings.Contains(r.stderr, "this write takes DE out of class eu") || calls.Load() != 2 {
		t.Fatalf("the same, retried (%d attempts): %s; want the retry refused, DE named", calls.Load(), r)
	}
	if got := e.get(e.ks.RoutingKey(routing.PolicyKey)); !strings.Contains(got, `"DE"`) {
		t.Fatalf("policy: %s; want DE in class eu, as the other operator wrote it", got)
	}
}

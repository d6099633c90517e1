package cli

import (
	"os"
	"strings"
	"testing"
)

// TestEUTerritoriesStayInTheEU: the parts of the EU with codes of their
// own (Réunion RE, Åland AX, …) are in the example's eu class, so their
// viewers get EU pools only (the _default route's us-east was half of
// RE's picks); a policy that holds France but not RE is still valid but
// warned about, in a file, in the stored config and in a rollback to it,
// naming each code.
func TestEUTerritoriesStayInTheEU(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	for _, key := range []string{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"} {
		for _, cc := range []string{"RE", "AX", "YT"} {
			r := e.must(ExitOK, "resolve", cc, "--key", key, "-o", "json")
			if !strings.Contains(r.stdout, `"pool": "eu-`) && !strings.Contains(r.stdout, `"pool":"eu-`) {
				t.Fatalf("resolve %s --key %s: %s; want an eu pool", cc, key, r)
			}
		}
	}

	data, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	old := writeFile(t, "eea-only.yaml", strings.Replace(string(data), ", AX, GF, GP, MF, MQ, RE, YT]", "]", 1))
	r := e.must(ExitOK, "validate", "-f", old)
	if n := strings.Count(r.stderr, "regionctl: warning: "+old+": policy/residency: "); n != 7 ||
		!strings.Contains(r.stderr, "RE (part of FR) is in no class while FR is in class eu: its viewers may be sent to any pool; add RE to class eu") {
		t.Fatalf("validate -f of a policy without the territories: %s; want 7 warnings naming each", r)
	}
	// Stored with the territories, a write of it takes them out of
	// class eu: refused without --allow-residency-change.
	r = e.must(ExitRefused, "apply", "-f", old)
	if !strings.Contains(r.stderr, "REFUSED policy/residency: this write takes AX, GF, GP, MF, MQ, RE, YT out of class eu (into no class)") {
		t.Fatalf("apply -f of a policy without the territories over one with them: %s; want refused, naming each", r)
	}
	e.must(ExitOK, "apply", "-f", old, "--allow-residency-change")
	r = e.must(ExitOK, "validate")
	if !strings.Contains(r.stderr, "warning: the stored config at epoch 2: policy/residency: AX (part of FI)") {
		t.Fatalf("validate of the stored policy without the territories: %s", r)
	}
	if r := e.must(ExitOK, "validate", "-f", exampleConfig); r.stderr != "" {
		t.Fatalf("validate of the example: %s; want no warning", r)
	}
	// A rollback to that epoch (a release's policy before the
	// territories) warns as apply did.
	e.must(ExitOK, "apply", "-f", exampleConfig)
	// warns as apply did, and is refused as apply is without
	// --allow-residency-change.
	if r := e.must(ExitRefused, "rollback", "2", "--dry-run"); !strings.Contains(r.stderr, "regionctl: warning: the config of epoch 2: policy/residency: RE (part of FR) is in no class") ||
		!strings.Contains(r.stderr, "REFUSED policy/residency: this write takes AX, GF, GP, MF, MQ, RE, YT out of class eu") {
		t.Fatalf("rollback to the policy without the territories: %s; want its warnings and the refusal", r)
	}
	if r := e.must(ExitOK, "rollback", "2", "--dry-run", "--allow-residency-change"); !strings.Contains(r.stderr, "regionctl: warning: the config of epoch 2: policy/residency: RE (part of FR) is in no class") {
		t.Fatalf("rollback to the policy without the territories, allowed: %s; want its warnings", r)
	}

	// Fallbacks on _default are followed only by chains naming _default.
	fb := writeFile(t, "default-fallback.yaml", strings.Replace(string(data)+"  spare: {targets: [{pool: eu-north, weight: 100}]}\n",
		"    targets: [{pool: eu-central, weight: 30}, {pool: eu-west, weight: 20}, {pool: us-east, weight: 50}]\n",
		"    targets: [{pool: eu-central, weight: 30}, {pool: eu-west, weight: 20}, {pool: us-east, weight: 50}]\n    fallback: [spare]\n", 1))
	if r := e.must(ExitOK, "validate", "-f", fb); !strings.Contains(r.stderr, "regionctl: warning: "+fb+": routes/_default: fallback spare is followed only by chains that name _default") {
		t.Fatalf("validate -f of a _default with fallbacks: %s; want the warning", r)
	}
}

// TestApplyInPartsWarnsOfTheMergedConfig: a file applied without --prune
// is warned of as the config it makes with the stored one, not as if it
// were the whole config: a routes file applied after its pools (a config
// over etcd's limits is applied in parts, as regionctl.md says) whose
// fallback's pools are stored of the route's class gets no warning (it
// was told the fallback could never serve the route), and one whose
// fallback's stored pools are of another class gets it, saying so.
func TestApplyInPartsWarnsOfTheMergedConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	parts := writeFile(t, "routes.yaml", "routes:\n  PL: {targets: [{pool: eu-central, weight: 100}], fallback: [eu-spare]}\n  eu-spare: {targets: [{pool: eu-north, weight: 100}]}\n")
	for _, args := range [][]string{{"diff", "-f", parts}, {"apply", "-f", parts, "--dry-run"}, {"apply", "-f", parts}} {
		if r := e.must(ExitOK, args...); strings.Contains(r.stderr, "can never serve") {
			t.Errorf("%s, its fallback's pool stored of class eu: %s; want no warning", strings.Join(args, " "), r)
		}
	}
	wrong := writeFile(t, "wrong.yaml", "routes:\n  PL: {targets: [{pool: eu-central, weight: 100}], fallback: [us-spare]}\n  us-spare: {targets: [{pool: us-east, weight: 100}]}\n")
	want := "regionctl: warning: " + wrong + " with the stored config: routes/PL: fallback us-spare can never serve PL (class eu): none of its pools (us-east) is of class eu"
	for _, args := range [][]string{{"diff", "-f", wrong}, {"apply", "-f", wrong}} {
		if r := e.must(ExitOK, args...); strings.Count(r.stderr, want) != 1 {
			t.Errorf("%s, its fallback's pool stored of class us: %s; want once %q", strings.Join(args, " "), r, want)
		}
	}
	if r := e.must(ExitRefused, "validate", "-f", parts); !strings.Contains(r.stderr, "regionctl: warning: "+parts+": routes/PL: fallback eu-spare can never serve PL") {
		t.Errorf("validate -f of the routes file (the whole config: no pools, refused): %s; want the file warned of alone", r)
	}
}

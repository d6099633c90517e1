package cli

import (
	"strings"
	"testing"
)

// TestTargetsCommaSeparated: --target takes POOL=WEIGHT repeated or
// comma-separated (pool ids hold no comma), as --down takes pools; a
// malformed one is a usage error naming the whole value.
func TestTargetsCommaSeparated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "route", "set", "PL", "--target", "eu-central=60,eu-west=40", "--reason", "comma")
	if got := e.get(e.ks.RoutingKey("routes/PL")); !strings.Contains(got, `"targets":[{"pool":"eu-central","weight":60},{"pool":"eu-west","weight":40}]`) {
		t.Fatalf("routes/PL after --target eu-central=60,eu-west=40: %s", got)
	}
	if r := e.must(ExitUsage, "route", "set", "PL", "--target", "eu-central=60,eu-west"); !strings.Contains(r.stderr, `--target "eu-central=60,eu-west": want POOL=WEIGHT`) {
		t.Fatalf("a malformed comma-separated --target: %s", r)
	}
}

// TestTTLErrorsSayWhat: a --ttl Go cannot read (a typo, or past its
// 2562047h) is not called too short.
func TestTTLErrorsSayWhat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for ttl, want := range map[string]string{
		"3000000h": `--ttl "3000000h": not a duration from 1s to 2562047h`,
		"5x":       `--ttl "5x": not a duration from 1s to 2562047h`,
		"500ms":    `--ttl "500ms": want a duration of at least 1s`,
	} {
		if r := e.must(ExitUsage, "boost", "PL", "--target", "eu-west=100", "--ttl", ttl); !strings.Contains(r.stderr, want) {
			t.Errorf("--ttl %s: %s; want %q", ttl, r, want)
		}
	}
}

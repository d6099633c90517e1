package cli

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestValueNotUTF8IsNamed: a value put by hand holding a byte that is not
// UTF-8 (a lone 0x9b in an unknown field of a pool) is a refused value for
// regionctl as for the agents: `get skipped` and `validate` name the key,
// the byte and its offset, and a key whose instance holds such a byte is
// named by its stand-in, as the agents name it. Nothing printed holds the
// byte (a lone 0x9b is the 8-bit CSI of a terminal). A config file that is
// not UTF-8 is refused before any value is read.
func TestValueNotUTF8IsNamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.putHandEdit("pools/eu-west", "{\"host\":\"edge-ams-1.example.net:443\",\"residency\":\"eu\",\"x\":\"a\x9b31mb\"}")
	e.putHandEdit("health/eu-west/h\x9b1", "up")
	const why = "pools/eu-west: value is not valid UTF-8 (JSON must be): byte 0x9b at offset 60 (counting from 0) begins no UTF-8 character"
	r := e.must(ExitOK, "get", "skipped")
	if !strings.Contains(r.stdout, why) || !strings.Contains(r.stdout, "health/eu-west/h… (18 bytes, sha256 ") || !utf8.ValidString(r.stdout) {
		t.Errorf("get skipped: want %q and the health key's stand-in, all in UTF-8\n%s", why, r)
	}
	r = e.must(ExitRefused, "validate")
	if !strings.Contains(r.stderr, why) || !utf8.ValidString(r.stderr+r.stdout) {
		t.Errorf("validate: want %q, in UTF-8\n%s", why, r)
	}
	f := writeFile(t, "fleet.yaml", "pools:\n  p1:\n    host: \"h:443\"\n    residency: eu\n    attrs: {x: \"a\x9b\"}\nroutes: {}\n")
	r = e.must(ExitRefused, "validate", "-f", f)
	if want := "fleet.yaml: parse config: the file is not valid UTF-8: byte 0x9b at line 5, column 18 (byte 66, counting from 0)"; !strings.Contains(r.stderr, want) || !utf8.ValidString(r.stderr) {
		t.Errorf("validate -f of a file not UTF-8: want %q\n%s", want, r)
	}
}

// TestReasonNotUTF8IsRefused: a --reason that is not UTF-8 is a usage
// error naming the byte, before anything is written (the audit record is
// JSON: it was written with U+FFFD in the byte's place).
func TestReasonNotUTF8IsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	r := e.must(ExitUsage, "pool", "drain", "eu-west", "--reason", "maint\x9bx")
	if want := "--reason: byte 0x9b at offset 5 (counting from 0) begins no UTF-8 character"; !strings.Contains(r.stderr, want) || !utf8.ValidString(r.stderr) {
		t.Errorf("a --reason not UTF-8: want %q, in UTF-8\n%s", want, r)
	}
	if r := e.must(ExitOK, "history", "--limit", "1", "-o", "json"); !strings.Contains(r.stdout, `"epoch": 1`) {
		t.Errorf("a refused --reason wrote a record:\n%s", r)
	}
	e.must(ExitOK, "pool", "drain", "eu-west", "--reason", "maintenance — Zürich")
}

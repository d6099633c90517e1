package routing

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestShortKey: a key longer than MaxKeyLen is named by a bounded stand-in
// that tells keys apart and is no valid key; shorter ones are themselves.
func TestShortKey(t *testing.T) {
	if got := ShortKey([]byte("pools/eu-west")); got != "pools/eu-west" {
		t.Errorf("ShortKey(pools/eu-west) = %q", got)
	}
	a := ShortKey([]byte("health/p/" + strings.Repeat("é", 400))) // a rune across byte 64
	b := ShortKey([]byte("health/p/" + strings.Repeat("é", 399) + "e"))
	if a == b || len(a) > 160 || !utf8.ValidString(a) || !strings.Contains(a, "(809 bytes, sha256 ") {
		t.Errorf("stand-ins %q and %q: want them different, short, valid UTF-8 and naming the length", a, b)
	}
	if _, err := ParseKey(a); err == nil {
		t.Errorf("the stand-in %q parses as a key", a)
	}
	// A key written as another key's stand-in gets a name of its own.
	if again := ShortKey([]byte(a)); again == a || !strings.HasPrefix(again, a[:32]) {
		t.Errorf("ShortKey of the stand-in %q = %q, want another stand-in", a, again)
	}
	if got := ShortKey([]byte("health/p/x… (12 bytes)")); got != "health/p/x… (12 bytes)" {
		t.Errorf("a short key not shaped like a stand-in became %q", got)
	}
}

// TestShortKeyNotUTF8: a key that is not valid UTF-8 (no valid key is) is
// named by a stand-in that is valid UTF-8, up to its first byte that is
// not, so that its name in the agent's reports, the table JSON's skipped
// list and regionctl's output is UTF-8 (JSON readers refuse other bytes;
// a lone 0x9b is a terminal's CSI), and two such keys differing only in
// that byte keep names of their own (encoding/json would have turned both
// bytes into the same U+FFFD).
func TestShortKeyNotUTF8(t *testing.T) {
	a := ShortKey([]byte("health/eu-west/h\x9b1"))
	b := ShortKey([]byte("health/eu-west/h\x9c1"))
	if a == b || !utf8.ValidString(a) || !utf8.ValidString(b) || !strings.HasPrefix(a, "health/eu-west/h… (18 bytes, sha256 ") {
		t.Errorf("stand-ins %q and %q: want them different, valid UTF-8, each its key up to the byte that is not UTF-8 and its length", a, b)
	}
	if _, err := ParseKey(a); err == nil {
		t.Errorf("the stand-in %q parses as a key", a)
	}
	if got := ShortKey([]byte("health/eu-west/é")); got != "health/eu-west/é" {
		t.Errorf("a key in UTF-8 beyond ASCII became %q, want it as it is", got)
	}
}

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

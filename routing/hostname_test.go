package routing

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// hostNameRe is the reference isHostName is written from.
var hostNameRe = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?$`)

// isHostName agrees with the regular expression on chosen cases and on
// random strings of the characters that matter (labels up to 70 long).
func TestIsHostNameMatchesRegexp(t *testing.T) {
	cases := []string{"", ".", "a", "a.", "a..", ".a", "a..b", "-a", "a-", "a-.b", "a.-b", "_a.b_", "edge-fra-1.example.net",
		"EDGE.Example.NET.", "a b", "ä.example", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 63) + ".b",
		strings.Repeat("a", 64) + ".b", "1.2.3.4", "a.b.", "a.b..", "*.example"}
	rng := rand.New(rand.NewPCG(3, 5))
	const alphabet = "aZ09_-.:x "
	for range 20000 {
		n := rng.IntN(12)
		if rng.IntN(10) == 0 {
			n = 60 + rng.IntN(10)
		}
		var b strings.Builder
		for range n {
			if rng.IntN(3) == 0 {
				b.WriteByte('a')
			} else {
				b.WriteByte(alphabet[rng.IntN(len(alphabet))])
			}
		}
		cases = append(cases, b.String())
	}
	for _, c := range cases {
		if got, want := isHostName(c), hostNameRe.MatchString(c); got != want {
			t.Fatalf("isHostName(%q) = %v, the regexp says %v", c, got, want)
		}
	}
}

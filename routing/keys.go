package routing

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is the kind of a key under <root>/routing/.
type Kind int

// Key kinds of the routing prefix.
const (
	KindInvalid Kind = iota
	KindPool
	KindRoute
	KindPolicy
	KindOverride
	KindHealth
	KindEpoch
)

// String returns the key-path segment of the kind.
func (k Kind) String() string {
	switch k {
	case KindPool:
		return "pools"
	case KindRoute:
		return "routes"
	case KindPolicy:
		return "policy"
	case KindOverride:
		return "overrides"
	case KindHealth:
		return "health"
	case KindEpoch:
		return "epoch"
	}
	return "invalid"
}

// Relative key names under <root>/routing/.
const (
	PolicyKey = "policy/residency"
	EpochKey  = "epoch"
)

// MaxEpoch is the largest epoch: 2^53−1, the largest integer every JSON
// reader holds exactly (JavaScript's numbers are doubles). regionctl
// counts up from 1; only a hand edit gets past it.
const MaxEpoch = 1<<53 - 1

// ParseEpoch reads the epoch key's value, as the agents and regionctl
// all read it: a decimal integer from 0 to MaxEpoch, with spaces around it
// allowed (etcdctl put … "5\n"). ok is false for anything else, and epoch
// is then 0.
func ParseEpoch(raw []byte) (epoch int64, ok bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || n < 0 || n > MaxEpoch {
		return 0, false
	}
	return n, true
}

// MaxValueSize is the largest value accepted for any key (64 KiB).
const MaxValueSize = 64 << 10

// MaxValueDepth is the deepest nesting of objects and lists accepted in a
// value (the value's own object is 1). Unknown fields are kept and copied
// into the table JSON, whose readers have limits of their own: PHP's
// json_decode gives up at 512 levels, for every country at once.
const MaxValueDepth = 64

// MaxKeyLen is the longest key (relative to <root>/routing/) a mirror
// keeps as it is (see ShortKey). Every valid key is shorter: the longest,
// a health key, is 7 + 63 + 1 + 128 bytes.
const MaxKeyLen = 512

// ShortKey returns rel as a string, or a stand-in of at most about 150
// bytes naming it, for a key longer than MaxKeyLen (never a valid one),
// one that is not valid UTF-8 (neither) or one shaped like a stand-in:
// its first 64 bytes (up to its first byte that is not UTF-8), its length
// and a digest of the whole key. A stand-in is no valid key, is valid
// UTF-8 (it goes into JSON, whose readers refuse other bytes, and onto
// terminals), and two keys give the same name only if they are equal (or
// their digests collide): a key left as it is never has a stand-in's
// shape. A role that may write under a prefix (an origin's, under its
// pool's health/) may write keys of any length and bytes, which every
// agent would otherwise hold, and name in its refusals.
func ShortKey(rel []byte) string {
	if len(rel) <= MaxKeyLen && (len(rel) == 0 || rel[len(rel)-1] != ')' || !standInShape.Match(rel)) && utf8.Valid(rel) {
		return string(rel)
	}
	sum := sha256.Sum256(rel)
	head := rel[:min(len(rel), 64, InvalidUTF8At(rel))]
	for len(head) > 0 && !utf8.Valid(head) {
		head = head[:len(head)-1] // not a rune cut in two
	}
	return fmt.Sprintf("%s… (%d bytes, sha256 %x)", head, len(rel), sum[:16])
}

// standInShape matches the end of a ShortKey stand-in.
var standInShape = regexp.MustCompile(`… \([0-9]+ bytes, sha256 [0-9a-f]{32}\)$`)

// Key is a parsed key of the routing prefix. ID is the pool id, route name,
// override id or, for health keys, the pool id; Instance is set for health keys.
type Key struct {
	// Kind is the kind of key.
	Kind Kind
	// ID is the key's name: "residency" for the policy, empty for the
	// epoch.
	ID string
	// Instance is a health key's instance id; empty for other kinds.
	Instance string
}

// byteClass is a set of bytes allowed in a name.
type byteClass [256]bool

func classOf(ranges ...string) *byteClass {
	var c byteClass
	for _, r := range ranges {
		if len(r) == 3 && r[1] == '-' {
			for b := int(r[0]); b <= int(r[2]); b++ {
				c[b] = true
			}
			continue
		}
		for i := 0; i < len(r); i++ {
			c[r[i]] = true
		}
	}
	return &c
}

var (
	lowerDigit      = classOf("a-z", "0-9")
	lowerDigitDash  = classOf("a-z", "0-9", "-")
	poolIDChars     = classOf("a-z", "0-9", "._-")
	instanceChars   = classOf("A-Z", "a-z", "0-9", "._:-")
	alnum           = classOf("A-Z", "a-z", "0-9")
	overrideIDChars = classOf("A-Z", "a-z", "0-9", "._-")
	lower           = classOf("a-z")
)

// matchName reports whether s is 1..maxLen bytes from middle, starting
// with a byte from first and ending with a byte from last.
func matchName(s string, maxLen int, first, middle, last *byteClass) bool {
	if len(s) == 0 || len(s) > maxLen || !first[s[0]] || !last[s[len(s)-1]] {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if !middle[s[i]] {
			return false
		}
	}
	return true
}

// ValidPoolID reports whether s is a valid pool id: lower-case letters,
// digits, '.', '_' and '-', starting and ending with a letter or digit.
func ValidPoolID(s string) bool { return matchName(s, 63, lowerDigit, poolIDChars, lowerDigit) }

// ValidRouteName reports whether s names a route: an assigned ISO 3166-1
// alpha-2 code in upper case, "_default", or a lower-case group name.
func ValidRouteName(s string) bool {
	return s == DefaultRoute || IsCountry(s) || matchName(s, 63, lowerDigit, lowerDigitDash, lowerDigit)
}

// ValidOverrideID reports whether s is a valid override id.
func ValidOverrideID(s string) bool {
	return matchName(s, 128, alnum, overrideIDChars, overrideIDChars)
}

// ValidInstanceID reports whether s is a valid health instance id.
func ValidInstanceID(s string) bool {
	return matchName(s, 128, instanceChars, instanceChars, instanceChars)
}

// ValidLabel reports whether s is a residency class or region label.
func ValidLabel(s string) bool { return matchName(s, 63, lower, lowerDigitDash, lowerDigitDash) }

// ParseKey parses a key relative to <root>/routing/ ("pools/eu-central").
func ParseKey(rel string) (Key, error) {
	kind, rest, _ := strings.Cut(rel, "/")
	switch kind {
	case "pools":
		if ValidPoolID(rest) {
			return Key{Kind: KindPool, ID: rest}, nil
		}
		return Key{}, fmt.Errorf("key %q: invalid pool id %q (want lower-case letters, digits, '.', '_', '-')", rel, rest)
	case "routes":
		if cc := lookalikeCountry(rest); cc != "" && ValidRouteName(rest) {
			// Outside the grammar, not a group served to no country: a
			// hand edit meant for the country is named where it is
			// skipped (the agents' reports, regionctl's warnings).
			return Key{}, fmt.Errorf("key %q: group name %q spells the country %s: country routes are upper case (routes/%s)", rel, rest, cc, cc)
		}
		if ValidRouteName(rest) {
			return Key{Kind: KindRoute, ID: rest}, nil
		}
		return Key{}, fmt.Errorf("key %q: invalid route name %q (want an ISO 3166-1 alpha-2 code in upper case, _default, or a lower-case group name)%s", rel, rest, CountryHint(rest))
	case "policy":
		if rest == "residency" {
			return Key{Kind: KindPolicy, ID: rest}, nil
		}
	case "overrides":
		if ValidOverrideID(rest) {
			return Key{Kind: KindOverride, ID: rest}, nil
		}
		return Key{}, fmt.Errorf("key %q: invalid override id %q", rel, rest)
	case "health":
		pool, inst, ok := strings.Cut(rest, "/")
		if ok && ValidPoolID(pool) && ValidInstanceID(inst) {
			return Key{Kind: KindHealth, ID: pool, Instance: inst}, nil
		}
		return Key{}, fmt.Errorf("key %q: want health/<pool>/<instance>", rel)
	case "epoch":
		if rest == "" && !strings.Contains(rel, "/") {
			return Key{Kind: KindEpoch}, nil
		}
	}
	return Key{}, fmt.Errorf("key %q: not in the routing key grammar (pools/, routes/, policy/residency, overrides/, health/, epoch)", rel)
}

// String returns the relative key ("routes/PL").
func (k Key) String() string {
	switch k.Kind {
	case KindPool:
		return "pools/" + k.ID
	case KindRoute:
		return "routes/" + k.ID
	case KindPolicy:
		return PolicyKey
	case KindOverride:
		return "overrides/" + k.ID
	case KindHealth:
		return "health/" + k.ID + "/" + k.Instance
	case KindEpoch:
		return EpochKey
	}
	return ""
}

// PoolKey returns the relative key of a pool.
func PoolKey(id string) string { return "pools/" + id }

// RouteKey returns the relative key of a route.
func RouteKey(name string) string { return "routes/" + name }

// OverrideKey returns the relative key of an override.
func OverrideKey(id string) string { return "overrides/" + id }

// HealthKey returns the relative key of a pool instance's health marker.
func HealthKey(pool, instance string) string { return "health/" + pool + "/" + instance }

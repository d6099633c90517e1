package routing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Value is a decoded value of the routing prefix: *Pool, *Route,
// *Residency, *Override, *Health or int64 (epoch).
type Value any

// DecodeValue decodes and checks one value of the routing prefix; rel is its
// key relative to <root>/routing/. Unknown JSON fields are kept and ignored;
// wrong types, bad enums and out-of-range numbers are errors naming the key
// and the field. Defaults (status active, affinity sticky, the built-in eu class) are
// filled in.
func DecodeValue(rel string, raw []byte) (Value, error) {
	v, _, err := decodeValue(rel, raw)
	return v, err
}

// decodeValue is DecodeValue also returning the paths of unknown fields
// inside nested objects ("targets[0].wieght"), which DecodeValue ignores
// and config files refuse.
func decodeValue(rel string, raw []byte) (Value, []string, error) {
	return decodeValueWith(rel, raw, false, true)
}

// decodeFileValue is decodeValue for a value of a config file, whose size
// is not measured: its JSON (converted from YAML) is not what etcd would
// hold. Validate measures the bytes regionctl writes for it, and a write
// the bytes it puts.
func decodeFileValue(rel string, raw []byte) (Value, []string, error) {
	return decodeValueWith(rel, raw, false, false)
}

// decodeKept is DecodeValue for a value whose bytes the table keeps (as a
// key's last good raw value) and nobody changes: its strings share raw's
// memory instead of copying it, which halves what decoding a pool
// allocates.
func decodeKept(rel string, raw []byte) (Value, error) {
	v, _, err := decodeValueWith(rel, raw, true, true)
	return v, err
}

// decodeValueWith is decodeValue; with shared, the strings of the value
// may share raw's memory; with sized, raw's size is limited to
// MaxValueSize.
func decodeValueWith(rel string, raw []byte, shared, sized bool) (Value, []string, error) {
	k, err := ParseKey(rel)
	if err != nil {
		return nil, nil, err
	}
	v, unknown, errs := decodeKind(k, raw, shared, sized)
	if len(errs) > 0 {
		return nil, nil, errs.prefixed(rel)
	}
	return v, unknown, nil
}

func decodeKind(k Key, raw []byte, shared, sized bool) (Value, []string, Errors) {
	if sized && len(raw) > MaxValueSize {
		return nil, nil, Errors{{Msg: fmt.Sprintf("value is %d bytes, larger than the %d-byte limit", len(raw), MaxValueSize)}}
	}
	if !utf8.Valid(raw) {
		return nil, nil, Errors{{Msg: notUTF8(raw)}}
	}
	if k.Kind == KindEpoch {
		n, ok := ParseEpoch(raw)
		if !ok {
			return nil, nil, Errors{{Msg: fmt.Sprintf("epoch must be a decimal integer from 0 to %d, got %q", MaxEpoch, truncate(raw))}}
		}
		return n, nil, nil
	}
	var (
		v       Value
		unknown []string
		errs    Errors
	)
	switch k.Kind {
	case KindPool:
		p := new(Pool)
		if unknown, errs = unmarshalUnknown(raw, p, shared); errs == nil {
			errs = p.normalize()
		}
		v = p
	case KindRoute:
		r := new(Route)
		if unknown, errs = unmarshalUnknown(raw, r, shared); errs == nil {
			errs = r.normalize(k.ID)
		}
		v = r
	case KindPolicy:
		p := new(Residency)
		if unknown, errs = unmarshalUnknown(raw, p, shared); errs == nil {
			errs = p.normalize()
		}
		v = p
	case KindOverride:
		o := new(Override)
		if unknown, errs = unmarshalUnknown(raw, o, shared); errs == nil {
			errs = o.normalize()
		}
		v = o
	case KindHealth:
		h := new(Health)
		unknown, errs = unmarshalUnknown(raw, h, shared)
		v = h
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return v, unknown, nil
}

// unmarshal decodes a JSON object into v (a pointer to one of the value
// types), naming the field of every problem; see jsonDecoder.
func unmarshal(raw []byte, v any) Errors {
	_, errs := unmarshalUnknown(raw, v, false)
	return errs
}

// unmarshalUnknown is unmarshal also returning the paths of unknown fields
// inside nested objects (unknown top-level fields are kept in Extra).
func unmarshalUnknown(raw []byte, v any, shared bool) ([]string, Errors) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, Errors{{Msg: fmt.Sprintf("value must be a JSON object, got %q", truncate(raw))}}
	}
	if ok, depth, lone := validJSONCheck(trimmed); ok {
		if depth > MaxValueDepth {
			return nil, Errors{{Msg: fmt.Sprintf("value is nested %d levels deep (objects and lists), more than the %d accepted", depth, MaxValueDepth)}}
		}
		if lone >= 0 {
			// trimmed is raw from its first byte that is no space on.
			return nil, Errors{{Msg: loneSurrogate(trimmed, lone, cap(raw)-cap(trimmed))}}
		}
		return decodeJSONObject(trimmed, v, shared)
	}
	if err := json.Unmarshal(trimmed, new(json.RawMessage)); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, Errors{{Msg: fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)}}
		}
		return nil, Errors{{Msg: "invalid JSON: " + err.Error()}}
	}
	return decodeJSONObject(trimmed, v, shared) // not reached: validJSON (json.Valid) and json.Unmarshal agree
}

// notUTF8 says where raw, which is not valid UTF-8, stops being UTF-8.
// Such a value is refused wherever its bytes are (an unknown field kept
// and copied into the table JSON included): JSON is UTF-8, a reader such
// as PHP's json_decode refuses a whole document holding other bytes, and
// a lone byte such as 0x9b is a control sequence on a terminal.
func notUTF8(raw []byte) string {
	off := InvalidUTF8At(raw)
	return fmt.Sprintf("value is not valid UTF-8 (JSON must be): byte 0x%02x at offset %d (counting from 0) begins no UTF-8 character", raw[off], off)
}

// loneSurrogate says that the \u escape at offset at of b, which starts
// at offset lead of the stored value, is half a UTF-16 surrogate pair
// alone (see validJSONCheck).
func loneSurrogate(b []byte, at, lead int) string {
	return fmt.Sprintf("value holds the escape %s at offset %d (counting from 0), half of a UTF-16 surrogate pair without its other half: "+
		"no character (JSON readers such as PHP's json_decode refuse it)", b[at:at+6], lead+at)
}

// InvalidUTF8At returns the offset of the first byte of b that begins no
// valid UTF-8 encoding of a character (len(b) when b is valid UTF-8):
// where a value, a key or a config file stops being UTF-8, for messages
// that name the byte.
func InvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func truncate(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}

// isHostName reports whether name is dot-separated labels of 1 to 63 of
// [A-Za-z0-9_-], none beginning with '-', with an optional final dot: the
// regular expression
// ^[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?$
// (TestIsHostNameMatchesRegexp), without one (it runs for every pool).
func isHostName(name string) bool {
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return false
	}
	label := 0 // length of the label so far
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		case c == '-':
			if label == 0 {
				return false
			}
		case c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		default:
			return false
		}
		if label++; label > 63 {
			return false
		}
	}
	return label > 0
}

// maybeIP reports whether h could be an IP address, or one with a port:
// it has a ':' (IPv6, or a port) or is digits and dots (IPv4).
func maybeIP(h string) bool {
	if strings.IndexByte(h, ':') >= 0 {
		return true
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// CheckHost says what is wrong with h as a host name or IP address with
// an optional port (a pool's host, a heartbeat's addr), or "" when
// nothing is.
func CheckHost(h string) string { return checkHost(h) }

// checkHost accepts a host name or IP address with an optional port.
func checkHost(h string) string {
	if h == "" {
		return "must not be empty"
	}
	if len(h) > 260 {
		return "longer than 260 characters"
	}
	if strings.Contains(h, "://") {
		return fmt.Sprintf("%q is a URL; want a host name or IP address (with an optional :port)", h)
	}
	if maybeIP(h) { // else parsing fails (and allocates its error)
		if _, err := netip.ParseAddr(h); err == nil {
			return ""
		}
		if ap, err := netip.ParseAddrPort(h); err == nil {
			if ap.Port() == 0 {
				return fmt.Sprintf("%q: port must be 1..65535", h)
			}
			return ""
		}
	}
	name := h
	if i := strings.LastIndexByte(h, ':'); i >= 0 && isDigits(h[i+1:]) {
		if port, err := strconv.Atoi(h[i+1:]); err != nil || port < 1 || port > 65535 {
			return fmt.Sprintf("%q: port must be 1..65535", h)
		}
		name = h[:i]
	}
	if !isHostName(name) || len(name) > 253 {
		return fmt.Sprintf("%q is not a host name or IP address (with an optional :port)", h)
	}
	return ""
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func checkAttrs(errs *Errors, attrs map[string]string) {
	for k := range attrs {
		if k == "" || len(k) > 128 {
			errs.add("", "attrs", "attribute names must be 1..128 characters, got %q", k)
		}
	}
}

// normalize fills defaults and checks the pool on its own.
func (p *Pool) normalize() Errors {
	var errs Errors
	if len(p.Attrs) == 0 {
		p.Attrs = nil // as encoded (omitempty)
	}
	for k := range p.Extra {
		// The table JSON adds the computed "healthy" beside the extra
		// members (an exact "healthy" is left out): a case twin of it
		// would be what a reader matching names without case takes.
		if k != "healthy" && strings.EqualFold(k, "healthy") {
			errs.add("", k, "differs from the field %q the table adds only by case; refused (a reader matching names without case would take it for %q)", "healthy", "healthy")
		}
	}
	if msg := checkHost(p.Host); msg != "" {
		errs.add("", "host", "%s", msg)
	}
	switch p.Status {
	case "":
		p.Status = StatusActive
	case StatusActive, StatusDraining, StatusDown:
	default:
		errs.add("", "status", "must be active, draining or down, got %q", p.Status)
	}
	if !ValidLabel(p.Residency) {
		errs.add("", "residency", "must be a non-empty lower-case label (eu, us, apac, global…), got %q", p.Residency)
	}
	if p.Region != "" && !ValidLabel(p.Region) {
		errs.add("", "region", "must be a lower-case label, got %q", p.Region)
	}
	checkAttrs(&errs, p.Attrs)
	return errs
}

// checkTargets checks a target list: valid pool ids, no duplicates, weights
// 0..100 summing to 100 when the list is not empty.
func checkTargets(errs *Errors, targets []Target) {
	sum := 0
	seen := map[string]bool{}
	for i, t := range targets {
		f := func() string { return "targets[" + strconv.Itoa(i) + "]" } // only on error: no formatting on the change path
		if !ValidPoolID(t.Pool) {
			errs.add("", f()+".pool", "invalid pool id %q", t.Pool)
		} else if seen[t.Pool] {
			errs.add("", f()+".pool", "pool %s listed twice", t.Pool)
		}
		seen[t.Pool] = true
		if t.Weight < 0 || t.Weight > 100 {
			errs.add("", f()+".weight", "must be 0..100, got %d", t.Weight)
		}
		sum += t.Weight
	}
	if len(targets) > 0 && sum != 100 {
		errs.add("", "targets", "weights must sum to 100, got %d", sum)
	}
}

// normalize fills defaults and checks the route on its own; name is its
// route name.
func (r *Route) normalize(name string) Errors {
	var errs Errors
	if len(r.Targets) == 0 {
		r.Targets = nil // as encoded (omitempty)
	}
	if len(r.Fallback) == 0 {
		r.Fallback = nil
	}
	if len(r.Attrs) == 0 {
		r.Attrs = nil
	}
	checkTargets(&errs, r.Targets)
	seen := map[string]bool{}
	for i, f := range r.Fallback {
		field := func() string { return "fallback[" + strconv.Itoa(i) + "]" }
		switch {
		case !ValidRouteName(f):
			errs.add("", field(), "invalid route name %q", f)
		case f == name:
			errs.add("", field(), "route falls back to itself")
		case seen[f]:
			errs.add("", field(), "%s listed twice", f)
		}
		seen[f] = true
	}
	switch r.Affinity {
	case "":
		r.Affinity = AffinitySticky
	case AffinitySticky, AffinityRandom:
	default:
		errs.add("", "affinity", "must be sticky or random, got %q", r.Affinity)
	}
	checkAttrs(&errs, r.Attrs)
	return errs
}

// normalize fills defaults and checks the policy on its own.
func (p *Residency) normalize() Errors {
	var errs Errors
	if p.Classes == nil {
		p.Classes = DefaultResidency().Classes
	}
	if p.UnknownCountryClass == "" {
		p.UnknownCountryClass = "eu"
	}
	if !ValidLabel(p.UnknownCountryClass) {
		errs.add("", "unknown_country_class", "must be a lower-case label, got %q", p.UnknownCountryClass)
	}
	owner := map[string]string{}
	for _, class := range sortedKeys(p.Classes) { // sorted: the same errors every time
		ccs := p.Classes[class]
		if !ValidLabel(class) {
			errs.add("", "classes", "class name %q must be a lower-case label", class)
		}
		for i, cc := range ccs {
			field := fmt.Sprintf("classes.%s[%d]", class, i)
			if !IsCountry(cc) {
				errs.add("", field, "%q is not an ISO 3166-1 alpha-2 code in upper case%s", cc, CountryHint(cc))
			} else if prev, dup := owner[cc]; dup && prev != class {
				errs.add("", field, "%s is already in class %s", cc, prev)
			}
			owner[cc] = class
		}
	}
	return errs
}

// normalize checks the override on its own.
func (o *Override) normalize() Errors {
	var errs Errors
	if len(o.Targets) == 0 {
		o.Targets = nil // as encoded (omitempty)
	}
	if len(o.Attrs) == 0 {
		o.Attrs = nil
	}
	if !ValidRouteName(o.Route) {
		errs.add("", "route", "invalid route name %q", o.Route)
	}
	checkTargets(&errs, o.Targets)
	if len(o.Targets) == 0 && len(o.Attrs) == 0 {
		errs.add("", "", "an override must set targets or attrs")
	}
	checkAttrs(&errs, o.Attrs)
	if o.ExpiresAt != "" {
		if _, err := time.Parse(time.RFC3339, o.ExpiresAt); err != nil {
			errs.add("", "expires_at", "not an RFC 3339 time: %q", o.ExpiresAt)
		}
	}
	return errs
}

// EncodeValue returns the compact JSON stored for a value.
func EncodeValue(v Value) ([]byte, error) {
	if n, ok := v.(int64); ok {
		return []byte(strconv.FormatInt(n, 10)), nil
	}
	return json.Marshal(v)
}

// typeMessage says that a value of the wrong type was found where want
// was expected, in words that fit a YAML file as well as a stored JSON
// value: what was found, its text for a number or a string, and how to
// write it when only the quotes are wrong.
func typeMessage(want string, raw []byte) string {
	switch kind := jsonKind(raw); kind {
	case "number":
		msg := fmt.Sprintf("expected %s, got the number %s", want, truncate(raw))
		if want == "a string" {
			msg += fmt.Sprintf(` (quote it: "%s")`, truncate(raw))
		}
		return msg
	case "string":
		msg := fmt.Sprintf("expected %s, got the string %s", want, truncate(raw))
		if s := string(raw[1 : len(raw)-1]); want == "an integer" && isDigits(s) ||
			want == "true or false" && (s == "true" || s == "false") {
			msg += " (write it without quotes)"
		}
		return msg
	case "object", "list":
		return fmt.Sprintf("expected %s, got %s %s", want, article(kind), kind)
	default:
		return fmt.Sprintf("expected %s, got %s", want, truncate(raw))
	}
}

// article is "an" before "object", else "a".
func article(noun string) string {
	if noun == "object" {
		return "an"
	}
	return "a"
}

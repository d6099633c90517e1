package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/regiond/regiond/routing"
)

// describeChange renders one change for people:
//
//	PL: targets eu-central 70→60, eu-west 30→40
//	pool eu-central: status active→draining
//
// A side whose value does not decode (a refused proposal, a hand-broken
// stored value) is shown as invalid with why, never as an absent side: a
// refused write must not read as a removal, nor the repair of a broken key
// as an addition.
func describeChange(c routing.Change) string {
	k, err := routing.ParseKey(c.Key)
	if err != nil {
		return fmt.Sprintf("%s: %s", c.Key, c.Op)
	}
	before, beforeErr := decodeSide(c.Key, c.Before)
	after, afterErr := decodeSide(c.Key, c.After)
	name := subject(k)
	switch {
	case afterErr != nil && beforeErr != nil:
		return fmt.Sprintf("%s: invalid value: %s (the stored value was invalid too: %s)", name, invalidWhy(afterErr), invalidWhy(beforeErr))
	case afterErr != nil:
		return fmt.Sprintf("%s: invalid value: %s", name, invalidWhy(afterErr))
	case beforeErr != nil && after == nil:
		return fmt.Sprintf("%s: removed (the stored value was invalid: %s)", name, invalidWhy(beforeErr))
	case beforeErr != nil:
		return fmt.Sprintf("%s: invalid value replaced (was: %s; now %s)", name, invalidWhy(beforeErr), strings.Join(summary(after), "; "))
	case before == nil && after == nil:
		return fmt.Sprintf("%s: %s", name, c.Op)
	case before == nil:
		return fmt.Sprintf("%s: added (%s)", name, strings.Join(summary(after), "; "))
	case after == nil:
		return fmt.Sprintf("%s: removed", name)
	}
	fields := fieldDiff(before, after)
	if len(fields) == 0 && k.Kind == routing.KindOverride {
		return fmt.Sprintf("%s: new lease", name)
	}
	if len(fields) == 0 {
		return fmt.Sprintf("%s: rewritten (same meaning)", name)
	}
	return fmt.Sprintf("%s: %s", name, strings.Join(fields, "; "))
}

// subject names the object of a key the way operators say it.
func subject(k routing.Key) string {
	switch k.Kind {
	case routing.KindPool:
		return "pool " + k.ID
	case routing.KindRoute:
		return k.ID
	case routing.KindPolicy:
		return "policy residency"
	case routing.KindOverride:
		return "boost " + k.ID
	case routing.KindHealth:
		return "health " + k.ID + "/" + k.Instance
	}
	return k.String()
}

// decodeSide decodes one side of a change: nil, nil when absent; an error
// when present but invalid (it does not decode or fails the value's own
// checks).
func decodeSide(rel string, raw json.RawMessage) (routing.Value, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	// The audit trail holds a stored value that is not JSON as a JSON
	// string (no valid value is one): decode the bytes it stands for, so
	// that the reason names what was stored.
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		raw = json.RawMessage(s)
	}
	v, err := routing.DecodeValue(rel, raw)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", rel, err)
	}
	return v, nil
}

// invalidWhy renders why a value is invalid without its key, which the
// diff line already names: "targets: weights must sum to 100, got 50".
func invalidWhy(err error) string {
	var es routing.Errors
	if !errors.As(err, &es) || len(es) == 0 {
		return err.Error()
	}
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = (&routing.FieldError{Field: e.Field, Msg: e.Msg}).Error()
	}
	return strings.Join(parts, "; ")
}

// summary lists the fields of a new value.
func summary(v routing.Value) []string {
	switch x := v.(type) {
	case *routing.Pool:
		s := []string{"host " + x.Host, "residency " + x.Residency, "status " + x.Status}
		if x.Region != "" {
			s = append(s, "region "+x.Region)
		}
		if x.HealthCheck {
			s = append(s, "health_check")
		}
		if len(x.Attrs) > 0 {
			s = append(s, "attrs "+kvList(x.Attrs))
		}
		return s
	case *routing.Route:
		s := []string{"targets " + targetList(x.Targets)}
		if len(x.Fallback) > 0 {
			s = append(s, "fallback "+strings.Join(x.Fallback, " "))
		}
		if x.Affinity != "" && x.Affinity != routing.AffinitySticky { // sticky: the default
			s = append(s, "affinity "+x.Affinity)
		}
		if len(x.Attrs) > 0 {
			s = append(s, "attrs "+kvList(x.Attrs))
		}
		return s
	case *routing.Override:
		s := []string{"on " + x.Route, "targets " + targetList(x.Targets), "attrs " + kvList(x.Attrs)}
		if x.ExpiresAt != "" {
			s = append(s, "until "+x.ExpiresAt)
		}
		return s
	case *routing.Residency:
		return []string{fmt.Sprintf("%d classes", len(x.Classes)), "unknown_country_class " + x.UnknownCountryClass}
	}
	return nil
}

func targetList(ts []routing.Target) string {
	if len(ts) == 0 {
		return "-"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%s %d", t.Pool, t.Weight)
	}
	return strings.Join(parts, ", ")
}

// fieldDiff lists the changed fields of two values of the same kind.
func fieldDiff(before, after routing.Value) []string {
	var out []string
	add := func(field, b, a string) {
		if b != a {
			rb, ra := distinct(orNone(b), orNone(a), &b, &a)
			out = append(out, fmt.Sprintf("%s %s→%s", field, rb, ra))
		}
	}
	switch b := before.(type) {
	case *routing.Pool:
		a := after.(*routing.Pool)
		add("status", b.Status, a.Status)
		add("host", b.Host, a.Host)
		add("residency", b.Residency, a.Residency)
		add("region", b.Region, a.Region)
		add("health_check", fmt.Sprint(b.HealthCheck), fmt.Sprint(a.HealthCheck))
		out = append(out, attrDiff(b.Attrs, a.Attrs)...)
	case *routing.Route:
		a := after.(*routing.Route)
		if t := targetDiff(b.Targets, a.Targets); t != "" {
			out = append(out, "targets "+t)
		}
		add("fallback", strings.Join(b.Fallback, " "), strings.Join(a.Fallback, " "))
		add("affinity", b.Affinity, a.Affinity)
		out = append(out, attrDiff(b.Attrs, a.Attrs)...)
	case *routing.Override:
		a := after.(*routing.Override)
		add("route", b.Route, a.Route)
		if t := targetDiff(b.Targets, a.Targets); t != "" {
			out = append(out, "targets "+t)
		}
		out = append(out, attrDiff(b.Attrs, a.Attrs)...)
		add("expires_at", b.ExpiresAt, a.ExpiresAt)
	case *routing.Residency:
		out = append(out, residencyDiff(b, after.(*routing.Residency))...)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// targetDiff renders weight changes: "eu-central 70→60, eu-west 30→40";
// added and removed pools show none on their missing side.
func targetDiff(before, after []routing.Target) string {
	bw := map[string]int{}
	for _, t := range before {
		bw[t.Pool] = t.Weight
	}
	aw := map[string]bool{}
	var parts []string
	for _, t := range after {
		aw[t.Pool] = true
		if w, ok := bw[t.Pool]; !ok {
			parts = append(parts, fmt.Sprintf("%s none→%d", t.Pool, t.Weight))
		} else if w != t.Weight {
			parts = append(parts, fmt.Sprintf("%s %d→%d", t.Pool, w, t.Weight))
		}
	}
	for _, t := range before {
		if !aw[t.Pool] {
			parts = append(parts, fmt.Sprintf("%s %d→none", t.Pool, t.Weight))
		}
	}
	if len(parts) == 0 && !slices.EqualFunc(before, after, func(a, b routing.Target) bool { return a.Pool == b.Pool && a.Weight == b.Weight }) {
		return "reordered " + targetList(after)
	}
	return strings.Join(parts, ", ")
}

// attrDiff renders "attrs.lang pl→en" per changed attribute, in key order.
func attrDiff(before, after map[string]string) []string {
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []string
	for _, k := range sorted {
		b, bok := before[k]
		a, aok := after[k]
		if bok && aok && a == b {
			continue
		}
		rb, ra := "none", "none"
		var bp, ap *string
		if bok {
			rb, bp = quoteEmpty(b), &b
		}
		if aok {
			ra, ap = quoteEmpty(a), &a
		}
		rb, ra = distinct(rb, ra, bp, ap)
		out = append(out, fmt.Sprintf("attrs.%s %s→%s", k, rb, ra))
	}
	return out
}

// distinct returns the two sides of a change, rb and ra as rendered (none
// for an absent or empty field), so that they can be told apart once
// printed: as they are, unless they print alike (control characters
// escaped as the terminal is shown them: a stored ESC against the text
// \x1b a file wrote; an empty field against the text none), then the
// values present, b and a (nil: absent), Go-quoted:
// `"x\x1b[31my"→"x\\x1b[31my"`, `none→"none"`, never a change shown as X→X.
func distinct(rb, ra string, b, a *string) (string, string) {
	if cellText(rb) != cellText(ra) {
		return rb, ra
	}
	if b != nil {
		rb = strconv.Quote(*b)
	}
	if a != nil {
		ra = strconv.Quote(*a)
	}
	return rb, ra
}

// quoteEmpty renders an attr's value present but empty as "".
func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// residencyDiff renders countries moved between classes.
func residencyDiff(b, a *routing.Residency) []string {
	var out []string
	if b.UnknownCountryClass != a.UnknownCountryClass {
		out = append(out, fmt.Sprintf("unknown_country_class %s→%s", b.UnknownCountryClass, a.UnknownCountryClass))
	}
	classes := map[string]bool{}
	for c := range b.Classes {
		classes[c] = true
	}
	for c := range a.Classes {
		classes[c] = true
	}
	names := make([]string, 0, len(classes))
	for c := range classes {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		added, removed := setDiff(a.Classes[c], b.Classes[c]), setDiff(b.Classes[c], a.Classes[c])
		if len(added) > 0 {
			out = append(out, fmt.Sprintf("class %s +%s", c, strings.Join(added, " +")))
		}
		if len(removed) > 0 {
			out = append(out, fmt.Sprintf("class %s -%s", c, strings.Join(removed, " -")))
		}
	}
	return out
}

// setDiff returns the members of xs not in ys, sorted.
func setDiff(xs, ys []string) []string {
	in := map[string]bool{}
	for _, y := range ys {
		in[y] = true
	}
	var out []string
	for _, x := range xs {
		if !in[x] {
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

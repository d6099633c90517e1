package routing

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/regiond/regiond/internal/didyoumean"
)

// unknownFieldMsg is the error of an unknown field at path ("residncy",
// "targets[0].wieght") in a config file's value of key rel: with the
// nearest field the value's type has at that place, when one is near
// ("did you mean residency?").
func unknownFieldMsg(rel, path string) string {
	if near := nearestField(rel, path); near != "" {
		return fmt.Sprintf("unknown field (did you mean %s?)", near)
	}
	return "unknown field"
}

// nearestField returns the field of the object at path's parent nearest
// to path's last name, within an edit distance of a third of its length
// (at least 1, at most 3); "" when none is.
func nearestField(rel, path string) string {
	k, err := ParseKey(rel)
	if err != nil {
		return ""
	}
	var t reflect.Type
	switch k.Kind {
	case KindPool:
		t = reflect.TypeOf(Pool{})
	case KindRoute:
		t = reflect.TypeOf(Route{})
	case KindPolicy:
		t = reflect.TypeOf(Residency{})
	case KindOverride:
		t = reflect.TypeOf(Override{})
	case KindHealth:
		t = reflect.TypeOf(Health{})
	default:
		return ""
	}
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		if i := strings.IndexByte(p, '['); i >= 0 {
			p = p[:i]
		}
		f, ok := fieldByTag(t, p)
		if !ok {
			return ""
		}
		t = f.Type
		for t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return ""
		}
	}
	name := parts[len(parts)-1]
	best, bestD := "", min(max(len(name)/3, 1), 3)+1
	for i := 0; i < t.NumField(); i++ {
		tag := jsonName(t.Field(i))
		if tag == "" {
			continue
		}
		if d := didyoumean.Distance(strings.ToLower(name), tag); d < bestD {
			best, bestD = tag, d
		}
	}
	return best
}

// fieldByTag returns the field of struct t whose JSON name is name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		if jsonName(t.Field(i)) == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// jsonName is a field's JSON name; "" for one not encoded.
func jsonName(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if tag == "-" || !f.IsExported() {
		return ""
	}
	if tag == "" {
		return f.Name
	}
	return tag
}

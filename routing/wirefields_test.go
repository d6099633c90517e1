package routing

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// wireNames returns the names and per-field codecs of a field list.
func wireNames[T any](fields []wireField[T]) (names []string, dec, enc []bool) {
	for _, f := range fields {
		names = append(names, f.name)
		dec, enc = append(dec, f.dec != nil), append(enc, f.enc != nil)
	}
	return names, dec, enc
}

// jsonMembers derives a struct's JSON members from its fields by
// reflection, in order, and whether each is omitempty; Extra and
// unexported fields are not members.
func jsonMembers(typ reflect.Type) (names []string, omit []bool) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
		omit = append(omit, slices.Contains(strings.Split(opts, ","), "omitempty"))
	}
	return names, omit
}

// TestWireFieldsMatchStructs: every JSON member of a stored type has a
// decoder in its field list, and every member of a rendered type an
// encoder, in the struct's order (encoding/json's), with the struct's
// omitempty; a field added to a struct without its codec fails here.
func TestWireFieldsMatchStructs(t *testing.T) {
	type codec struct {
		typ              reflect.Type
		names            []string
		dec, enc         []bool
		decoded, encoded bool
		omitEmpty        bool // what appendObjectOf is called with
	}
	mk := func(typ reflect.Type, names []string, dec, enc []bool, decoded, encoded, omit bool) codec {
		return codec{typ, names, dec, enc, decoded, encoded, omit}
	}
	var cs []codec
	{
		n, d, e := wireNames(poolFields)
		// Pool's encoder is appendPoolJSON, not its list: checked field by
		// field against encoding/json by TestAppendPoolJSONEncodesEveryField.
		cs = append(cs, mk(reflect.TypeOf(Pool{}), n, d, e, true, false, false))
		n, d, e = wireNames(targetFields)
		cs = append(cs, mk(reflect.TypeOf(Target{}), n, d, e, true, true, false))
		n, d, e = wireNames(routeFields)
		cs = append(cs, mk(reflect.TypeOf(Route{}), n, d, e, true, true, true))
		n, d, e = wireNames(residencyFields)
		cs = append(cs, mk(reflect.TypeOf(Residency{}), n, d, e, true, false, false))
		n, d, e = wireNames(overrideFields)
		cs = append(cs, mk(reflect.TypeOf(Override{}), n, d, e, true, false, false))
		n, d, e = wireNames(healthFields)
		cs = append(cs, mk(reflect.TypeOf(Health{}), n, d, e, true, false, false))
		n, d, e = wireNames(effectiveFields)
		cs = append(cs, mk(reflect.TypeOf(Effective{}), n, d, e, false, true, false))
		n, d, e = wireNames(candidateFields)
		cs = append(cs, mk(reflect.TypeOf(Candidate{}), n, d, e, false, true, false))
	}
	for _, c := range cs {
		want, omit := jsonMembers(c.typ)
		if !slices.Equal(c.names, want) {
			t.Errorf("%s: field list %v, the struct's JSON members are %v", c.typ.Name(), c.names, want)
			continue
		}
		for i, name := range want {
			if c.decoded && !c.dec[i] {
				t.Errorf("%s.%s: no decoder in its field list", c.typ.Name(), name)
			}
			if c.encoded && !c.enc[i] {
				t.Errorf("%s.%s: no encoder in its field list", c.typ.Name(), name)
			}
			if c.encoded && omit[i] != c.omitEmpty {
				t.Errorf("%s.%s: omitempty %v, but the type is encoded with omitEmpty %v", c.typ.Name(), name, omit[i], c.omitEmpty)
			}
		}
	}
}

package routing

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/regiond/regiond/internal/testfill"
)

// TestAppendPoolJSONMatchesMarshal: the table's pool encoder writes what
// encoding/json writes for the same pool (the reference), byte for byte:
// optional fields empty and set, attrs in key order, characters
// encoding/json escapes (HTML, control, U+2028, invalid UTF-8), extra
// members with spaces in them, an extra "healthy" overridden.
func TestAppendPoolJSONMatchesMarshal(t *testing.T) {
	odd := "a<b>&\"\\\x01\u2028é\xff"
	pools := map[string]Pool{
		"minimal":       {Host: "h", Residency: "eu", Status: "active"},
		"all fields":    {Host: "fra.example.net", Region: "eu-central", Residency: "eu", Status: "draining", HealthCheck: true, Attrs: map[string]string{"z": "1", "a": "2", "m": ""}},
		"empty attrs":   {Host: "h", Residency: "eu", Status: "active", Attrs: map[string]string{}},
		"escapes":       {Host: odd, Region: odd, Residency: odd, Status: odd, Attrs: map[string]string{odd: odd}},
		"extra":         {Host: "h", Residency: "eu", Status: "active", Extra: Extra{"zeta": json.RawMessage(` { "x" : [1, 2] } `), "alpha": json.RawMessage(`"s"`)}},
		"extra healthy": {Host: "h", Residency: "eu", Status: "active", Extra: Extra{"healthy": json.RawMessage(`"no"`), "b": json.RawMessage(`1`)}},
	}
	for name, p := range pools {
		checkPoolJSON(t, name, p)
	}
}

// TestAppendPoolJSONEncodesEveryField: a pool whose every field (and every
// field of the values in it) is set by reflection, then each field in turn
// left empty, encodes as encoding/json encodes it, and decodes back to
// itself. The pool encoder is written out for speed rather than run from
// poolFields, so a field added to Pool (and to poolFields) but not to
// appendPoolJSON fails here instead of vanishing from the table JSON.
func TestAppendPoolJSONEncodesEveryField(t *testing.T) {
	var full Pool
	testfill.NonZero(t, reflect.ValueOf(&full).Elem(), "Pool", skipExtra)
	pools := map[string]Pool{"every field set": full}
	typ := reflect.TypeOf(full)
	for i := range typ.NumField() {
		if f := typ.Field(i); f.IsExported() && f.Type != reflect.TypeOf(Extra{}) {
			p := full
			reflect.ValueOf(&p).Elem().Field(i).SetZero()
			pools[f.Name+" empty"] = p
		}
	}
	withExtra := full
	withExtra.Extra = Extra{"healthy": json.RawMessage(`"no"`), "zz": json.RawMessage(`[1]`), "aa": json.RawMessage(`{}`)}
	pools["every field set, extra members"] = withExtra
	for name, p := range pools {
		checkPoolJSON(t, name, p)
	}

	js, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var back Pool
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatalf("decode %s: %v", js, err)
	}
	if !reflect.DeepEqual(back, full) {
		t.Errorf("decoded %s as %+v, want %+v", js, back, full)
	}
}

// checkPoolJSON compares appendPoolJSON with encoding/json's encoding of
// the table's pool member (poolJSON), healthy and not.
func checkPoolJSON(t *testing.T, name string, p Pool) {
	t.Helper()
	for _, healthy := range []bool{true, false} {
		want, err := json.Marshal(poolJSON{Pool: p, Healthy: healthy})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendPoolJSON(nil, &p, healthy); string(got) != string(want) {
			t.Errorf("%s (healthy %v):\n got %s\nwant %s", name, healthy, got, want)
		}
	}
}

// skipExtra leaves a struct's Extra (unknown members) out of testfill.NonZero.
func skipExtra(f reflect.StructField) bool { return f.Type == reflect.TypeOf(Extra{}) }

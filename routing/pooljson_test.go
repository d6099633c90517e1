package routing

import (
	"encoding/json"
	"testing"
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
}

package routing

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestEffectiveJSONMatchesEncodingJSON: the hand-written encoder makes
// exactly encoding/json's bytes, for the example fleet's entries and for
// random entries with awkward strings (quotes, controls, HTML characters,
// U+2028, invalid UTF-8) and nil members.
func TestEffectiveJSONMatchesEncodingJSON(t *testing.T) {
	check := func(e *Effective) {
		t.Helper()
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendEffectiveJSON(nil, e); !bytes.Equal(got, want) {
			t.Fatalf("entry %+v:\n got %s\nwant %s", e, got, want)
		}
	}
	tb := Compile(1, kvsOf(t, exampleConfig(t)), nil, CompileOptions{Now: t0})
	for _, e := range tb.eff {
		check(e)
	}
	check(&Effective{})
	rng := rand.New(rand.NewPCG(5, 6))
	pieces := []string{"a", "eu-west", `"`, `\`, "<", ">", "&", "\n", "\t", "\x00", "\x1f", "é", "\u2028", "\u2029", "\xff", "日本", " ", "/", "\x7f"}
	str := func() string {
		var s string
		for n := rng.IntN(5); n > 0; n-- {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	for i := 0; i < 5000; i++ {
		e := &Effective{Route: str(), FallbackDepth: rng.IntN(70), Affinity: str()}
		if rng.IntN(4) > 0 {
			e.Candidates = []Candidate{}
			for n := rng.IntN(4); n > 0; n-- {
				e.Candidates = append(e.Candidates, Candidate{Pool: str(), Host: str(), Weight: rng.IntN(101)})
			}
		}
		if rng.IntN(4) > 0 {
			e.Attrs = map[string]string{}
			for n := rng.IntN(5); n > 0; n-- {
				e.Attrs[str()] = str()
			}
		}
		if rng.IntN(4) > 0 {
			e.Degraded = []string{}
			for n := rng.IntN(3); n > 0; n-- {
				e.Degraded = append(e.Degraded, str())
			}
		}
		check(e)
	}
}

// TestRouteJSONMatchesEncodingJSON: the hand-written route encoder makes
// exactly encoding/json's bytes (Route.MarshalJSON), with and without
// unknown fields and empty members.
func TestRouteJSONMatchesEncodingJSON(t *testing.T) {
	check := func(r *Route) {
		t.Helper()
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendRouteJSON(nil, r); !bytes.Equal(got, want) {
			t.Fatalf("route %+v:\n got %s\nwant %s", r, got, want)
		}
	}
	cfg := exampleConfig(t)
	for _, r := range cfg.Routes {
		check(&r)
	}
	check(&Route{})
	rng := rand.New(rand.NewPCG(11, 12))
	pieces := []string{"a", "eu-west", `"`, `\`, "<", "&", "\n", "\x01", "é", "\u2028", "\xff", " "}
	str := func() string {
		var s string
		for n := rng.IntN(4); n > 0; n-- {
			s += pieces[rng.IntN(len(pieces))]
		}
		return s
	}
	for i := 0; i < 5000; i++ {
		r := &Route{Affinity: str()}
		for n := rng.IntN(3); n > 0; n-- {
			r.Targets = append(r.Targets, Target{Pool: str(), Weight: rng.IntN(101)})
		}
		if rng.IntN(3) == 0 {
			r.Targets = []Target{}
		}
		for n := rng.IntN(3); n > 0; n-- {
			r.Fallback = append(r.Fallback, str())
		}
		if rng.IntN(2) == 0 {
			r.Attrs = map[string]string{}
			for n := rng.IntN(3); n > 0; n-- {
				r.Attrs[str()] = str()
			}
		}
		if rng.IntN(5) == 0 {
			r.Extra = Extra{"zz": json.RawMessage(`{"a":1}`)}
		}
		check(r)
	}
}

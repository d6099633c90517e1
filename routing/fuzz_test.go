package routing

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// The fuzz targets' seed corpora are in testdata/fuzz/<FuzzName>/. Run one
// with, e.g., go test ./routing -run '^$' -fuzz '^FuzzParseConfig$' -fuzztime 1m

// FuzzDecodeValue: no input panics; a value that decodes re-encodes to
// something that decodes to the same value.
func FuzzDecodeValue(f *testing.F) {
	f.Add("routes/PL", []byte(`{"targets":[{"pool":"eu-central","weight":70},{"pool":"eu-west","weight":30}],"fallback":["eu-general"],"attrs":{"lang":"pl"}}`))
	f.Add("pools/eu-central", []byte(`{"host":"edge-fra-1.example.net:443","residency":"eu","status":"active","health_check":true,"x":{"y":[1]}}`))
	f.Add("policy/residency", []byte(`{"classes":{"eu":["PL","NO"]},"unknown_country_class":"eu"}`))
	f.Add("overrides/kr", []byte(`{"route":"KR","targets":[{"pool":"kr-music","weight":100}],"attrs":{}}`))
	f.Add("health/eu-central/i-1", []byte(`{"addr":"10.0.0.1:443","since":"2026-03-01T12:00:00Z"}`))
	f.Add("epoch", []byte(`42`))
	f.Fuzz(func(t *testing.T, key string, raw []byte) {
		v, err := DecodeValue(key, raw)
		if err != nil {
			if v != nil {
				t.Fatalf("value %#v with error %v", v, err)
			}
			if !strings.Contains(err.Error(), key) && !strings.Contains(err.Error(), strconv.Quote(key)) {
				t.Fatalf("error %q does not name key %q", err, key)
			}
			return
		}
		b, err := EncodeValue(v)
		if err != nil {
			t.Fatalf("encode %#v: %v", v, err)
		}
		v2, err := DecodeValue(key, b)
		if err != nil {
			t.Fatalf("re-encoded value %s does not decode: %v", b, err)
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip changed the value:\n %#v\n %#v", v, v2)
		}
	})
}

// FuzzNormalizeCountry: the result is always an assigned code or Unknown,
// normalizing is idempotent and ignores case and surrounding blanks.
func FuzzNormalizeCountry(f *testing.F) {
	for _, s := range []string{"PL", "pl", " PL ", "XX", "T1", "", "no", "Pł", "\tde\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cc := NormalizeCountry(s)
		if cc != Unknown && !IsCountry(cc) {
			t.Fatalf("NormalizeCountry(%q) = %q", s, cc)
		}
		if NormalizeCountry(cc) != cc && cc != Unknown {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, cc, NormalizeCountry(cc))
		}
		if up := NormalizeCountry(" " + strings.ToUpper(s) + "\t"); strings.ToUpper(s) == strings.ToLower(s) || up == cc {
			// same answer, or s has letters whose case mapping is not ASCII
		} else if isASCII(s) {
			t.Fatalf("case changes the answer: %q -> %q, upper -> %q", s, cc, up)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// FuzzParseConfig: no input panics; an accepted config validates without
// panicking, survives export and re-parse unchanged, and compiles to a
// table that resolves.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(minimalYAML))
	f.Add([]byte("pools: {p: {host: h, residency: eu}}\nroutes: {_default: {targets: [{pool: p, weight: 100}]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("config with error")
			}
			return
		}
		errs := Validate(cfg)
		y, err := cfg.YAML()
		if err != nil {
			t.Fatalf("export: %v", err)
		}
		back, err := ParseConfig(y)
		if err != nil {
			t.Fatalf("exported config does not parse: %v\n%s", err, y)
		}
		if !reflect.DeepEqual(cfg, back) {
			t.Fatalf("export round trip changed the config:\n%s", y)
		}
		if !reflect.DeepEqual(errs, Validate(back)) {
			t.Fatalf("validation differs after export")
		}
		tbl, err := CompileConfig(cfg, nil, CompileOptions{Now: t0})
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		for _, cc := range []string{"PL", "US", "NO", "XX"} {
			d, err := tbl.Resolve(cc, "k", t0)
			if err == nil && len(errs) == 0 {
				if p, _ := tbl.Pool(d.Pool); tbl.ClassOf(d.Country) != "" && p.Residency != tbl.ClassOf(d.Country) {
					t.Fatalf("residency violated for %s", cc)
				}
			}
			tbl.Explain(cc, "", t0)
		}
	})
}

// FuzzLoadTableJSON: no snapshot file panics the loader; a loaded table
// resolves every country and writes JSON that loads again.
func FuzzLoadTableJSON(f *testing.F) {
	tbl := Compile(3, smallStore.kvs(nil), nil, CompileOptions{Now: t0})
	b, err := tbl.JSON(t0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	if b, err = tbl.JSONWith(nil, JSONHeader{WrittenAt: t0, SyncedAt: t0.Add(-time.Minute)}); err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"written_at":"2026-03-01T12:00:00Z","pools":{},"routes":{},"policy":{"residency":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tbl, h, err := LoadTableJSONHeader(b)
		if err != nil {
			return
		}
		for _, cc := range append([]string{"", "XX"}, Countries()...) {
			tbl.Resolve(cc, "k", t0)
			tbl.Resolve(cc, "", t0.Add(time.Hour))
		}
		tbl.Explain("PL", "k", t0)
		out, err := tbl.JSONWith(nil, h)
		if err != nil {
			t.Fatalf("JSON: %v", err)
		}
		if _, back, err := LoadTableJSONHeader(out); err != nil {
			t.Fatalf("reload: %v\n%s", err, out)
		} else if !back.WrittenAt.Equal(h.WrittenAt) || !back.SyncedAt.Equal(h.SyncedAt) {
			t.Fatalf("reload: header %+v, want %+v", back, h)
		}
	})
}

// FuzzStickyHash: the unrolled sticky hash equals xxh64 of
// key + "\x00" + pool, and PickSticky picks the lowest StickyScore.
func FuzzStickyHash(f *testing.F) {
	f.Add("abc", "eu-central", uint8(70), uint8(30))
	f.Add("0d6c3b2e-8f0a-4a8e-9d5e-2b1f7c9a4e61", "apac-singapore", uint8(1), uint8(99))
	f.Fuzz(func(t *testing.T, key, pool string, w1, w2 uint8) {
		var s stickyKey
		s.init(key)
		want := xxhash.Sum64String(key + "\x00" + pool)
		if got := s.sum(pool); got != want {
			t.Fatalf("%q %q: %x, want %x", key, pool, got, want)
		}
		if p := newPoolPad(pool); p != nil {
			if got := s.sumPadded(pool, p); got != want {
				t.Fatalf("padded %q %q: %x, want %x", key, pool, got, want)
			}
		}
		cs := []Candidate{{Pool: pool, Weight: int(w1 % 101)}, {Pool: pool + "-b", Weight: int(w2 % 101)}, {Pool: "x", Weight: 10}}
		best, bestScore := -1, 0.0
		for i, c := range cs {
			if c.Weight == 0 {
				continue
			}
			if sc := StickyScore(key, c.Pool, c.Weight); best < 0 || sc < bestScore || (sc == bestScore && c.Pool < cs[best].Pool) {
				best, bestScore = i, sc
			}
		}
		if got := PickSticky(cs, key); got != best {
			t.Fatalf("PickSticky %d, argmin %d", got, best)
		}
	})
}

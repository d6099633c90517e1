package cli

import (
	"strings"
	"testing"

	"github.com/regiond/regiond/routing"
)

// TestDiffTellsApartValuesThatPrintAlike: a stored ESC and the text \x1b
// (what a file or a flag wrote) print alike once the terminal's escaping
// is applied, so a diff line showed a real change as X→X (the export
// review). Such sides are shown Go-quoted, and the two differ as printed.
func TestDiffTellsApartValuesThatPrintAlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed()
	e.must(ExitOK, "route", "set", "PL", "--attr", "esc=x\x1b[31my")
	r := e.must(ExitOK, "route", "set", "PL", "--attr", `esc=x\x1b[31my`)
	line := strings.SplitN(r.stdout, "\n", 2)[0]
	if want := `PL: attrs.esc "x\x1b[31my"→"x\\x1b[31my"`; line != want {
		t.Errorf("the diff of an ESC replaced by the text \\x1b: %q, want %q", line, want)
	}

	// A field as an attr: both sides quoted only when they print alike.
	got := fieldDiff(&routing.Pool{Region: "a\x1bb"}, &routing.Pool{Region: `a\x1bb`})
	if len(got) != 1 || got[0] != `region "a\x1bb"→"a\\x1bb"` {
		t.Errorf("fieldDiff of regions printing alike: %q", got)
	}
	if got := fieldDiff(&routing.Pool{Region: "a\x1bb"}, &routing.Pool{Region: "ab"}); len(got) != 1 || got[0] != "region a\x1bb→ab" {
		t.Errorf("fieldDiff of regions printing apart: %q, want them as they are", got)
	}
}

// TestDiffTellsApartNoneFromNothing: an empty or absent side is shown as
// none, so the text none against an empty field printed none→none (the
// second read); the present side is then Go-quoted.
func TestDiffTellsApartNoneFromNothing(t *testing.T) {
	for _, tc := range []struct {
		before, after map[string]string
		want          string
	}{
		{map[string]string{"tier": "none"}, nil, `attrs.tier "none"→none`},
		{nil, map[string]string{"tier": "none"}, `attrs.tier none→"none"`},
		{map[string]string{"q": `""`}, map[string]string{"q": ""}, `attrs.q "\"\""→""`},
		{map[string]string{"q": "a"}, map[string]string{"q": ""}, `attrs.q a→""`},
	} {
		if got := attrDiff(tc.before, tc.after); len(got) != 1 || got[0] != tc.want {
			t.Errorf("attrDiff(%q, %q) = %q, want %q", tc.before, tc.after, got, tc.want)
		}
	}
	if got := fieldDiff(&routing.Pool{Region: ""}, &routing.Pool{Region: "none"}); len(got) != 1 || got[0] != `region ""→"none"` {
		t.Errorf("fieldDiff of an empty region and the text none: %q", got)
	}
	if got := fieldDiff(&routing.Pool{Region: ""}, &routing.Pool{Region: "eu"}); len(got) != 1 || got[0] != "region none→eu" {
		t.Errorf("fieldDiff of an empty region and eu: %q", got)
	}
}

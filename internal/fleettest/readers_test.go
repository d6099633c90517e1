package fleettest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// goSweep is what a reader that decides exactly as Go would print for
// headers × (no key, keys) on tab: SweepLines built from routing.Table.Resolve.
func goSweep(t *testing.T, tab *routing.Table, now time.Time, headers, keys []string) []byte {
	t.Helper()
	var out []byte
	for _, h := range headers {
		var l SweepLine
		seen := map[string]int{}
		for k := -1; k < len(keys); k++ {
			key := ""
			if k >= 0 {
				key = keys[k]
			}
			d, err := tab.Resolve(h, key, now)
			if err != nil && !errors.Is(err, routing.ErrNoRoute) {
				t.Fatal(err)
			}
			// Go's decisions of one header differ only by pool.
			i, ok := seen[d.Pool]
			if !ok {
				o := Outcome{OK: true}
				if err != nil {
					body, _ := json.Marshal(noRouteBody{"no eligible pool", "no_route", d.Country, d.Degraded, d.Revision, &d.Epoch})
					o = Outcome{Error: "NoRoute", NoRoute: &NoRoute{d.Country, d.Degraded, d.Revision, d.Epoch}, Body: body}
				} else if o.D, err = json.Marshal(d); err != nil {
					t.Fatal(err)
				}
				i = len(l.Outcomes)
				seen[d.Pool] = i
				l.Outcomes = append(l.Outcomes, o)
			}
			l.IDs += string(IDChars[i])
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, b...), '\n')
	}
	return out
}

// TestCompareFindsChangedPick: a sweep printed from Go's own decisions
// compares equal on every scenario; one decision moved to another pool, or
// one NoRoute turned into a decision, is found, named by header and key,
// with Go's and the reader's answers.
func TestCompareFindsChangedPick(t *testing.T) {
	now := time.Now()
	hs, ks := Headers(), Keys(40)
	for _, sc := range Scenarios(t, now) {
		x := Expect{Table: sc.Table, Now: now}
		s, err := ReadSweep("Go", goSweep(t, sc.Table, now, hs, ks), hs, ks)
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		n, bad, msgs, err := x.Compare(s, s)
		if err != nil || bad != 0 || n.Decisions != len(hs)*(1+len(ks)) {
			t.Fatalf("%s: Go against itself: %s, %d differ %q, %v", sc.Name, n, bad, msgs, err)
		}
	}
	tab := Scenarios(t, now)[0].Table
	x := Expect{Table: tab, Now: now}
	out := goSweep(t, tab, now, hs, ks)
	lines := strings.SplitAfter(string(out), "\n")
	// PL (70/30 eu-central/eu-west): move the first key's decision to the
	// other pool.
	pl := 15*26 + 11
	var l SweepLine
	if err := json.Unmarshal([]byte(lines[pl]), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Outcomes) < 2 {
		t.Fatalf("PL has %d outcomes, want both pools", len(l.Outcomes))
	}
	other := strings.IndexByte(IDChars, l.IDs[1]) ^ 1
	l.IDs = l.IDs[:1] + string(IDChars[other]) + l.IDs[2:]
	b, _ := json.Marshal(l)
	lines[pl] = string(b) + "\n"
	good, err := ReadSweep("Go", out, hs, ks)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := ReadSweep("changed", []byte(strings.Join(lines, "")), hs, ks)
	if err != nil {
		t.Fatal(err)
	}
	_, bad, msgs, err := x.Compare(good, changed)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 1 || len(msgs) != 1 || !strings.Contains(msgs[0], `header "PL", key "`+ks[0]+`"`) ||
		!strings.Contains(msgs[0], "changed: ") || !strings.Contains(msgs[0], "DIFFERS: pool differs") {
		t.Fatalf("one PL pick moved: %d differ, %q; want that one, named", bad, msgs)
	}
	t.Logf("the report:\n%s", msgs[0])

	down := Scenarios(t, now)[2]
	if down.Name != "down" {
		t.Fatalf("scenario 2 is %s, want down", down.Name)
	}
	// Every DE decision is NoRoute with eu down: a reader answering with
	// the UK's pool for it is wrong.
	dx := Expect{Table: down.Table, Now: now}
	dl := strings.SplitAfter(string(goSweep(t, down.Table, now, hs, ks)), "\n")
	gb := strings.SplitAfter(string(goSweep(t, down.Table, now, []string{"GB"}, ks)), "\n")[0]
	de := 3*26 + 4
	dl[de] = gb
	s, err := ReadSweep("wrong", []byte(strings.Join(dl, "")), hs, ks)
	if err != nil {
		t.Fatal(err)
	}
	_, bad, msgs, err = dx.Compare(s)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 1+len(ks) || !strings.Contains(msgs[0], `header "DE"`) || !strings.Contains(msgs[0], "NoRoute differs") {
		t.Fatalf("DE answered as GB: %d differ, %q; want %d", bad, msgs, 1+len(ks))
	}
}

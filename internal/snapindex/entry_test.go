package snapindex

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/testfill"
	"github.com/regiond/regiond/routing"
)

// notInEntry names the JSON members of routing.Effective that an entry
// carries in another form, and which: appendEntry writes every other
// member as it is.
var notInEntry = map[string]string{
	"attrs": "merged into each candidate's attrs (Candidate.MergedAttrs)",
}

// TestAppendEntryCarriesEveryField: an entry whose every exported field
// (and every exported field of its candidates) is set by reflection
// encodes each member of routing.Effective and routing.Candidate as
// encoding/json encodes it, the candidates' merged attrs beside them, and
// the reference reader (ParseEntry) reads back exactly those bytes. The
// entry encoder is written out, so a field added to Effective or
// Candidate fails here until appendEntry and Entry carry it (or
// notInEntry says where it goes) instead of vanishing from the index.
func TestAppendEntryCarriesEveryField(t *testing.T) {
	e := filledEntry(t)
	js := appendEntry(nil, e)
	var members map[string]json.RawMessage
	if err := json.Unmarshal(js, &members); err != nil {
		t.Fatalf("entry %s: %v", js, err)
	}
	checkMembers(t, "Effective", reflect.ValueOf(e).Elem(), members, notInEntry)
	var cands []map[string]json.RawMessage
	if err := json.Unmarshal(members["candidates"], &cands); err != nil || len(cands) != len(e.Candidates) {
		t.Fatalf("candidates %s: %v, want %d of them", members["candidates"], err, len(e.Candidates))
	}
	for i := range e.Candidates {
		c := &e.Candidates[i]
		checkMembers(t, "Candidate", reflect.ValueOf(c).Elem(), cands[i], map[string]string{})
		if want := marshal(t, c.MergedAttrs()); !bytes.Equal(cands[i]["attrs"], want) {
			t.Errorf("candidate %d: attrs %s, want its merged attrs %s", i, cands[i]["attrs"], want)
		}
	}

	x, err := ParseEntry(js)
	if err != nil {
		t.Fatal(err)
	}
	if back := marshal(t, x); !bytes.Equal(back, js) {
		t.Errorf("ParseEntry read\n %s\nas an Entry that encodes as\n %s", js, back)
	}
}

// filledEntry returns a copy of a real entry with candidates whose merged
// attrs are set (unexported, so taken from a table), with every exported
// field of the entry and of its candidates then set by reflection.
func filledEntry(t *testing.T) *routing.Effective {
	var base *routing.Effective
	for _, sc := range fleettest.Scenarios(t, time.Now()) {
		for _, cc := range routing.Countries() {
			if e := sc.Table.Effective(cc); len(e.Candidates) > 1 && len(e.Candidates[0].MergedAttrs()) > 0 {
				base = e
			}
		}
	}
	if base == nil {
		t.Fatal("no entry with two candidates with attrs in the scenarios")
	}
	e := *base
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() && f.Name != "Candidates" {
			testfill.NonZero(t, v.Field(i), "Effective."+f.Name, nil)
		}
	}
	e.Candidates = slices.Clone(base.Candidates)
	for i := range e.Candidates {
		c := reflect.ValueOf(&e.Candidates[i]).Elem()
		for j := range c.NumField() {
			if f := c.Type().Field(j); f.IsExported() {
				testfill.NonZero(t, c.Field(j), "Candidate"+strconv.Itoa(i)+"."+f.Name, nil)
			}
		}
	}
	return &e
}

// checkMembers checks that members holds, for every JSON member of the
// struct v but those in elsewhere, what encoding/json writes for its
// field (candidates aside: checked one by one).
func checkMembers(t *testing.T, typ string, v reflect.Value, members map[string]json.RawMessage, elsewhere map[string]string) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := elsewhere[name]; ok {
			continue
		}
		got, ok := members[name]
		if !ok {
			t.Errorf("%s.%s (member %q) is not in the entry: add it to appendEntry and Entry, or to notInEntry saying where it goes", typ, f.Name, name)
			continue
		}
		if name == "candidates" {
			continue
		}
		if want := marshal(t, v.Field(i).Interface()); !bytes.Equal(got, want) {
			t.Errorf("%s.%s: member %q is %s, want %s", typ, f.Name, name, got, want)
		}
	}
}

// marshal is encoding/json without HTML escaping, as appendString writes.
func marshal(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

package fleettest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/regiond/regiond/routing"
)

// Junk are raw country headers that every reader must normalize as Go's
// routing.NormalizeCountry does: spaced, lower-case, reserved, unassigned
// and invalid (only ' ', \t, \r and \n are trimmed: not \v, NUL or NBSP).
var Junk = []string{
	" pl ", "pl", "\tDe\r\n", "xx", "XX", "T1", "t1", "", " ", "A1", "A2", "O1", "EU", "UK", "zz",
	"POL", "P", "p l", "_unknown", "\x00\x00", "ÄÖ", "12", "usa", " us", "gb\n", "Pl\t",
	"\vPL", "PL\x00", "\u00a0PL", "\x00de", "Ｐl", "ǅe",
}

// Headers returns the raw country headers of a reader sweep: every
// two-letter code AA..ZZ (assigned or not), the Junk headers and _unknown.
func Headers() []string {
	hs := make([]string, 0, 26*26+len(Junk)+1)
	for a := 'A'; a <= 'Z'; a++ {
		for b := 'A'; b <= 'Z'; b++ {
			hs = append(hs, string([]rune{a, b}))
		}
	}
	return append(append(hs, Junk...), routing.Unknown)
}

// Keys returns n sticky keys, the same on every call: session-id-like most
// of the time, but also arbitrary bytes (NUL, invalid UTF-8), UTF-8 text,
// one-byte keys and keys of up to 450 bytes. None is empty.
func Keys(n int) []string {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	r := rand.New(rand.NewPCG(20261202, 11))
	ks := make([]string, n)
	for i := range ks {
		var b []byte
		switch r.IntN(10) {
		case 0:
			b = make([]byte, 1+r.IntN(40))
			for j := range b {
				b[j] = byte(r.IntN(256))
			}
		case 1:
			b = make([]byte, 250+r.IntN(200))
			for j := range b {
				b[j] = alnum[r.IntN(len(alnum))]
			}
		case 2:
			b = []byte([]string{"żółć-ü", "視聴者-42", "🎬viewer", "ключ"}[r.IntN(4)] + strconv.Itoa(r.IntN(1000)))
		case 3:
			b = []byte{alnum[r.IntN(len(alnum))]}
		default:
			b = make([]byte, 8+r.IntN(32))
			for j := range b {
				b[j] = alnum[r.IntN(len(alnum))]
			}
		}
		ks[i] = string(b)
	}
	return ks
}

// Outcome is one decision as a reader's test driver reports it: a
// Decision, or NoRoute with its fields and the reader's 503 body, or any
// other error.
type Outcome struct {
	// OK is true for a Decision, false for any error.
	OK bool `json:"ok"`
	// D is the reader's Decision JSON; set when OK.
	D json.RawMessage `json:"d,omitempty"`
	// NoRoute holds the NoRoute error's fields; nil for a Decision or
	// another error.
	NoRoute *NoRoute `json:"noroute,omitempty"`
	// Body is the 503 body the reader renders for its NoRoute.
	Body json.RawMessage `json:"body,omitempty"`
	// Error is the error's class or name ("NoRouteException",
	// "NoRouteError"); empty when OK.
	Error string `json:"error,omitempty"`
	// Message is the error's message.
	Message string `json:"message,omitempty"`
}

// NoRoute is what a reader's NoRoute error carries.
type NoRoute struct {
	// Country is the normalized country (routing.Unknown for the unknown
	// country).
	Country string `json:"country"`
	// Reasons are the NoRoute's reason codes (stale-table included when
	// the reader judged the table stale).
	Reasons []string `json:"reasons"`
	// Revision is the etcd revision of the table that found no route.
	Revision int64 `json:"revision"`
	// Epoch is that table's config epoch (0 before any config).
	Epoch int64 `json:"epoch"`
}

// noRouteBody is the agent's 503 body (internal/api errorBody): revision
// and epoch name the table, epoch 0 too.
type noRouteBody struct {
	Error    string   `json:"error"`
	Code     string   `json:"code"`
	Country  string   `json:"country,omitempty"`
	Reasons  []string `json:"reasons,omitempty"`
	Revision int64    `json:"revision,omitempty"`
	Epoch    *int64   `json:"epoch,omitempty"`
}

// IDChars are the characters of outcome indices 0..63 in SweepLine.IDs.
const IDChars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_"

var idIndex = func() (m [256]int8) {
	for i := range m {
		m[i] = -1
	}
	for i := range len(IDChars) {
		m[IDChars[i]] = int8(i)
	}
	return m
}()

// SweepLine is a driver's output line for one header of a sweep: its
// distinct outcomes and, one character of IDChars per decision, the index
// of its outcome: IDs[0] without a sticky key, IDs[1+j] with key j.
type SweepLine struct {
	// Outcomes are the header's distinct outcomes.
	Outcomes []Outcome `json:"outcomes"`
	// IDs holds, for each decision, the IDChars character of its outcome's
	// index in Outcomes.
	IDs string `json:"ids"`
}

// Answer is one reader's decoded outcome.
type Answer struct {
	// D is the decision; for NoRoute its Country, Degraded (the reasons),
	// Revision and Epoch.
	D routing.Decision
	// NoRoute is true when the reader found no route.
	NoRoute bool
	// Err is any other error (a reader bug in a sweep).
	Err string
}

// String describes the answer for a mismatch report: pool, host,
// reasons and stale first.
func (a *Answer) String() string {
	switch {
	case a == nil:
		return "<none>"
	case a.Err != "":
		return "error " + a.Err
	case a.NoRoute:
		return fmt.Sprintf("NoRoute reasons %q stale %v (country %s rev %d epoch %d)",
			a.D.Degraded, slices.Contains(a.D.Degraded, "stale-table"), a.D.Country, a.D.Revision, a.D.Epoch)
	}
	d := a.D
	return fmt.Sprintf("pool %s host %s reasons %q stale %v (country %s route %s depth %d rev %d epoch %d attrs %v)",
		d.Pool, d.Host, d.Degraded, slices.Contains(d.Degraded, "stale-table"), d.Country, d.Route, d.FallbackDepth, d.Revision, d.Epoch, d.Attrs)
}

// Sweep is one reader's answers to headers × (no key, keys).
type Sweep struct {
	// Reader names the reader and path in messages ("PHP index", "JS kv").
	Reader string
	// Headers are the raw country headers swept, in order (Headers()).
	Headers []string
	// Keys are the sticky keys swept, in order (Keys(n)).
	Keys    []string
	answers []Answer
	ids     [][]int32 // [header][1+key] into answers
}

// At is the answer for header h and key k (k < 0: no key).
func (s *Sweep) At(h, k int) *Answer { return &s.answers[s.ids[h][k+1]] }

var decisionMembers = func() []string {
	b, _ := json.Marshal(routing.Decision{})
	return jsonMembers(b)
}()

func jsonMembers(b []byte) []string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	return slices.Sorted(maps.Keys(m))
}

// decodeOutcome checks one outcome's shape and decodes it.
func decodeOutcome(o Outcome) (Answer, error) {
	if o.OK {
		var d routing.Decision
		dec := json.NewDecoder(bytes.NewReader(o.D))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			return Answer{}, fmt.Errorf("decision %s: %w", o.D, err)
		}
		if m := jsonMembers(o.D); !slices.Equal(m, decisionMembers) {
			return Answer{}, fmt.Errorf("decision %s has members %v, want Go's %v", o.D, m, decisionMembers)
		}
		return Answer{D: d}, nil
	}
	if o.NoRoute == nil {
		return Answer{Err: o.Error + ": " + o.Message}, nil
	}
	n := o.NoRoute
	var b noRouteBody
	dec := json.NewDecoder(bytes.NewReader(o.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return Answer{}, fmt.Errorf("NoRoute body %s: %w", o.Body, err)
	}
	if b.Error != "no eligible pool" || b.Code != "no_route" || b.Country != n.Country || !slices.Equal(b.Reasons, n.Reasons) ||
		b.Revision != n.Revision || b.Epoch == nil || *b.Epoch != n.Epoch {
		return Answer{}, fmt.Errorf("NoRoute body %s does not match its error %+v", o.Body, *n)
	}
	return Answer{NoRoute: true, D: routing.Decision{Country: n.Country, Degraded: n.Reasons, Revision: n.Revision, Epoch: n.Epoch}}, nil
}

// ReadSweep decodes a driver's sweep output (one SweepLine per header, in
// order) for headers × keys; reader names it in errors and messages.
func ReadSweep(reader string, out []byte, headers, keys []string) (*Sweep, error) {
	s := &Sweep{Reader: reader, Headers: headers, Keys: keys, ids: make([][]int32, 0, len(headers))}
	seen := map[string]int32{} // outcome JSON → index in answers
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		h := len(s.ids)
		if h == len(headers) {
			return nil, fmt.Errorf("%s: more than %d lines", reader, len(headers))
		}
		var l SweepLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s: line %d (header %q): %w", reader, h+1, headers[h], err)
		}
		if len(l.IDs) != 1+len(keys) {
			return nil, fmt.Errorf("%s: header %q: %d decisions, want %d", reader, headers[h], len(l.IDs), 1+len(keys))
		}
		local := make([]int32, len(l.Outcomes))
		for i, o := range l.Outcomes {
			b, err := json.Marshal(o)
			if err != nil {
				return nil, err
			}
			id, ok := seen[string(b)]
			if !ok {
				a, err := decodeOutcome(o)
				if err != nil {
					return nil, fmt.Errorf("%s: header %q: %w", reader, headers[h], err)
				}
				id = int32(len(s.answers))
				s.answers = append(s.answers, a)
				seen[string(b)] = id
			}
			local[i] = id
		}
		ids := make([]int32, len(l.IDs))
		for j := range len(l.IDs) {
			x := int(idIndex[l.IDs[j]])
			if x < 0 || x >= len(local) {
				return nil, fmt.Errorf("%s: header %q: decision %d is outcome %q of %d", reader, headers[h], j, l.IDs[j], len(local))
			}
			ids[j] = local[x]
		}
		s.ids = append(s.ids, ids)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", reader, err)
	}
	if len(s.ids) != len(headers) {
		return nil, fmt.Errorf("%s: %d lines, want one per header (%d)", reader, len(s.ids), len(headers))
	}
	return s, nil
}

// Expect is Go's side of a sweep: Table.Resolve at Now;
// WithStale adds the stale-table a reader adds for an old synced_at.
type Expect struct {
	// Table is the table the readers' files were written from.
	Table *routing.Table
	// Now is the time Go resolves at (health, boosts' expiry).
	Now time.Time
	// WithStale adds stale-table to each of Go's decisions, as a reader
	// does when the file's synced_at is older than its max age.
	WithStale bool
}

// Want is Go's decision for one header and key.
type Want struct {
	Answer
	// Random says the pick is random (no key, or affinity random): any
	// candidate, with its host and attrs, is right.
	Random bool
	e      *routing.Effective
}

// Want returns Go's decision for raw header h and key ("" for none).
func (x Expect) Want(h, key string) (Want, error) {
	d, err := x.Table.Resolve(h, key, x.Now)
	if err != nil && !errors.Is(err, routing.ErrNoRoute) {
		return Want{}, fmt.Errorf("the Go resolver, Resolve(%q, %q): %w", h, key, err)
	}
	if x.WithStale && !slices.Contains(d.Degraded, "stale-table") {
		d.Degraded = append(slices.Clone(d.Degraded), "stale-table")
	}
	if err != nil {
		return Want{Answer: Answer{D: d, NoRoute: true}}, nil
	}
	e := x.Table.Effective(d.Country)
	return Want{Answer: Answer{D: d}, Random: len(e.Candidates) > 1 && (key == "" || e.Affinity == routing.AffinityRandom), e: e}, nil
}

// Match says how a reader's answer a differs from w ("" when it does not).
func (x Expect) Match(w *Want, a *Answer) string {
	switch {
	case a.Err != "":
		return "reader error " + a.Err
	case w.NoRoute != a.NoRoute:
		return "NoRoute differs"
	case w.NoRoute:
		if a.D.Country != w.D.Country || !slices.Equal(a.D.Degraded, w.D.Degraded) || a.D.Revision != w.D.Revision || a.D.Epoch != w.D.Epoch {
			return "NoRoute fields differ"
		}
		return ""
	}
	want := w.D
	if w.Random {
		i := slices.IndexFunc(w.e.Candidates, func(c routing.Candidate) bool { return c.Pool == a.D.Pool })
		if i < 0 {
			return "random pick is not a candidate"
		}
		want.Pool, want.Host, want.Attrs = a.D.Pool, w.e.Candidates[i].Host, x.attrs(w.e, a.D.Pool)
	}
	d := a.D
	switch {
	case d.Pool != want.Pool:
		return "pool differs"
	case d.Host != want.Host:
		return "host differs"
	case !slices.Equal(d.Degraded, want.Degraded):
		return "degraded (reasons, stale) differ"
	case d.Country != want.Country || d.Route != want.Route || d.FallbackDepth != want.FallbackDepth:
		return "country, route or fallback depth differ"
	case d.Revision != want.Revision || d.Epoch != want.Epoch:
		return "revision or epoch differ"
	case !maps.Equal(d.Attrs, want.Attrs):
		return "attrs differ"
	}
	return ""
}

// attrs is what a Decision for pool in e carries: the pool's attrs
// overlaid by the entry's.
func (x Expect) attrs(e *routing.Effective, pool string) map[string]string {
	m := map[string]string{}
	if p, ok := x.Table.Pool(pool); ok {
		maps.Copy(m, p.Attrs)
	}
	maps.Copy(m, e.Attrs)
	return m
}

// Counts tallies the decisions a comparison made.
type Counts struct {
	// Decisions counts every decision compared; Sticky, Random and NoRoute
	// count those of each kind (Go's pick by key, a random pick, no route).
	Decisions, Sticky, Random, NoRoute int
}

// String says how many decisions of each kind were compared.
func (c Counts) String() string {
	return fmt.Sprintf("%d decisions: %d sticky, %d random, %d NoRoute", c.Decisions, c.Sticky, c.Random, c.NoRoute)
}

func (c *Counts) add(w *Want) {
	c.Decisions++
	switch {
	case w.NoRoute:
		c.NoRoute++
	case w.Random:
		c.Random++
	default:
		c.Sticky++
	}
}

// maxReported is how many mismatches a comparison describes.
const maxReported = 5

// Compare compares every decision of the sweeps (of the same headers and
// keys) with Go's, decision by decision. It returns the counts (per
// sweep), how many decisions differ in any sweep, and a description of
// the first few: header, key, Go's answer and every sweep's.
func (x Expect) Compare(sweeps ...*Sweep) (Counts, int, []string, error) {
	var n Counts
	if len(sweeps) == 0 {
		return n, 0, nil, errors.New("no sweep to compare")
	}
	s0 := sweeps[0]
	for _, s := range sweeps[1:] {
		if !slices.Equal(s.Headers, s0.Headers) || !slices.Equal(s.Keys, s0.Keys) {
			return n, 0, nil, fmt.Errorf("%s and %s swept different headers or keys", s0.Reader, s.Reader)
		}
	}
	bad := 0
	var msgs []string
	diffs := make([]string, len(sweeps))
	// Match depends only on the answer and on Go's entry, country, pool and
	// kind of pick: most of 700,000 decisions are a few hundred distinct
	// comparisons.
	type matchKey struct {
		answer          int32
		e               *routing.Effective
		country, pool   string
		noRoute, random bool
	}
	memo := make([]map[matchKey]string, len(sweeps))
	for i := range memo {
		memo[i] = map[matchKey]string{}
	}
	// Every header that is not an assigned code (most of AA..ZZ, the junk)
	// has the same decisions as _unknown: Go's are computed once.
	var unknown []Want
	for h, hdr := range s0.Headers {
		isUnknown := routing.NormalizeCountry(hdr) == routing.Unknown
		for k := -1; k < len(s0.Keys); k++ {
			key := ""
			if k >= 0 {
				key = s0.Keys[k]
			}
			var w Want
			if isUnknown && k+1 < len(unknown) {
				w = unknown[k+1]
			} else {
				var err error
				if w, err = x.Want(hdr, key); err != nil {
					return n, bad, msgs, err
				}
				if isUnknown {
					unknown = append(unknown, w)
				}
			}
			n.add(&w)
			differ := false
			for i, s := range sweeps {
				mk := matchKey{s.ids[h][k+1], w.e, w.D.Country, w.D.Pool, w.NoRoute, w.Random}
				d, ok := memo[i][mk]
				if !ok {
					d = x.Match(&w, s.At(h, k))
					memo[i][mk] = d
				}
				diffs[i] = d
				differ = differ || d != ""
			}
			if !differ {
				continue
			}
			if bad++; bad > maxReported {
				continue
			}
			var b strings.Builder
			fmt.Fprintf(&b, "header %q, key %q:\n    Go: %s", hdr, key, w.Answer.String())
			if w.Random {
				b.WriteString(" (a random pick: any candidate)")
			}
			for i, s := range sweeps {
				mark := "agrees"
				if diffs[i] != "" {
					mark = "DIFFERS: " + diffs[i]
				}
				fmt.Fprintf(&b, "\n    %s: %s [%s]", s.Reader, s.At(h, k).String(), mark)
			}
			msgs = append(msgs, b.String())
		}
	}
	return n, bad, msgs, nil
}

// OwnerFleet is the readers' owner tests' fleet (YAML): German and Polish
// viewers to an EU pool, the rest to a US one. ForgedOwnerFleet is what
// another local user would plant instead: the EU pool's host in the US.
const OwnerFleet = "pools:\n" +
	"  eu-central: {host: edge-fra-1.example.net:443, residency: eu, status: active}\n" +
	"  us-east: {host: edge-iad-1.example.net:443, residency: us, status: active}\n" +
	"routes:\n" +
	"  DE: {targets: [{pool: eu-central, weight: 100}]}\n" +
	"  PL: {targets: [{pool: eu-central, weight: 100}]}\n" +
	"  _default: {targets: [{pool: us-east, weight: 100}]}\n"

// ForgedOwnerFleet is OwnerFleet with eu-central's host moved to the US.
var ForgedOwnerFleet = strings.Replace(OwnerFleet, "edge-fra-1.example.net", "edge-iad-9.example.net", 1)

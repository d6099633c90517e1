package js_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// parseTimesJS returns the JS reader's parseTime of each of ss, in
// seconds, nil where it is NaN.
func parseTimesJS(t *testing.T, ss []string) []*float64 {
	t.Helper()
	script := `
import { parseTime } from './regiond.mjs';
console.log(JSON.stringify(process.argv.slice(1).map((s) => { const v = parseTime(s); return Number.isNaN(v) ? null : v / 1000; })));
`
	out, err := exec.Command(node(t), append([]string{"--input-type=module", "-e", script}, ss...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got []*float64
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(ss) {
		t.Fatalf("node: %v: %s", err, out)
	}
	return got
}

// TestReaderRefusesATimeOutOfRange: a written_at or synced_at whose date or
// time is out of range (2026-02-31, hour 25, second 60, month 13, an offset
// minute of 75) is no RFC 3339 time: Go's time.Parse refuses it, and so
// do the Go and PHP readers the file. The JS reader took it as another
// instant (Date.UTC rolls 02-31 over to 03-03, 25:00 to the next day): a
// synced_at pushed ahead kept a table from turning stale-table. (And
// Date.UTC read years 0 to 99 as 1900 to 1999.) Now it refuses the file
// as Go does, through the header JSON of an index and a KV value, and
// still reads what Go reads at the edges (a leap day, year 0, offsets
// +24:00 and +05:60, ten digits of fraction). The cases are examples/php's
// TestReaderRefusesATimeOutOfRange's.
func TestReaderRefusesATimeOutOfRange(t *testing.T) {
	node(t)
	t.Parallel()
	fleettest.CheckTimePremises(t)
	ss := append(slices.Clone(fleettest.TimesOutOfRange), fleettest.TimesAtTheEdges...)
	fleettest.CheckTimesAsGo(t, "JS", ss, parseTimesJS(t, ss))

	// Through the files: the index's header JSON with written_at on 02-31,
	// and a KV value with synced_at at 25:00; each the same length as the
	// agent's, so every offset holds.
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	idx := indexFile(t, tab, now, now)
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	day := regexp.MustCompile(`("written_at":"\d{4})-\d\d-\d\d`)
	if err := os.WriteFile(idx, day.ReplaceAll(b, []byte("${1}-02-31")), 0o644); err != nil {
		t.Fatal(err)
	}
	pl := regexp.MustCompile(`("synced_at":"\d{4}-\d\d-\d\dT)\d\d`).ReplaceAllString(string(kvValue(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, "PL")), "${1}25")
	script := `
import { readIndexFile, decideFromIndexFileAsync, decideFromValue } from './node.mjs';
const out = [];
try { readIndexFile(process.argv[1], 'PL', process.getuid()); out.push('read'); } catch (e) { out.push(e.name + ': ' + e.message); }
try { await decideFromIndexFileAsync(process.argv[1], 'PL', '', { owner: process.getuid() }); out.push('read'); } catch (e) { out.push(e.name + ': ' + e.message); }
try { decideFromValue(process.argv[2], '', {}, 'KV key PL'); out.push('read'); } catch (e) { out.push(e.name + ': ' + e.message); }
console.log(out.join('\n'));
`
	out, err := exec.Command(node(t), "--input-type=module", "-e", script, idx, pl).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	wantIdx := "TableError: regiond: " + idx + `: written_at "`
	if len(lines) != 3 || !strings.HasPrefix(lines[0], wantIdx) || !strings.HasPrefix(lines[1], wantIdx) ||
		!strings.Contains(lines[0], `-02-31T`) || !strings.HasSuffix(lines[0], `" is not an RFC 3339 time`) ||
		!strings.HasPrefix(lines[2], `TableError: regiond: KV key PL: synced_at "`) || !strings.HasSuffix(lines[2], `" is not an RFC 3339 time`) {
		t.Errorf("an index whose written_at is on 02-31 (sync, async) and a KV value whose synced_at is at 25:00:\n%s\nwant each refused naming the file or key and the member", out)
	}
}

// TestReaderReadsTimesAsGo: the reader's parseTime takes an RFC 3339 time
// exactly where Go's time.Parse(time.RFC3339Nano, …) does, Go of go.mod: it
// took a lower-case "t" between date and time and a lower-case "z" (RFC
// 3339 allows both; Go's layout matches upper case only), which Go
// refuses, and so the Go reader the file; and it refused a comma before
// the fraction and an hour of one digit, which Go reads. An index whose
// written_at ends in a lower-case "z" is refused naming it, as
// snapindex.Parse refuses it; a KV value whose synced_at has a comma and
// an hour of one digit is read. (examples/php has the same test.)
func TestReaderReadsTimesAsGo(t *testing.T) {
	node(t)
	t.Parallel()
	fleettest.CheckTimePremises(t)
	fleettest.CheckTimesAsGo(t, "JS", fleettest.TimesAsGo, parseTimesJS(t, fleettest.TimesAsGo))

	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	idx := indexFile(t, tab, now, now)
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`("written_at":"[^"]*)Z"`).ReplaceAll(b, []byte(`${1}z"`))
	if err := os.WriteFile(idx, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := snapindex.Parse(idx, b); err == nil || !strings.Contains(err.Error(), "written_at") {
		t.Fatalf("Go reads a written_at with a lower-case z: %v", err)
	}
	pl := regexp.MustCompile(`"synced_at":"[^"]*"`).ReplaceAllString(string(kvValue(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, "PL")), `"synced_at":"2026-12-07T8:00:00,5+01:00"`)
	script := `
import { readIndexFile, valueEntry, parseTime } from './node.mjs';
try { readIndexFile(process.argv[1], 'PL', process.getuid()); console.log('read'); } catch (e) { console.log(e.name + ': ' + e.message); }
try { console.log('read ' + parseTime(valueEntry(process.argv[2], 'KV key PL').header.synced_at)); } catch (e) { console.log(e.name + ': ' + e.message); }
`
	out, err := exec.Command(node(t), "--input-type=module", "-e", script, idx, pl).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if want := "TableError: regiond: " + idx + `: written_at "`; len(lines) != 2 || !strings.HasPrefix(lines[0], want) || !strings.HasSuffix(lines[0], `z" is not an RFC 3339 time`) {
		t.Errorf("an index whose written_at ends in a lower-case z: %s, want it refused naming the file and written_at", out)
	}
	synced, err := time.Parse(time.RFC3339Nano, "2026-12-07T8:00:00,5+01:00")
	if err != nil {
		t.Fatal(err)
	}
	if want := "read " + strconv.FormatInt(synced.UnixMilli(), 10); len(lines) != 2 || lines[1] != want {
		t.Errorf("a KV value whose synced_at is 2026-12-07T8:00:00,5+01:00: %s, want %q (Go's)", out, want)
	}
}

// TestReaderTakesANullOrEmptySyncedAtAsNone: a synced_at that is null or
// "" is none, as when it is absent (an older agent's file): the reader
// counts staleness from written_at, in the index's header JSON and in a
// KV value, as the Go reader (snapindex.Parse) takes all three. The JS
// reader refused a null one ("synced_at null is not an RFC 3339 time"), a
// file Go reads. A written_at absent, null or "" is refused, as by Go
// (and the PHP reader); the JS reader took an absent or empty one (every
// decision stale-table, or staleness from synced_at alone). Here
// written_at is now and synced_at an hour ago: with a max age of 60 s the
// table is stale only while synced_at is there. (examples/php has the
// same test for its reader.)
func TestReaderTakesANullOrEmptySyncedAtAsNone(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)}
	// The index without its header block (whose flag says synced_at is
	// there: Go's reader would refuse the disagreement); the JS reader
	// reads the header JSON.
	idx0, err := snapindex.Encode(nil, tab, h)
	if err != nil {
		t.Fatal(err)
	}
	if idx0, err = snapindex.WithoutBlock(idx0); err != nil {
		t.Fatal(err)
	}
	pl := kvValue(t, tab, h, "PL")
	synced, written := regexp.MustCompile(`"synced_at":"[^"]*"`), regexp.MustCompile(`"written_at":"[^"]*"`)
	type outcome struct {
		Error string `json:"error"`
		Stale bool   `json:"stale"`
	}
	for _, c := range []struct {
		name   string
		member *regexp.Regexp // nil: the file as written
		repl   string
		ok     bool // read (else refused)
		stale  bool // synced_at there, an hour old
	}{
		{"synced_at an hour ago", nil, "", true, true},
		{"synced_at null", synced, `"synced_at":null`, true, false},
		{`synced_at ""`, synced, `"synced_at":""`, true, false},
		{"no synced_at", synced, `"synced_atx":0`, true, false},
		{"written_at null", written, `"written_at":null`, false, false},
		{`written_at ""`, written, `"written_at":""`, false, false},
		{"no written_at", written, `"written_atx":0`, false, false},
	} {
		// Padded with spaces to the member's length: every offset holds.
		edit := func(b []byte) []byte {
			if c.member == nil {
				return b
			}
			return c.member.ReplaceAllFunc(b, func(m []byte) []byte {
				return []byte(c.repl + strings.Repeat(" ", len(m)-len(c.repl)))
			})
		}
		ib := edit(bytes.Clone(idx0))
		x, err := snapindex.Parse("table.idx", ib)
		if (err == nil) != c.ok || c.ok && x.Header.SyncedAt.IsZero() == c.stale {
			t.Fatalf("index, %s: Go's reader: %v", c.name, err)
		}
		idx := writeTemp(t, "table.idx", ib)
		script := `
import { readIndexFile, valueEntry, isStale } from './node.mjs';
const out = [];
for (const read of [() => readIndexFile(process.argv[1], 'PL', process.getuid()), () => valueEntry(process.argv[2], 'KV key PL')]) {
  try { out.push({ stale: isStale(read().header, { maxAgeSeconds: 60 }) }); } catch (e) { out.push({ error: e.name + ': ' + e.message }); }
}
console.log(JSON.stringify(out));
`
		out, err := exec.Command(node(t), "--input-type=module", "-e", script, idx, string(edit(bytes.Clone(pl)))).CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		var got []outcome
		if err := json.Unmarshal(out, &got); err != nil || len(got) != 2 {
			t.Fatalf("node: %v: %s", err, out)
		}
		for i, where := range []string{"regiond: " + idx + ": ", "regiond: KV key PL: "} {
			what := []string{"index", "KV value"}[i]
			switch g := got[i]; {
			case !c.ok && (!strings.HasPrefix(g.Error, "TableError: "+where) || !strings.Contains(g.Error, "written_at")):
				t.Errorf("%s, %s: %+v, want a TableError naming it and written_at, as Go's reader refuses it", what, c.name, g)
			case c.ok && g.Error != "":
				t.Errorf("%s, %s: %s, want it read, as Go's reader reads it", what, c.name, g.Error)
			case c.ok && g.Stale != c.stale:
				t.Errorf("%s, %s: stale %v, want %v (synced_at none: counted from written_at, now)", what, c.name, g.Stale, c.stale)
			}
		}
	}
}

// TestReaderTakesANullOrEmptyValidUntilAsNone: a KV value's valid_until
// that is null or "" is none, as when it is absent and as the reader takes
// synced_at: the value is read and not stale. The reader refused a null
// one ("valid_until null is not an RFC 3339 time"), and its staleness
// check would have taken null for an instant passed. A valid_until passed
// still makes the value stale, and one that is no time is refused.
func TestReaderTakesANullOrEmptyValidUntilAsNone(t *testing.T) {
	node(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	pl := kvValue(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now}, "PL")
	if bytes.Contains(pl, []byte(`"valid_until"`)) {
		t.Fatalf("PL's value has a valid_until already: %s", pl)
	}
	script := `
import { valueEntry, isStale } from './node.mjs';
try { console.log(JSON.stringify({ stale: isStale(valueEntry(process.argv[1], 'KV key PL').header, { maxAgeSeconds: 60 }) })); }
catch (e) { console.log(JSON.stringify({ error: e.name + ': ' + e.message })); }
`
	for _, c := range []struct {
		name, member string
		want         string // the JSON the script prints
	}{
		{"null", `"valid_until":null`, `{"stale":false}`},
		{`""`, `"valid_until":""`, `{"stale":false}`},
		{"an hour on", `"valid_until":"` + now.Add(time.Hour).UTC().Format(time.RFC3339) + `"`, `{"stale":false}`},
		{"an hour ago", `"valid_until":"` + now.Add(-time.Hour).UTC().Format(time.RFC3339) + `"`, `{"stale":true}`},
		{"no time", `"valid_until":"soon"`, `{"error":"TableError: regiond: KV key PL: valid_until \"soon\" is not an RFC 3339 time"}`},
	} {
		v := bytes.Replace(pl, []byte(`"stale":`), []byte(c.member+`,"stale":`), 1)
		out, err := exec.Command(node(t), "--input-type=module", "-e", script, string(v)).CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != c.want {
			t.Errorf("valid_until %s: %s, want %s", c.name, got, c.want)
		}
	}
}

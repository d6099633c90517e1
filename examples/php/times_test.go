package php_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/routing"
)

// goRefuses are times Go's time.Parse(time.RFC3339Nano, …) refuses though
// the PHP and JS readers' patterns took them: a lower-case "t" or "z"
// (only upper case matches the layout's literal T and its Z07:00), and a
// trailing newline (PCRE's $ matched before it: "extra text" to Go).
var goRefuses = []string{
	"2026-12-07t08:00:00z", "2026-12-07t08:00:00Z", "2026-12-07T08:00:00z", "2026-12-07t08:00:00.5Z",
	"2026-12-07T08:00:00.5z", "2026-12-07t08:00:00.123456789z", "2026-12-07t08:00:00+01:00",
	"2026-12-07T08:00:00Z\n", "2026-12-07T08:00:00.5Z\n", "2026-12-07T08:00:00+01:00\n", "2026-12-07T08:00:00.123456789Z\n",
}

// goReads are times Go's time.Parse(time.RFC3339Nano, …) reads though
// they are no RFC 3339 and the PHP and JS readers' patterns refused them:
// a comma before the fraction (Go's parser takes either) and an hour of
// one digit (the layout's "15", where minute and second are "04", "05").
var goReads = []string{
	"2026-12-07T08:00:00,5Z", "2026-12-07T08:00:00,123456789Z", "2026-12-07T8:00:00Z", "2026-12-07T8:00:00.5Z",
	"2026-12-07T8:00:00,5+01:00", "0000-01-01T0:00:00Z", "2028-02-29T9:59:59,999999999-05:30",
}

// timesAsGo are times whose reading by a reader is compared with Go's
// time.Parse(time.RFC3339Nano, …) (goRefuses, goReads, and the forms
// around them).
var timesAsGo = append(append([]string{
	"2026-12-07T08:00:00Z", "2026-12-07T08:00:00.5Z", "2026-12-07T08:00:00.123456789Z", "2026-12-07T08:00:00.5+01:00",
	"2026-12-07T08:00:00-00:00", "2026-12-07T08:00:00Z ", " 2026-12-07T08:00:00Z", "\n2026-12-07T08:00:00Z",
	"2026-12-07 08:00:00Z", "2026-12-07T08:00:00", "2026-12-07T08:00:00+0100", "2026-12-07T08:00:00.Z",
	"2026-12-07T08:00:00,Z", "2026-12-07T08:00:00.,5Z", "2026-12-07T08:00:00.5,5Z", "2026-12-07T 8:00:00Z",
	"2026-12-07T08:0:00Z", "2026-12-07T08:00:0Z", "2026-12-07T008:00:00Z", "2026-12-07T9:00:60Z", "2026-02-29T8:00:00Z",
	"2026-12-07T24:00:00Z", "2026-1-07T08:00:00Z", "2026-12-07T08:00:00+1:00",
}, goRefuses...), goReads...)

// checkTimesAsGo fails t unless got[i], a reader's reading of ss[i] in
// seconds (nil: refused), is Go's.
func checkTimesAsGo(t *testing.T, reader string, ss []string, got []*float64) {
	t.Helper()
	for i, s := range ss {
		tm, err := time.Parse(time.RFC3339Nano, s)
		switch {
		case err != nil && got[i] != nil:
			t.Errorf("%s parseTime(%q) = %f, want it refused as Go's time.Parse (%v)", reader, s, *got[i], err)
		case err == nil && got[i] == nil:
			t.Errorf("%s parseTime(%q) refused, want %s as Go's time.Parse", reader, s, tm.Format(time.RFC3339Nano))
		case err == nil && math.Abs(*got[i]-(float64(tm.Unix())+float64(tm.Nanosecond())/1e9)) > 1e-6:
			t.Errorf("%s parseTime(%q) = %f, want %s as Go's time.Parse", reader, s, *got[i], tm.Format(time.RFC3339Nano))
		}
	}
}

// TestReaderReadsTimesAsGo: the reader's parseTime takes an RFC 3339 time
// exactly where Go's time.Parse(time.RFC3339Nano, …) does, Go of go.mod: it
// took a lower-case "t" between date and time and a lower-case "z" (RFC
// 3339 allows both; Go's layout matches upper case only) and a time
// followed by a newline (PCRE's $), which Go refuses, and so the Go reader
// the file; and it refused a comma before the fraction and an hour of one
// digit, which Go reads. A table JSON whose synced_at has a lower-case "t"
// is refused naming it, as the Go reader (routing.LoadTableJSONHeader)
// refuses it; one whose synced_at has a comma and an hour of one digit is
// read, its synced_at Go's.
func TestReaderReadsTimesAsGo(t *testing.T) {
	php(t)
	t.Parallel()
	for _, s := range goRefuses {
		if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
			t.Fatalf("Go %s parses %q: this test's premise is gone", runtime.Version(), s)
		}
	}
	for _, s := range goReads {
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			t.Fatalf("Go %s: %v: this test's premise is gone", runtime.Version(), err)
		}
	}
	out := phpScript(t, `require 'RegiondTable.php';
$p = new ReflectionMethod(\Regiond\RegiondTable::class, 'parseTime');
echo json_encode(array_map(fn ($s) => $p->invoke(null, $s), array_slice($argv, 1)));`, timesAsGo...)
	var got []*float64
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != len(timesAsGo) {
		t.Fatalf("php: %v: %s", err, out)
	}
	checkTimesAsGo(t, "PHP", timesAsGo, got)

	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	path := writeTableWith(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(`"synced_at":"`)) + len(`"synced_at":"2026-12-07`)
	if b[i] != 'T' {
		t.Fatalf("no T at %d: %s", i, b[:i+1])
	}
	b[i] = 't'
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := routing.LoadTableJSONHeader(b); err == nil || !strings.Contains(err.Error(), "synced_at") {
		t.Fatalf("Go reads a synced_at with a lower-case t: %v", err)
	}
	if m := metaPHP(t, path, 180); !strings.Contains(m.Error, "snapshot "+path+" is not a regiond table: synced_at") {
		t.Errorf("a table JSON whose synced_at has a lower-case t: %+v, want it refused naming synced_at", m)
	}

	b[i] = 'T'
	b = regexpSynced.ReplaceAll(b, []byte(`"synced_at":"2026-12-07T8:00:00,5+01:00"`))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, h, err := routing.LoadTableJSONHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	want := float64(h.SyncedAt.UnixNano()) / 1e9
	if m := metaPHP(t, path, 180); m.Error != "" || math.Abs(m.SyncedAt-want) > 1e-6 {
		t.Errorf("a table JSON whose synced_at is 2026-12-07T8:00:00,5+01:00: %+v, want it read, synced_at %f as Go's", m, want)
	}
}

package php_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/routing"
)

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
	fleettest.CheckTimePremises(t)
	out := phpScript(t, `require 'RegiondTable.php';
$p = new ReflectionMethod(\Regiond\RegiondTable::class, 'parseTime');
echo json_encode(array_map(fn ($s) => $p->invoke(null, $s), array_slice($argv, 1)));`, fleettest.TimesAsGo...)
	var got []*float64
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("php: %v: %s", err, out)
	}
	fleettest.CheckTimesAsGo(t, "PHP", fleettest.TimesAsGo, got)

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

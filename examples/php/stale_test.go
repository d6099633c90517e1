package php_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
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

// writeTableWith writes tab's table JSON with the header h to a temp file.
func writeTableWith(t *testing.T, tab *routing.Table, h routing.JSONHeader) string {
	t.Helper()
	b, err := tab.JSONWith(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "table.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// phpTimes is the driver's meta mode: the header as the reader sees it.
type phpTimes struct {
	Stale     bool    `json:"stale"`
	WrittenAt float64 `json:"written_at"`
	SyncedAt  float64 `json:"synced_at"`
	Error     string  `json:"error"`
}

func metaPHP(t *testing.T, path string, maxAge float64) phpTimes {
	t.Helper()
	var m phpTimes
	if err := json.Unmarshal(runPHP(t, nil, "meta", path, strconv.FormatFloat(maxAge, 'f', -1, 64)), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReaderStaleFromSyncedAt: the reader's staleness counts from
// synced_at, when the agent last confirmed the table against etcd: a file
// rewritten a moment ago (the agent alive, etcd lost) whose table was not
// confirmed for longer than the max age says stale-table; one confirmed
// within it does not. A file without synced_at counts from written_at; a
// malformed synced_at is refused (null and "" are none, as to the Go
// reader: TestReaderTakesANullOrEmptySyncedAtAsNone).
func TestReaderStaleFromSyncedAt(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	ps := pairs()[:500]
	unconfirmed := writeTableWith(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)})
	meta, got := resolvePHP(t, unconfirmed, 60, ps)
	if !meta.Stale {
		t.Error("php: a file rewritten now, its table confirmed an hour ago, with max age 60s is not stale")
	}
	check(t, tab, now, ps, got, true)
	if m := metaPHP(t, unconfirmed, 7200); m.Stale || math.Abs(m.SyncedAt-float64(now.Add(-time.Hour).UnixNano())/1e9) > 1e-5 {
		t.Errorf("php: with max age 2h: %+v, want not stale, synced_at an hour ago", m)
	}
	confirmed := writeTableWith(t, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Second)})
	meta, got = resolvePHP(t, confirmed, 60, ps)
	if meta.Stale {
		t.Error("php: a table confirmed a second ago with max age 60s is stale")
	}
	check(t, tab, now, ps, got, false)
	old := writeTable(t, tab, now.Add(-time.Hour)) // no synced_at
	if m := metaPHP(t, old, 60); !m.Stale || m.SyncedAt != m.WrittenAt {
		t.Errorf("php: a file without synced_at: %+v, want synced_at = written_at, stale", m)
	}
	b, _ := os.ReadFile(confirmed)
	for _, v := range []string{`"yesterday"`, `12`, `false`} {
		bad := bytes.Replace(b, []byte(`"synced_at":"`), []byte(`"synced_at":`+v+`,"x":"`), 1)
		path := filepath.Join(t.TempDir(), "table.json")
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		if m := metaPHP(t, path, 60); !strings.Contains(m.Error, "synced_at") {
			t.Errorf("php: synced_at %s: %+v, want an error naming synced_at", v, m)
		}
	}
}

// TestReaderTakesANullOrEmptySyncedAtAsNone: a synced_at that is null or
// "" is none, as when it is absent (an older agent's file): the reader
// counts staleness from written_at, in the table JSON and in the index's
// header JSON, as the Go readers (routing.LoadTableJSONHeader,
// snapindex.Parse) take all three. The PHP reader refused a table JSON
// with either ("synced_at null is not RFC 3339"), a file the Go reader
// and the agent load. A written_at absent, null or "" stays refused, as
// by Go (naming the file). Here written_at is now and synced_at an hour ago: with a max age
// of 60 s the table is stale only while synced_at is there.
func TestReaderTakesANullOrEmptySyncedAtAsNone(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	tab := fleettest.Scenarios(t, now)[0].Table
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Hour)}
	synced, written := regexp.MustCompile(`"synced_at":"[^"]*"`), regexp.MustCompile(`"written_at":"[^"]*"`)
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
		edit := func(b []byte) []byte {
			if c.member == nil {
				return b
			}
			return c.member.ReplaceAll(b, []byte(c.repl))
		}
		// The table JSON, without an index beside it.
		js := writeSnapshot(t, tab, h, false)
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		b = edit(b)
		if err := os.WriteFile(js, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, gh, err := routing.LoadTableJSONHeader(b)
		if (err == nil) != c.ok || c.ok && gh.SyncedAt.IsZero() == c.stale {
			t.Fatalf("table JSON, %s: Go's reader: %v, synced_at %v", c.name, err, gh.SyncedAt)
		}
		// The index's header JSON (without the header block, whose flag
		// says synced_at is there).
		idx := withoutBlock(t, writeSnapshot(t, tab, h, true))
		withHeader(t, idx, edit)
		ib, err := os.ReadFile(filepath.Join(filepath.Dir(idx), "table.idx"))
		if err != nil {
			t.Fatal(err)
		}
		x, err := snapindex.Parse("table.idx", ib)
		if (err == nil) != c.ok || c.ok && x.Header.SyncedAt.IsZero() == c.stale {
			t.Fatalf("index, %s: Go's reader: %v", c.name, err)
		}
		for _, f := range []struct{ what, path string }{{"table JSON", js}, {"index", idx}} {
			m := metaPHP(t, f.path, 60)
			switch {
			case !c.ok && !strings.Contains(m.Error, filepath.Dir(f.path)):
				t.Errorf("%s, %s: %+v, want it refused naming the file, as Go's reader refuses it", f.what, c.name, m)
			case c.ok && m.Error != "":
				t.Errorf("%s, %s: %s, want it read, as Go's reader reads it", f.what, c.name, m.Error)
			case c.ok && (m.Stale != c.stale || !c.stale && m.SyncedAt != m.WrittenAt):
				t.Errorf("%s, %s: %+v, want stale %v (synced_at none: counted from written_at, now)", f.what, c.name, m, c.stale)
			}
		}
	}
}

// TestReaderRefusesAMaxAgeThatIsNone: a max age of NaN (staleness off: it
// compares false), INF (never stale), 0 or less (always stale) is a
// ValueError naming it, as in the JS reader; PHP took them silently.
func TestReaderRefusesAMaxAgeThatIsNone(t *testing.T) {
	php(t)
	t.Parallel()
	now := time.Now()
	path := writeTable(t, compile(t, fleet(t), routing.CompileOptions{Now: now}), now)
	script := `require 'RegiondTable.php';
foreach ([NAN, INF, 0.0, -5.0, 900.0] as $m) {
    try { \Regiond\RegiondTable::load($argv[1], $m, posix_geteuid()); echo "loaded {$m}\n"; }
    catch (\ValueError $e) { echo $e->getMessage(), "\n"; }
}`
	out, err := exec.Command(php(t), "-r", script, path).CombinedOutput()
	if err != nil {
		t.Fatalf("php: %v\n%s", err, out)
	}
	want := `regiond: max age NAN: want a positive number of seconds (e.g. 180)
regiond: max age INF: want a positive number of seconds (e.g. 180)
regiond: max age 0: want a positive number of seconds (e.g. 180)
regiond: max age -5: want a positive number of seconds (e.g. 180)
loaded 900
`
	if string(out) != want {
		t.Fatalf("php said:\n%s\nwant:\n%s", out, want)
	}
}

// TestReaderRefusesATimeOutOfRange: a written_at or synced_at whose date or
// time is out of range (2026-02-31, hour 25, second 60, month 13, an offset
// minute of 75) is no RFC 3339 time: Go's time.Parse refuses it, and so
// does the Go reader the file. The PHP reader took it as another instant
// (the day count and gmmktime roll 02-31 over to 03-03, 25:00 to the next
// day): a synced_at pushed ahead kept a table from turning stale-table.
// (And gmmktime read years 0 to 100 as two-digit ones.)
// Now it refuses the file as Go does, through the header JSON of an index
// and the table JSON, and still reads what Go reads at the edges (a leap
// day, year 0, offsets +24:00 and +05:60, ten digits of fraction).
func TestReaderRefusesATimeOutOfRange(t *testing.T) {
	php(t)
	t.Parallel()
	fleettest.CheckTimePremises(t)
	ss := append(slices.Clone(fleettest.TimesOutOfRange), fleettest.TimesAtTheEdges...)
	out := phpScript(t, `require 'RegiondTable.php';
$p = new ReflectionMethod(\Regiond\RegiondTable::class, 'parseTime');
echo json_encode(array_map(fn ($s) => $p->invoke(null, $s), array_slice($argv, 1)));`, ss...)
	var got []*float64
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("php: %v: %s", err, out)
	}
	fleettest.CheckTimesAsGo(t, "PHP", ss, got)

	// Through the files: the index's header JSON (no block) with written_at
	// on 02-31, and the table JSON with synced_at at 25:00; each the same
	// length as the agent's, so every offset holds.
	now := time.Now()
	tab := compile(t, fleet(t), routing.CompileOptions{Now: now})
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now}
	day := regexp.MustCompile(`("written_at":"\d{4})-\d\d-\d\d`)
	idxPath := withoutBlock(t, writeSnapshot(t, tab, h, true))
	idx := filepath.Join(filepath.Dir(idxPath), "table.idx")
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx, day.ReplaceAll(b, []byte("${1}-02-31")), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := metaPHP(t, idxPath, 180); !strings.Contains(m.Error, idx+": written_at or synced_at is not RFC 3339") {
		t.Errorf("an index whose written_at is on 02-31: %+v, want it refused naming the file", m)
	}
	hour := regexp.MustCompile(`("synced_at":"\d{4}-\d\d-\d\dT)\d\d`)
	jsPath := writeSnapshot(t, tab, h, false)
	b, err = os.ReadFile(jsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jsPath, hour.ReplaceAll(b, []byte("${1}25")), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := metaPHP(t, jsPath, 180); !strings.Contains(m.Error, "snapshot "+jsPath+" is not a regiond table: synced_at") {
		t.Errorf("a table JSON whose synced_at is at 25:00: %+v, want it refused naming synced_at", m)
	}
}

package php_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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
// malformed synced_at is refused.
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
	for _, v := range []string{`"yesterday"`, `12`, `null`} {
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

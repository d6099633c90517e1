package php_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// sweepKeys is how many keys every header is decided with in a sweep
// (besides no key), on every path: about 30 of each kind fleettest.Keys
// makes (arbitrary bytes, long, UTF-8, one byte), each compared exactly
// with Go; more cost CI minutes, not cases.
const sweepKeys = 300

// sweepMaxAge is the max age (seconds) readers get in a sweep: the
// snapshot never turns stale however long the tests run; only the stale
// scenario is.
const sweepMaxAge = 1 << 30

// sweepSet is what the sweeps of this package share: the scenarios,
// compiled once, and each scenario's PHP sweeps, run once (a PHP sweep
// through the index takes seconds of CPU; TestIndexReaderMatchesGo and
// TestGoPHPJSAgree compare the same runs).
var sweepSet struct {
	once    sync.Once
	now     time.Time
	scs     []fleettest.Scenario
	headers []string
	keys    []string

	mu     sync.Mutex
	sweeps map[string]*phpSweepRun
}

type phpSweepRun struct {
	once sync.Once
	s    *fleettest.Sweep
	err  error
}

// sweepScenarios returns the shared scenarios, their compile time, and
// the headers and keys of a sweep.
func sweepScenarios(t *testing.T) (scs []fleettest.Scenario, now time.Time, headers, keys []string) {
	t.Helper()
	set := &sweepSet
	set.once.Do(func() {
		set.now = time.Now()
		set.headers, set.keys = fleettest.Headers(), fleettest.Keys(sweepKeys)
		set.sweeps = map[string]*phpSweepRun{}
		set.scs = fleettest.Scenarios(t, set.now)
	})
	if set.scs == nil {
		t.Fatal("the sweep scenarios failed to compile (see the first test that asked for them)")
	}
	return set.scs, set.now, set.headers, set.keys
}

// sweepPHP returns the PHP reader's sweep of the shared scenario sc
// through its index (withIndex) or its full JSON (no index beside it),
// running it on first use: one php process fed every header × (no key,
// keys), each decision through resolve().
func sweepPHP(t *testing.T, sc fleettest.Scenario, withIndex bool) *fleettest.Sweep {
	t.Helper()
	bin := php(t)
	_, now, hs, ks := sweepScenarios(t)
	name := "PHP json"
	if withIndex {
		name = "PHP index"
	}
	set := &sweepSet
	set.mu.Lock()
	r := set.sweeps[sc.Name+"/"+name]
	if r == nil {
		r = &phpSweepRun{}
		set.sweeps[sc.Name+"/"+name] = r
	}
	set.mu.Unlock()
	r.once.Do(func() {
		dir, err := os.MkdirTemp("", "regiond-php-sweep-")
		if err != nil {
			r.err = err
			return
		}
		defer os.RemoveAll(dir)
		r.s, r.err = runPHPSweep(bin, dir, name, sc, now, withIndex, hs, ks)
	})
	if r.err != nil {
		t.Fatalf("%s sweep of %s: %v", name, sc.Name, r.err)
	}
	return r.s
}

// runPHPSweep writes sc's snapshot (with its index when withIndex) into
// dir and runs the driver's sweep on it.
func runPHPSweep(bin, dir, name string, sc fleettest.Scenario, now time.Time, withIndex bool, hs, ks []string) (*fleettest.Sweep, error) {
	h := routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Second)}
	js, err := sc.Table.JSONWith(nil, h)
	if err != nil {
		return nil, fmt.Errorf("encode table.json: %w", err)
	}
	path := filepath.Join(dir, "table.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		return nil, err
	}
	if withIndex {
		idx, err := snapindex.Encode(nil, sc.Table, h)
		if err != nil {
			return nil, fmt.Errorf("encode table.idx: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "table.idx"), idx, 0o644); err != nil {
			return nil, err
		}
	}
	hx := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = hex.EncodeToString([]byte(s))
		}
		return out
	}
	in, err := json.Marshal(map[string]any{"headers": hx(hs), "keys": hx(ks)})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, filepath.Join("testdata", "driver.php"), "sweep", path, strconv.Itoa(sweepMaxAge))
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("php driver.php sweep %s: %v\nstderr: %s", path, err, stderr.String())
	}
	if stderr.Len() > 0 {
		return nil, fmt.Errorf("php driver.php sweep %s wrote to stderr: %s", path, stderr.String())
	}
	out := stdout.Bytes()
	first, rest, _ := bytes.Cut(out, []byte("\n"))
	var meta phpMeta
	if err := json.Unmarshal(first, &meta); err != nil {
		return nil, fmt.Errorf("meta line %q: %w", first, err)
	}
	if meta.Index != withIndex || meta.Revision != sc.Table.Revision() || meta.Epoch != sc.Table.Epoch() || meta.Stale != sc.Table.Stale() {
		return nil, fmt.Errorf("meta %+v, want index=%v revision %d epoch %d stale=%v",
			meta, withIndex, sc.Table.Revision(), sc.Table.Epoch(), sc.Table.Stale())
	}
	return fleettest.ReadSweep(name, rest, hs, ks)
}

// compareGo fails t unless every decision of every sweep is Go's on x,
// naming the first that differ with every sweep's answer.
func compareGo(t *testing.T, what string, x fleettest.Expect, sweeps ...*fleettest.Sweep) fleettest.Counts {
	t.Helper()
	n, bad, msgs, err := x.Compare(sweeps...)
	if err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d decisions differ from Go's; the first:\n  %s", what, bad, n.Decisions, strings.Join(msgs, "\n  "))
	}
	return n
}

// TestGoPHPJSAgree: on every scenario (drained, down, unhealthy, boosted
// pools, NoRoute, stale), every header (AA..ZZ, junk, _unknown) without a
// key and × 1,000 keys decides the same in Go (routing.Table.Resolve), in PHP
// through the index and through the full JSON, and in JS through the
// index: decision by decision the same pool, host, attrs, reasons (stale
// included) or NoRoute; a random pick (no key, affinity random) must be a
// candidate, with its host and attrs. A mismatch names the scenario,
// header and key and shows the four answers.
func TestGoPHPJSAgree(t *testing.T) {
	php(t)
	fleettest.Node(t)
	t.Parallel()
	scs, now, hs, ks := sweepScenarios(t)
	var (
		mu    sync.Mutex
		total fleettest.Counts
	)
	for _, sc := range scs {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			idx, err := snapindex.Encode(nil, sc.Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now.Add(-time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "table.idx")
			if err := os.WriteFile(file, idx, 0o644); err != nil {
				t.Fatal(err)
			}
			js := fleettest.SweepJS(t, "idx", file, sweepMaxAge, hs, ks)
			x := fleettest.Expect{Table: sc.Table, Now: now, WithStale: sc.Table.Stale()}
			n := compareGo(t, "scenario "+sc.Name+": Go, PHP (index, JSON) and JS (index) disagree", x,
				sweepPHP(t, sc, true), sweepPHP(t, sc, false), js)
			t.Logf("%s: Go, PHP index, PHP JSON and JS index agree", n)
			mu.Lock()
			total.Decisions += n.Decisions
			total.Sticky += n.Sticky
			total.Random += n.Random
			total.NoRoute += n.NoRoute
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		if want := len(scs) * len(hs) * sweepKeys / 2; !t.Failed() && (total.NoRoute == 0 || total.Sticky < want) {
			t.Errorf("compared %s: want NoRoute and ≥ %d sticky decisions", total, want)
		}
	})
}

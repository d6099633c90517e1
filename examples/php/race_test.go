package php_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/atomicfile"
	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// genTables returns the example fleet at revision 1 and a function that
// makes the table of the next revision: routes PL and _default carry the
// attr gen = the revision (so every decision for PL and for the unknown
// country says which table it came from), and PL's weights move.
func genTables(t testing.TB, now time.Time) (*routing.Table, func(prev *routing.Table, rev int64) *routing.Table) {
	t.Helper()
	cfg := fleettest.Config(t)
	vals, err := cfg.Values()
	if err != nil {
		t.Fatal(err)
	}
	route := func(name string, rev int64) []byte {
		r := cfg.Routes[name]
		r.Attrs = maps.Clone(r.Attrs)
		if r.Attrs == nil {
			r.Attrs = map[string]string{}
		}
		r.Attrs["gen"] = strconv.FormatInt(rev, 10)
		if name == "PL" && len(r.Targets) == 2 {
			w := 1 + int(rev%99)
			r.Targets = []routing.Target{{Pool: r.Targets[0].Pool, Weight: w}, {Pool: r.Targets[1].Pool, Weight: 100 - w}}
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	opts := routing.CompileOptions{Now: now, Start: now.Add(-time.Hour)}
	var kvs []routing.KV
	for k, v := range vals {
		kvs = append(kvs, routing.KV{Key: k, Value: v, ModRevision: 1})
	}
	for _, name := range []string{"PL", routing.DefaultRoute} {
		kvs = append(kvs, routing.KV{Key: routing.RouteKey(name), Value: route(name, 1), ModRevision: 1})
	}
	first := routing.Compile(1, kvs, nil, opts)
	next := func(prev *routing.Table, rev int64) *routing.Table {
		evs := []routing.Event{
			{KV: routing.KV{Key: routing.RouteKey("PL"), Value: route("PL", rev), ModRevision: rev}},
			{KV: routing.KV{Key: routing.RouteKey(routing.DefaultRoute), Value: route(routing.DefaultRoute, rev), ModRevision: rev}},
		}
		tab := routing.Update(prev, rev, evs, opts)
		if tab == nil {
			t.Fatalf("Update refused revision %d", rev)
		}
		return tab
	}
	return first, next
}

// genCycle returns the table of revision rev for the racing writer: one of
// genCycleLen tables made once (whose routes PL and _default carry a gen
// equal to rev modulo genCycleLen), marked current at rev (a cheap copy),
// so that the writer spends its time writing, not compiling.
const genCycleLen = 64

func genCycle(t testing.TB, now time.Time) func(rev int64) *routing.Table {
	first, next := genTables(t, now)
	tables := make([]*routing.Table, genCycleLen)
	tab := first
	for rev := int64(2); rev < 2+genCycleLen; rev++ {
		tab = next(tab, rev)
		tables[rev%genCycleLen] = tab // gen = rev, and rev % genCycleLen picks it
	}
	return func(rev int64) *routing.Table {
		tab := tables[rev%genCycleLen]
		return tab.WithRevision(rev)
	}
}

// shmTempDir returns a new directory on /dev/shm (where the agent writes),
// or a test temp directory.
func shmTempDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "regiond-php-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// raceResult is the driver's race output.
type raceResult struct {
	Loads, Errors, Mixed, Backwards, Revisions int
	Messages                                   []string
	First, Last                                int64
}

// TestIndexReaderRacingWriter: 8 PHP reader processes load the index and
// resolve in a loop while a writer replaces it atomically (temp, fsync,
// rename, directory fsync) 10,000 times, at least 200 µs apart (about a
// millisecond under -race). No reader sees a torn file or a header and an
// entry of different tables (the entries carry gen = revision % 64: an
// entry of another file read with a header differs), and no reader's
// revision goes backwards.
func TestIndexReaderRacingWriter(t *testing.T) {
	bin := php(t)
	const readers, rewrites = 8, 10000
	now := time.Now()
	tableAt := genCycle(t, now)
	dir := shmTempDir(t)
	idx := filepath.Join(dir, "table.idx")
	stop := filepath.Join(dir, "stop")
	// One encoder per table of the cycle: each reuses its table's entries.
	var encs [genCycleLen]snapindex.Encoder
	var buf []byte
	write := func(rev int64) {
		b, err := encs[rev%genCycleLen].Encode(buf, tableAt(rev), routing.JSONHeader{WrittenAt: now, SyncedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		buf = b
		if err := atomicfile.WriteFile(idx, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(genCycleLen)

	results := make([]raceResult, readers)
	var wg sync.WaitGroup
	ready := make(chan error, readers)
	for i := range readers {
		cmd := exec.Command(bin, filepath.Join("testdata", "driver.php"), "race", idx, stop, strconv.Itoa(genCycleLen))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := bufio.NewReader(out)
			line, err := r.ReadString('\n')
			if err != nil || line != "ready\n" {
				ready <- fmt.Errorf("reader %d: first line %q, %v", i, line, err)
			} else {
				ready <- nil
			}
			rest, _ := io.ReadAll(r)
			if err := cmd.Wait(); err != nil {
				t.Errorf("reader %d: %v\nstderr: %s", i, err, stderr.String())
				return
			}
			if err := json.Unmarshal(rest, &results[i]); err != nil {
				t.Errorf("reader %d output %q: %v", i, rest, err)
			}
		}()
	}
	t.Cleanup(func() { os.WriteFile(stop, nil, 0o644); wg.Wait() }) // readers stop when the test fails early
	for range readers {
		if err := <-ready; err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	const last = genCycleLen + rewrites
	for rev := int64(genCycleLen + 1); rev <= last; rev++ {
		write(rev)
		// At least 200 µs to the next write. Not time.Sleep: a sleep
		// this short lasts about a millisecond on a busy machine (timer
		// and scheduler), which made the 10,000 rewrites take 25-35 s
		// under -race; this wait lets the readers' goroutines run and
		// keeps the writes as many and at least as close together.
		for until := time.Now().Add(200 * time.Microsecond); time.Now().Before(until); {
			runtime.Gosched()
		}
	}
	took := time.Since(began)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	total := 0
	for i, r := range results {
		total += r.Loads
		t.Logf("reader %d: %d loads, %d revisions seen (%d..%d), %d errors, %d mixed, %d backwards", i, r.Loads, r.Revisions, r.First, r.Last, r.Errors, r.Mixed, r.Backwards)
		if r.Errors != 0 || r.Mixed != 0 || r.Backwards != 0 {
			t.Errorf("reader %d: %d errors %q, %d mixed tables, %d revisions going backwards; want none", i, r.Errors, r.Messages, r.Mixed, r.Backwards)
		}
		if r.Revisions < 2 || r.Last != last {
			t.Errorf("reader %d saw %d revisions, the last %d: it did not read while the writer wrote (want the last, %d)", i, r.Revisions, r.Last, last)
		}
	}
	t.Logf("%d rewrites in %v (%.2f ms apart), %d loads by %d readers", rewrites, took, took.Seconds()*1e3/rewrites, total, readers)
}

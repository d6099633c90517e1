package js_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/routing"
)

// TestOwnerRefusesAFileTheAgentDidNotWrite: with opts.owner (the agent's
// uid), both Node index paths refuse an index owned by another uid or
// writable by group or others, naming the file and what is wrong, and
// decide from the agent's own file; an owner given by name (not a uid) is
// refused saying so.
func TestOwnerRefusesAFileTheAgentDidNotWrite(t *testing.T) {
	node(t)
	now := time.Now()
	idx := indexFile(t, fleettest.Scenarios(t, now)[0].Table, now, now)
	me, other := os.Getuid(), os.Getuid()+1
	type outcome struct {
		OK      bool   `json:"ok"`
		Message string `json:"message"`
	}
	run := func(uid int) []outcome {
		t.Helper()
		var out []outcome
		if err := json.Unmarshal(runNode(t, nil, "owner", idx, strconv.Itoa(uid)), &out); err != nil || len(out) != 2 {
			t.Fatalf("driver owner: %v %v", out, err)
		}
		return out
	}
	for i, o := range run(me) {
		if !o.OK {
			t.Errorf("path %d: the agent's own file refused: %s", i, o.Message)
		}
	}
	for i, o := range run(other) {
		if o.OK || !strings.Contains(o.Message, idx) || !strings.Contains(o.Message, "is owned by uid "+strconv.Itoa(me)+", not the agent's uid "+strconv.Itoa(other)) {
			t.Errorf("path %d: a file of another uid: %+v, want refused naming the file and owner", i, o)
		}
	}
	var named []outcome
	if err := json.Unmarshal(runNode(t, nil, "owner", idx, "regiond"), &named); err != nil || len(named) != 2 {
		t.Fatalf("driver owner by name: %v %v", named, err)
	}
	for i, o := range named {
		if o.OK || !strings.Contains(o.Message, `owner must be the agent's uid`) || !strings.Contains(o.Message, `"regiond"`) {
			t.Errorf("path %d: an owner given by name: %+v, want refused saying a uid is needed", i, o)
		}
	}
	if err := os.Chmod(idx, 0o646); err != nil {
		t.Fatal(err)
	}
	for i, o := range run(me) {
		if o.OK || !strings.Contains(o.Message, "writable by group or others (mode 0646)") {
			t.Errorf("path %d: a file writable by others: %+v, want refused naming the mode", i, o)
		}
	}
}

// TestFIFOBlocksNoReader: a FIFO in the index's place (another user's, in
// a directory they made first) is opened without blocking (O_NONBLOCK: it
// blocked the event loop until a writer came), and refused as no regular
// file, with the owner given or not.
func TestFIFOBlocksNoReader(t *testing.T) {
	node(t)
	idx := filepath.Join(t.TempDir(), "table.idx")
	if err := syscall.Mkfifo(idx, 0o644); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		OK      bool   `json:"ok"`
		Message string `json:"message"`
	}
	for _, owner := range []string{strconv.Itoa(os.Getuid()), ""} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		args := []string{filepath.Join("testdata", "driver.mjs"), "owner", idx}
		if owner != "" {
			args = append(args, owner)
		}
		out, err := exec.CommandContext(ctx, node(t), args...).Output()
		blocked := ctx.Err() != nil
		cancel()
		if blocked {
			t.Fatalf("owner %q: the reader blocked on a FIFO (killed after 20 s)", owner)
		}
		var got []outcome
		if err != nil || json.Unmarshal(out, &got) != nil || len(got) != 2 {
			t.Fatalf("owner %q: driver: %v: %s", owner, err, out)
		}
		for i, o := range got {
			if o.OK || !strings.Contains(o.Message, idx) || !strings.Contains(o.Message, "is not a regular file (mode 01") {
				t.Errorf("owner %q, path %d: %+v, want refused naming the file as no regular file", owner, i, o)
			}
		}
	}
}

// TestForgedSlotLengthIsATableError: a slot whose entry length is past
// the file (a corrupt or forged index: 0xFFFFFFF0) is a TableError naming
// the slot, through both Node paths; the reader allocated the length
// first (a RangeError past 2 GiB, gigabytes below it).
func TestForgedSlotLengthIsATableError(t *testing.T) {
	node(t)
	now := time.Now()
	idx := indexFile(t, fleettest.Scenarios(t, now)[0].Table, now, now)
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	pl := -1
	for i := range snapindex.UnknownSlot {
		if snapindex.SlotCode(i) == "PL" {
			pl = i
		}
	}
	hlen := int(binary.LittleEndian.Uint16(b[6:8]))
	binary.LittleEndian.PutUint32(b[8+hlen+12*pl+4:], 0xFFFFFFF0)
	if err := os.WriteFile(idx, b, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import { readIndexFile, decideFromIndexFileAsync } from './node.mjs';
const out = [];
try { readIndexFile(process.argv[1], 'PL'); out.push('read'); } catch (e) { out.push(e.name + ': ' + e.message); }
try { await decideFromIndexFileAsync(process.argv[1], 'PL', ''); out.push('read'); } catch (e) { out.push(e.name + ': ' + e.message); }
console.log(out.join('\n'));
`
	out, err := exec.Command(node(t), "--input-type=module", "-e", script, idx).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := fmt.Sprintf("TableError: regiond: %s: slot %d: entry at ", idx, pl)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], want) || !strings.HasPrefix(lines[1], want) || !strings.Contains(lines[0], "+4294967280 is past the end of the file") {
		t.Fatalf("node said:\n%s\nwant two lines starting %q", out, want)
	}
}

// TestIndexReaderFollowsTheFile: the caching IndexReader answers from the
// file the path names now: after the agent renames another table in, its
// decisions are the new file's, as decideFromIndexFile's; a file made
// writable by others under it is refused on the next call (owner given),
// and a missing one is a TableError naming the path.
func TestIndexReaderFollowsTheFile(t *testing.T) {
	node(t)
	now := time.Now()
	sc := fleettest.Scenarios(t, now)
	dir := t.TempDir()
	path := filepath.Join(dir, "table.idx")
	put := func(name string) {
		t.Helper()
		for _, s := range sc {
			if s.Name != name {
				continue
			}
			b, err := snapindex.Encode(nil, s.Table, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
			if err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(dir, ".tmp")
			if err := os.WriteFile(tmp, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil { // as the agent publishes
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("no scenario %s", name)
	}
	put("fleet")
	script := `
import { createInterface } from 'node:readline';
import { IndexReader, decideFromIndexFile } from './node.mjs';
const [path, owner] = process.argv.slice(1);
const reader = new IndexReader(path, { owner: Number(owner) });
const ccs = ['PL', 'DE', 'FR', 'US', 'KR', 'zz'];
const show = (f) => { try { const d = f(); return d.pool + '/' + d.degraded.join('+'); } catch (e) { return e.name + ': ' + e.message; } };
// One line of stdin per step: the Go side changes the file in between.
for await (const _ of createInterface({ input: process.stdin })) {
  const got = ccs.map((cc) => show(() => reader.decide(cc, 'viewer-7')));
  const want = ccs.map((cc) => show(() => decideFromIndexFile(path, cc, 'viewer-7', { owner: Number(owner) })));
  console.log(JSON.stringify({ got, want }));
}
`
	cmd := exec.Command(node(t), "--input-type=module", "-e", script, path, strconv.Itoa(os.Getuid()))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	dec := json.NewDecoder(stdout)
	step := func(what string) []string {
		t.Helper()
		same := what != "the file gone" // the reader names its stat, the reference its open
		if _, err := stdin.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
		var r struct{ Got, Want []string }
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, stderr.String())
		}
		if same && strings.Join(r.Got, " ") != strings.Join(r.Want, " ") {
			t.Errorf("%s: the reader decides %v, decideFromIndexFile %v", what, r.Got, r.Want)
		}
		return r.Got
	}
	first := step("the fleet")
	step("the fleet again (from memory)")
	put("drained")
	if drained := step("the drained table renamed in"); strings.Join(drained, " ") == strings.Join(first, " ") {
		t.Fatalf("the drained table decides as the fleet did (%v): the test needs tables that differ", drained)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, g := range step("the file made writable by others") {
		if !strings.Contains(g, "is writable by group or others") {
			t.Errorf("a file writable by others: %s, want it refused", g)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for _, g := range step("the file gone") {
		if !strings.HasPrefix(g, "TableError: regiond: stat index "+path) {
			t.Errorf("no file: %s, want a TableError naming the path", g)
		}
	}
}

// TestIndexReaderHandsOutCopies: what IndexReader.decide returns (a
// decision's attrs and degraded, a NoRouteError's reasons) is the
// caller's to change: the entries it keeps stay as read. An owner given to
// decide, not to the reader, would be ignored: it throws instead.
func TestIndexReaderHandsOutCopies(t *testing.T) {
	node(t)
	now := time.Now()
	var idx string
	for _, sc := range fleettest.Scenarios(t, now) {
		if sc.Name == "down" {
			idx = indexFile(t, sc.Table, now, now)
		}
	}
	script := `
import { IndexReader } from './node.mjs';
const reader = new IndexReader(process.argv[1]);
const out = [];
const noRoute = () => { try { reader.decide('DE', 'viewer-7'); return 'routed'; } catch (e) { return e; } };
const e1 = noRoute();
out.push(e1.name + ' ' + e1.reasons.length);
e1.reasons.push('changed-by-caller');
out.push('reasons kept: ' + !noRoute().reasons.includes('changed-by-caller'));
const d = reader.decide('US', 'viewer-7');
d.attrs.changed = 'by-caller';
d.degraded.push('changed-by-caller');
const d2 = reader.decide('US', 'viewer-7');
out.push('decision kept: ' + (d2.attrs.changed === undefined && !d2.degraded.includes('changed-by-caller')));
try { reader.decide('US', 'viewer-7', { owner: 0 }); out.push('owner ignored'); } catch (e) { out.push(e.name + ': ' + e.message); }
console.log(out.join('\n'));
`
	out, err := exec.Command(node(t), "--input-type=module", "-e", script, idx).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NoRouteError ") || lines[0] == "NoRouteError 0" ||
		lines[1] != "reasons kept: true" || lines[2] != "decision kept: true" ||
		!strings.HasPrefix(lines[3], "TypeError: regiond: IndexReader.decide: owner 0 differs from the reader's undefined") {
		t.Fatalf("IndexReader copies and owner:\n%s", out)
	}
}

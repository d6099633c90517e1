package js_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/internal/snapindex"
	"github.com/regiond/regiond/internal/testprog"
	"github.com/regiond/regiond/routing"
)

// ownerOutcome is one reader path's outcome in the driver's owner mode.
type ownerOutcome struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	D       struct {
		Host string `json:"host"`
	} `json:"d"`
}

// runOwner runs the driver's owner mode on idx (PL without a key through
// decideFromIndexFile, decideFromIndexFileAsync and an IndexReader) with
// opts.owner = owner, or none given for nil.
func runOwner(t *testing.T, idx string, owner *string) []ownerOutcome {
	t.Helper()
	args := []string{"owner", idx}
	if owner != nil {
		args = append(args, *owner)
	}
	var out []ownerOutcome
	if err := json.Unmarshal(runNode(t, nil, args...), &out); err != nil || len(out) != 3 {
		t.Fatalf("driver %v: %v %v", args, out, err)
	}
	return out
}

// TestOwnerRefusesAFileTheAgentDidNotWrite: with opts.owner (the agent's
// user, by uid or by name), the three Node index paths refuse an index
// owned by another uid or writable by group or others, naming the file,
// what is wrong and what to pass, and decide from the agent's own file; a
// name that is no user is refused saying what to pass, before the file
// is opened. An empty owner (the opt-out) reads a file of any owner.
func TestOwnerRefusesAFileTheAgentDidNotWrite(t *testing.T) {
	node(t)
	now := time.Now()
	idx := indexFile(t, fleettest.Scenarios(t, now)[0].Table, now, now)
	me, other := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getuid()+1)
	owners := []string{me, ""}
	if u, err := user.Current(); err == nil {
		owners = append(owners, u.Username) // looked up in /etc/passwd
	}
	for _, owner := range owners {
		for i, o := range runOwner(t, idx, &owner) {
			if !o.OK {
				t.Errorf("owner %q, path %d: the agent's own file refused: %s", owner, i, o.Message)
			}
		}
	}
	for i, o := range runOwner(t, idx, &other) {
		if o.OK || !strings.Contains(o.Message, idx) || !strings.Contains(o.Message, "is owned by uid "+me+", not the agent's uid "+other+": refusing") ||
			!strings.Contains(o.Message, "{ owner: 'USER' }") || !strings.Contains(o.Message, "{ owner: '' } to read an index of any owner (unsafe") {
			t.Errorf("path %d: a file of another uid: %+v, want refused naming the file, its owner and what to pass", i, o)
		}
	}
	nobody := "nobody" // uid 65534 on Debian
	if u, err := user.Lookup(nobody); err == nil && u.Uid != me {
		for i, o := range runOwner(t, idx, &nobody) {
			if want := "is owned by uid " + me + ", not the agent's uid " + u.Uid + " (owner 'nobody')"; o.OK || !strings.Contains(o.Message, want) {
				t.Errorf("path %d: a file not of the owner named: %+v, want %q", i, o, want)
			}
		}
	}
	missing := filepath.Join(t.TempDir(), "table.idx")
	for _, idx := range []string{idx, missing} {
		unknown := "no-such-user-regiond-test"
		for i, o := range runOwner(t, idx, &unknown) {
			if o.OK || !strings.HasPrefix(o.Message, "regiond: owner 'no-such-user-regiond-test': no such user in /etc/passwd; name the user the agent runs as") {
				t.Errorf("%s, path %d: an unknown owner name: %+v, want a TableError naming the owner, whether or not the file exists", idx, i, o)
			}
		}
	}
	if err := os.Chmod(idx, 0o646); err != nil {
		t.Fatal(err)
	}
	for i, o := range runOwner(t, idx, &me) {
		if o.OK || !strings.Contains(o.Message, "writable by group or others (mode 0646)") {
			t.Errorf("path %d: a file writable by others: %+v, want refused naming the mode", i, o)
		}
	}
	none := ""
	for i, o := range runOwner(t, idx, &none) {
		if !o.OK {
			t.Errorf("path %d: a file writable by others, owner '': %s, want it read (no check)", i, o.Message)
		}
	}
}

// defaultOwnerRefusal is what the readers say, given no owner (the
// default, regiond), of an index owned by uid fileUID: no such user on a
// host without one (this test machine), else not the agent's uid.
func defaultOwnerRefusal(t *testing.T, fileUID int) string {
	t.Helper()
	u, err := user.Lookup("regiond")
	if err != nil {
		return "regiond: owner 'regiond' (the default: the package's agent user): no such user in /etc/passwd; name the user the agent runs as, { owner: 'USER' }"
	}
	if u.Uid == strconv.Itoa(fileUID) {
		t.Skip("the index is owned by user regiond: the default owner would read it")
	}
	return "is owned by uid " + strconv.Itoa(fileUID) + ", not the agent's uid " + u.Uid + " (owner 'regiond'): refusing a table the agent may not have written; name the user the agent runs as"
}

// TestForgedTableRefusedByDefault: a local user (uid 4242) who made the
// snapshot's directory before the agent (in /dev/shm, which anyone may
// write) and put an index there sending German viewers to a US edge: the
// three Node paths without an owner (the default: the package's user,
// regiond) refuse it, saying what to pass, and so do they naming the
// agent's user (here root, by uid and by name); the agent's own index, of
// the user named, is read. Only an empty owner (the opt-out) reads the
// forged index. Run as root (to chown).
func TestForgedTableRefusedByDefault(t *testing.T) {
	node(t)
	testprog.NeedRoot(t, "the forged index is chowned to another uid")
	now := time.Now()
	table := func(y string) *routing.Table {
		t.Helper()
		cfg, err := routing.ParseConfig([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		tab, err := routing.CompileConfig(cfg, nil, routing.CompileOptions{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	shm := "/dev/shm"
	if fi, err := os.Stat(shm); err != nil || !fi.IsDir() {
		shm = ""
	}
	base, err := os.MkdirTemp(shm, "regiond-js-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "regiond") // as the agent would have made it: /dev/shm/regiond
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, "table.idx")
	write := func(tab *routing.Table) {
		t.Helper()
		b, err := snapindex.Encode(nil, tab, routing.JSONHeader{WrittenAt: now, SyncedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(idx, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	str := func(s string) *string { return &s }

	// The agent's index, owned by the user named (root): read.
	write(table(fleettest.OwnerFleet))
	for _, owner := range []string{"0", "root"} {
		for i, o := range runOwner(t, idx, &owner) {
			if !o.OK || o.D.Host != "edge-fra-1.example.net:443" {
				t.Errorf("owner %s, path %d: the agent's own index: %+v, want the EU edge", owner, i, o)
			}
		}
	}
	for i, o := range runOwner(t, idx, nil) {
		if want := defaultOwnerRefusal(t, 0); o.OK || !strings.Contains(o.Message, want) {
			t.Errorf("path %d: the test's index (uid 0), no owner given: %+v, want refused: %q", i, o, want)
		}
	}

	// Mallory's: her directory and index.
	const mallory = 4242
	write(table(fleettest.ForgedOwnerFleet))
	for _, f := range []string{dir, idx} {
		if err := os.Chown(f, mallory, mallory); err != nil {
			t.Fatal(err)
		}
	}
	for i, o := range runOwner(t, idx, nil) {
		if want := defaultOwnerRefusal(t, mallory); o.OK || !strings.Contains(o.Message, want) {
			t.Errorf("path %d: a forged index of uid %d, no owner given: %+v, want refused: %q", i, mallory, o, want)
		}
	}
	for _, owner := range []string{"0", "root"} {
		want := fmt.Sprintf("regiond: snapshot index %s is owned by uid %d, not the agent's uid 0", idx, mallory)
		if owner == "root" {
			want += " (owner 'root')"
		}
		want += ": refusing a table the agent may not have written; name the user the agent runs as"
		for i, o := range runOwner(t, idx, &owner) {
			if o.OK || !strings.HasPrefix(o.Message, want) {
				t.Errorf("owner %s, path %d: a forged index: %+v, want %q", owner, i, o, want)
			}
		}
	}
	for i, o := range runOwner(t, idx, str("")) {
		if !o.OK || o.D.Host != "edge-iad-9.example.net:443" {
			t.Errorf("path %d: the forged index with owner '' (no check): %+v, want its US edge (what the opt-out reads)", i, o)
		}
	}
}

// TestFIFOBlocksNoReader: a FIFO in the index's place (another user's, in
// a directory they made first) is opened without blocking (O_NONBLOCK: it
// blocked the event loop until a writer came), and refused as no regular
// file, with the owner given or the check opted out of.
func TestFIFOBlocksNoReader(t *testing.T) {
	node(t)
	idx := filepath.Join(t.TempDir(), "table.idx")
	if err := syscall.Mkfifo(idx, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{strconv.Itoa(os.Getuid()), ""} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		args := []string{filepath.Join("testdata", "driver.mjs"), "owner", idx, owner}
		out, err := exec.CommandContext(ctx, node(t), args...).Output()
		blocked := ctx.Err() != nil
		cancel()
		if blocked {
			t.Fatalf("owner %q: the reader blocked on a FIFO (killed after 20 s)", owner)
		}
		var got []ownerOutcome
		if err != nil || json.Unmarshal(out, &got) != nil || len(got) != 3 {
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
try { readIndexFile(process.argv[1], 'PL', process.getuid()); out.push('read'); } catch (e) { out.push(e.name + ': ' + e.message); }
try { await decideFromIndexFileAsync(process.argv[1], 'PL', '', { owner: process.getuid() }); out.push('read'); } catch (e) { out.push(e.name + ': ' + e.message); }
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
	// The file whose entries it keeps, it keeps open (snapshot-index.md:
	// an inode number remembered from a closed file can be a newer
	// table's), and it closes it once another is renamed in.
	held := func() (open, deleted int) {
		t.Helper()
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			switch l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name())); l {
			case path:
				open++
			case path + " (deleted)":
				deleted++
			}
		}
		return open, deleted
	}
	first := step("the fleet")
	step("the fleet again (from memory)")
	if open, deleted := held(); open != 1 || deleted != 0 {
		t.Errorf("after reading the fleet: the reader holds %d descriptor(s) of %s and %d of a deleted file; want 1 and 0", open, path, deleted)
	}
	put("drained")
	if drained := step("the drained table renamed in"); strings.Join(drained, " ") == strings.Join(first, " ") {
		t.Fatalf("the drained table decides as the fleet did (%v): the test needs tables that differ", drained)
	}
	if open, deleted := held(); open != 1 || deleted != 0 {
		t.Errorf("after the drained table was renamed in: the reader holds %d descriptor(s) of %s and %d of the replaced file; want 1 and 0", open, path, deleted)
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
// decide, not to the reader, would be ignored: it throws instead; as does
// an owner given to decide for a reader made without one (the default,
// regiond).
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
const reader = new IndexReader(process.argv[1], { owner: process.getuid() });
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
try { reader.decide('US', 'viewer-7', { owner: 4242 }); out.push('owner ignored'); } catch (e) { out.push(e.name + ': ' + e.message); }
try { new IndexReader(process.argv[1]).decide('US', 'viewer-7', { owner: 4242 }); out.push('owner ignored'); } catch (e) { out.push(e.name + ': ' + e.message); }
console.log(out.join('\n'));
`
	out, err := exec.Command(node(t), "--input-type=module", "-e", script, idx).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "NoRouteError ") || lines[0] == "NoRouteError 0" ||
		lines[1] != "reasons kept: true" || lines[2] != "decision kept: true" ||
		!strings.HasPrefix(lines[3], "TypeError: regiond: IndexReader.decide: owner 4242 differs from the reader's "+strconv.Itoa(os.Getuid())) ||
		!strings.HasPrefix(lines[4], `TypeError: regiond: IndexReader.decide: owner 4242 differs from the reader's "regiond"`) {
		t.Fatalf("IndexReader copies and owner:\n%s", out)
	}
}

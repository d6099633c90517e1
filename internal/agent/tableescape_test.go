package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/regiond/regiond/internal/api"
)

// headerTimes matches the members of a table JSON's header that differ at
// every render: written_at and synced_at.
var headerTimes = regexp.MustCompile(`"(written_at|synced_at)":"[^"]*"`)

// withoutTimes is a table JSON with its header's times blanked.
func withoutTimes(b []byte) []byte { return headerTimes.ReplaceAll(b, []byte(`"$1":""`)) }

// TestTableEscapesControlsTheSnapshotFileKeeps: /v1/table writes DEL and
// the C1 controls as \u escapes, as every other answer of the API does: a
// key an origin named with U+009B (the 8-bit CSI) no longer reaches the
// terminal of whoever curls the table raw. The answer is the same JSON
// (it decodes to the snapshot file's value) with the same ETag, while the
// snapshot file, machine data for the front doors, keeps the bytes as
// they were. A raw ESC (a C0 control) never reached either: encoding/json
// escapes it. A table without such characters is served byte for byte as
// the snapshot file has it, but for the times of its header.
func TestTableEscapesControlsTheSnapshotFileKeeps(t *testing.T) {
	h, cli := startExampleAgent(t)
	file := filepath.Join(h.dir, "shm", "table.json")
	table := func() ([]byte, http.Header) {
		t.Helper()
		resp, err := h.http.Get("http://" + h.a.Addr() + "/v1/table")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/table: HTTP %d %v", resp.StatusCode, err)
		}
		return b, resp.Header
	}
	var served, onDisk []byte
	waitFor(t, "/v1/table and the snapshot file at the same table", func() bool {
		served, _ = table()
		onDisk, _ = os.ReadFile(file)
		return bytes.Equal(withoutTimes(served), withoutTimes(onDisk))
	})

	csi, esc, del := "health/eu-west/x\u009b31mz", "health/eu-west/y\x1b[2Jz", "health/eu-west/z\u007fz"
	var rev int64
	for _, k := range []string{csi, esc, del} {
		r, err := cli.Put(context.Background(), prefix+k, "up")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	type tableJSON struct {
		Revision int64 `json:"revision"`
		Skipped  []struct {
			Key string `json:"key"`
		} `json:"skipped"`
	}
	skipped := func(b []byte) []string {
		var tj tableJSON
		if err := json.Unmarshal(b, &tj); err != nil {
			t.Fatalf("not a table JSON: %v\n%s", err, b)
		}
		if tj.Revision < rev {
			return nil
		}
		var keys []string
		for _, s := range tj.Skipped {
			keys = append(keys, s.Key)
		}
		return keys
	}
	var hd http.Header
	waitFor(t, "the three keys skipped in /v1/table and the snapshot file", func() bool {
		served, hd = table()
		onDisk, _ = os.ReadFile(file)
		return len(skipped(served)) == 3 && slices.Equal(skipped(served), skipped(onDisk))
	})
	if got := skipped(served); !slices.Contains(got, csi) || !slices.Contains(got, esc) || !slices.Contains(got, del) {
		t.Fatalf("/v1/table skipped %q, want %q, %q and %q", got, csi, esc, del)
	}
	for _, raw := range []string{"\u009b", "\x1b", "\u007f"} {
		if bytes.Contains(served, []byte(raw)) {
			t.Errorf("/v1/table holds %q raw:\n%s", raw, served)
		}
	}
	for _, escaped := range []string{`x\u009b31mz`, `y\u001b[2Jz`, `z\u007fz`} {
		if !bytes.Contains(served, []byte(escaped)) {
			t.Errorf("/v1/table does not hold %s:\n%s", escaped, served)
		}
	}
	// The snapshot file keeps DEL and the C1 control as they were.
	if !bytes.Contains(onDisk, []byte("x\u009b31mz")) || !bytes.Contains(onDisk, []byte("z\u007fz")) {
		t.Errorf("the snapshot file no longer holds the keys' DEL and U+009B raw:\n%s", onDisk)
	}
	// The same JSON: the answer decodes to the file's value.
	var fromAPI, fromFile any
	if err := json.Unmarshal(withoutTimes(served), &fromAPI); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(withoutTimes(onDisk), &fromFile); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromAPI, fromFile) {
		t.Fatalf("/v1/table and the snapshot file decode to different values:\n%s\n%s", served, onDisk)
	}
	// The same table, named alike: the ETag is /v1/resolve's, the
	// revision header the body's.
	resp, err := h.http.Get("http://" + h.a.Addr() + "/v1/resolve?country=DE&key=k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var tj tableJSON
	if err := json.Unmarshal(served, &tj); err != nil {
		t.Fatal(err)
	}
	if hd.Get("ETag") == "" || hd.Get("ETag") != resp.Header.Get("ETag") || hd.Get(api.HeaderRevision) != strconv.FormatInt(tj.Revision, 10) {
		t.Fatalf("/v1/table ETag %q revision %q; want /v1/resolve's ETag %q and the body's revision %d", hd.Get("ETag"), hd.Get(api.HeaderRevision),
			resp.Header.Get("ETag"), tj.Revision)
	}
}

package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/regiond/regiond/internal/snapindex"
)

// TestValueNotUTF8IsSkipped: a pool value put by hand holding a byte that
// is not UTF-8 (a lone 0x9b in an unknown field, which encoding/json
// accepts and json.Compact copied raw) is refused like any other invalid
// value: skipped, named with the byte and its offset, the key's last good
// value serving. Two health keys put by an origin with such a byte in
// their instance are named by stand-ins, each its own. /v1/table, the
// snapshot file and its index stay valid UTF-8: PHP's json_decode refuses a
// whole document that is not (the front doors would read no table), and a
// lone 0x9b is the 8-bit CSI of a terminal curling /v1/table.
func TestValueNotUTF8IsSkipped(t *testing.T) {
	h, cli := startExampleAgent(t)
	ctx := context.Background()
	good := `{"host":"edge-ams-1.example.net:443","region":"eu-west","residency":"eu","x":"good"}`
	bad := "{\"host\":\"edge-ams-1.example.net:443\",\"region\":\"eu-west\",\"residency\":\"eu\",\"x\":\"a\x9b31mb\"}"
	var rev int64
	for _, kv := range [][2]string{
		{"pools/eu-west", good}, {"pools/eu-west", bad},
		{"health/eu-west/h\x9b1", "up"}, {"health/eu-west/h\x9c1", "up"},
	} {
		r, err := cli.Put(ctx, prefix+kv[0], kv[1])
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	type tableJSON struct {
		Revision int64 `json:"revision"`
		Pools    map[string]struct {
			X string `json:"x"`
		} `json:"pools"`
		Skipped []struct {
			Key   string `json:"key"`
			Error string `json:"error"`
		} `json:"skipped"`
	}
	shm := filepath.Join(h.dir, "shm")
	var served, onDisk, idx []byte
	var tj tableJSON
	waitFor(t, "/v1/table and the snapshot file at the hand edits' revision", func() bool {
		resp, err := h.http.Get("http://" + h.a.Addr() + "/v1/table")
		if err != nil {
			t.Fatal(err)
		}
		served, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/table: HTTP %d %v", resp.StatusCode, err)
		}
		onDisk, _ = os.ReadFile(filepath.Join(shm, "table.json"))
		idx, _ = os.ReadFile(filepath.Join(shm, "table.idx"))
		var a, b tableJSON
		return json.Unmarshal(served, &a) == nil && json.Unmarshal(onDisk, &b) == nil && a.Revision >= rev && b.Revision >= rev &&
			len(idx) > 0 && json.Unmarshal(served, &tj) == nil
	})
	for name, b := range map[string][]byte{"/v1/table": served, "table.json": onDisk} {
		if !utf8.Valid(b) {
			t.Errorf("%s is not valid UTF-8 (PHP's json_decode refuses it whole):\n%q", name, b)
		}
	}
	x, err := snapindex.Parse("table.idx", idx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range snapindex.Slots {
		if s := x.Slot(i); !utf8.Valid(idx[s.Offset : s.Offset+s.Length]) {
			t.Errorf("table.idx: the entry of slot %d is not valid UTF-8 (PHP's json_decode refuses it): %q", i, idx[s.Offset:s.Offset+s.Length])
		}
	}
	if x := tj.Pools["eu-west"].X; x != "good" {
		t.Errorf("eu-west serves x %q, want %q: the last good value, the value not UTF-8 refused", x, "good")
	}
	why := map[string]string{}
	for _, s := range tj.Skipped {
		why[s.Key] = s.Error
	}
	if w := why["pools/eu-west"]; !strings.Contains(w, "pools/eu-west: value is not valid UTF-8 (JSON must be): byte 0x9b at offset 79 (counting from 0)") {
		t.Errorf("pools/eu-west skipped for %q, want the byte not UTF-8 and its offset named; skipped: %q", w, why)
	}
	var standIns []string
	for k := range why {
		if strings.HasPrefix(k, "health/eu-west/h… (18 bytes, sha256 ") {
			standIns = append(standIns, k)
		}
	}
	if len(standIns) != 2 {
		t.Errorf("skipped %q, want the two health keys not UTF-8 named by two stand-ins of their own", why)
	}
}

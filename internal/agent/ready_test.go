package agent_test

import (
	"io"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/devetcd"
)

// TestNotReadyWithoutPools: an agent synced with a prefix that holds no
// pools (a wrong --prefix, or no config applied yet) routes nothing, and
// /readyz says so (503, naming --prefix and regionctl apply); once a
// config is applied it is ready.
func TestNotReadyWithoutPools(t *testing.T) {
	srv := devetcd.NewTest(t)
	cli := devetcd.NewTestClient(t, srv)
	h := startAgent(t, t.TempDir(), srv.Endpoints)
	readyz := func() (int, string) {
		resp, err := h.http.Get("http://" + h.a.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, "the first sync", func() bool { return h.snapshot() != nil })
	if code, body := readyz(); code != 503 || !strings.Contains(body, "has no pools") || !strings.Contains(body, "--prefix") ||
		!strings.Contains(body, "regionctl apply") {
		t.Fatalf("/readyz synced with an empty prefix: %d %q, want 503 saying there are no pools", code, body)
	}
	loadExample(t, cli)
	waitFor(t, "ready once a config is applied", func() bool { code, _ := readyz(); return code == 200 })
}

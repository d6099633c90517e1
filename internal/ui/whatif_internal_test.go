package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/regiond/regiond/internal/fleettest"
	"github.com/regiond/regiond/routing"
)

// TestWhatIfOneAtATime: a what-if resolves every country, a CPU's work:
// one is computed at a time (another meanwhile is a 429 with Retry-After,
// not a second CPU taken from the front doors), and the last answer is
// reused while its table serves and the same pools are asked down, in
// any order; a new table is answered anew.
func TestWhatIfOneAtATime(t *testing.T) {
	cfg := fleettest.Config(t)
	compile := func() *routing.Table {
		tb, err := routing.CompileConfig(cfg, nil, routing.CompileOptions{Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	var table atomic.Pointer[routing.Table]
	table.Store(compile())
	h := New(Config{Table: table.Load}).(*handler)
	get := func(q string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/ui/api/whatif?"+q, nil))
		return rec
	}
	first := get("down=eu-central,eu-west")
	if first.Code != http.StatusOK || !strings.Contains(first.Body.String(), `"no_route"`) {
		t.Fatalf("what-if: %d %s", first.Code, first.Body)
	}

	h.whatIfBusy <- struct{}{} // another what-if is being computed
	if r := get("down=eu-central,eu-west"); r.Code != http.StatusOK || r.Body.String() != first.Body.String() {
		t.Errorf("the same what-if again (same table) while another runs: %d, want the answer reused", r.Code)
	}
	if r := get("down=eu-west&down=eu-central"); r.Code != http.StatusOK || r.Body.String() != first.Body.String() {
		t.Errorf("the same pools in another order: %d, want the answer reused", r.Code)
	}
	r := get("down=eu-north")
	if r.Code != http.StatusTooManyRequests || r.Header().Get("Retry-After") != "1" || !strings.Contains(r.Body.String(), "one at a time") ||
		!strings.Contains(r.Body.String(), `"code":"too_many_waiting"`) {
		t.Errorf("another what-if while one runs: %d %q %s, want 429 with Retry-After", r.Code, r.Header().Get("Retry-After"), r.Body)
	}
	<-h.whatIfBusy
	if r := get("down=eu-north"); r.Code != http.StatusOK {
		t.Errorf("once the other is done: %d %s", r.Code, r.Body)
	}
	table.Store(compile()) // a new table: answered anew
	h.whatIfBusy <- struct{}{}
	if r := get("down=eu-north"); r.Code != http.StatusTooManyRequests {
		t.Errorf("the last what-if's pools on a new table: %d, want it computed anew (429 while another runs)", r.Code)
	}
	<-h.whatIfBusy
}

// TestAPIWithoutATable: before the agent has a table, each /ui/api/ that
// reads one answers 503 with a JSON error saying so, not a panic or an
// empty list that would read as "no pools".
func TestAPIWithoutATable(t *testing.T) {
	h := New(Config{Table: func() *routing.Table { return nil }}).(*handler)
	for _, path := range []string{"/ui/api/boosts", "/ui/api/pools", "/ui/api/whatif?down=eu-west"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"error":"no routing table loaded yet","code":"no_table"`) {
			t.Errorf("%s without a table: %d %s; want 503 with the JSON error", path, rec.Code, rec.Body)
		}
	}
}

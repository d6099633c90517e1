package api

import (
	"fmt"
	"testing"
)

// TestTCPBlockingQueriesGiveBackTheirPlace: a blocking query over TCP
// takes a place among the TCP half of --max-blocking-queries only while it
// waits. With a cap of 2 (one place over TCP), waits one after the other
// are each answered: a place kept after its wait ended would have the
// agent refuse every later blocking query over TCP with 429 for good.
func TestTCPBlockingQueriesGiveBackTheirPlace(t *testing.T) {
	h := startAPI(t, Config{MaxWaiting: 2}, false)
	ahead := h.m.Table().Revision() + 1000
	for i := range 4 {
		for _, p := range []string{"/v1/resolve?country=PL&", "/v1/table?"} {
			a := h.get(fmt.Sprintf("%smin_revision=%d&wait=20ms", p, ahead))
			if a.code != 200 || a.hd.Get(HeaderWait) != WaitTimeout {
				t.Fatalf("wait %d, GET %s: %v, %s %q; want 200 and %q (each wait gives its place back)", i, p, a, HeaderWait, a.hd.Get(HeaderWait), WaitTimeout)
			}
		}
	}
	if n := h.s.Waiting(); n != 0 {
		t.Errorf("Waiting() = %d after every wait ended, want 0", n)
	}
}

package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// TestBlockingQuery: /v1/resolve?min_revision=N waits until the table is
// current at N and answers from that table (a client reads its own write
// without polling); when the wait ends first it answers from the table it
// has; malformed parameters are a 400 naming the parameter.
func TestBlockingQuery(t *testing.T) {
	h, cli := startExampleAgent(t)
	_, d := h.resolve("DE", "k")
	rev := d.Revision

	type result struct {
		code int
		d    routing.Decision
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		resp, err := h.http.Get(fmt.Sprintf("http://%s/v1/resolve?country=DE&key=k&min_revision=%d&wait=20s", h.a.Addr(), rev+1))
		if err == nil {
			defer resp.Body.Close()
			r.code = resp.StatusCode
			err = jsonDecode(resp, &r.d)
		}
		r.err = err
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("the blocking query answered before any write: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	// It is counted as waiting (the agent then leaves the snapshot write
	// of the next change to the writer's goroutine, after the answer).
	if n := gauge(t, h, "regiond_api_blocking_queries_waiting"); n != 1 {
		t.Fatalf("blocking queries waiting: %v, want 1", n)
	}
	p, err := cli.Put(context.Background(), prefix+"routes/DE", `{"targets":[{"pool":"eu-north","weight":100}]}`)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.code != 200 || r.d.Revision < p.Header.Revision || r.d.Pool != "eu-north" {
			t.Fatalf("blocking query after the put: %+v, want revision >= %d and eu-north", r, p.Header.Revision)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the blocking query did not answer after the write")
	}
	waitFor(t, "no blocking query waiting", func() bool { return gauge(t, h, "regiond_api_blocking_queries_waiting") == 0 })
	// The file shows the write too (written after the answer).
	waitFor(t, "the snapshot file at the put's revision", func() bool {
		s := h.snapshot()
		return s != nil && s.Revision() >= p.Header.Revision
	})

	// The wait ends first: the current table answers, its revision says so.
	var late routing.Decision
	if code := h.get(fmt.Sprintf("/v1/resolve?country=DE&key=k&min_revision=%d&wait=100ms", p.Header.Revision+1000), &late); code != 200 ||
		late.Revision < p.Header.Revision || late.Revision >= p.Header.Revision+1000 {
		t.Fatalf("timed-out blocking query: HTTP %d %+v", code, late)
	}
	// Already current: no wait at all (the 5m wait would time the test out).
	var now routing.Decision
	if code := h.get(fmt.Sprintf("/v1/resolve?country=DE&key=k&min_revision=%d&wait=5m", p.Header.Revision), &now); code != 200 || now.Pool != "eu-north" {
		t.Fatalf("blocking query at the current revision: HTTP %d %+v", code, now)
	}
	if code := h.get(fmt.Sprintf("/v1/table?min_revision=%d&wait=5s", p.Header.Revision), nil); code != 200 {
		t.Fatalf("blocking /v1/table: HTTP %d", code)
	}

	for _, tc := range []struct{ query, want string }{
		{"min_revision=abc", "min_revision"},
		{"min_revision=-1", "min_revision"},
		{"min_revision=5&wait=forever", "wait"},
		{"min_revision=5&wait=10m", "wait"},
		{"wait=5s", "needs min_revision"},
		{"explain=yes", "explain=yes: want 1 or true"},
	} {
		var body struct{ Error string }
		if code := h.get("/v1/resolve?country=DE&"+tc.query, &body); code != http.StatusBadRequest || !strings.Contains(body.Error, tc.want) {
			t.Errorf("?%s: HTTP %d %q, want 400 naming %q", tc.query, code, body.Error, tc.want)
		}
	}
}

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }

// TestBlockingQueryEndsWithTheAgent: a blocking query waiting for a
// revision that never comes answers when the agent stops, and the agent
// stops cleanly instead of waiting for it.
func TestBlockingQueryEndsWithTheAgent(t *testing.T) {
	h, _ := startExampleAgent(t)
	done := make(chan int, 1)
	go func() {
		resp, err := h.http.Get(fmt.Sprintf("http://%s/v1/resolve?country=DE&key=k&min_revision=%d&wait=1m", h.a.Addr(), int64(1)<<60))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond) // the query is waiting
	h.stop()                           // fails the test if Run returns an error
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("the blocked query ended with HTTP %d, want 200 (the current table)", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked query did not end with the agent")
	}
}

package ui_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/regiond/regiond/internal/agent"
	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/internal/tcpproxy"
)

// TestGapsStatusPageEtcdOutage protects the page across an etcd outage
// (the agent reaches etcd through a proxy, severed, then restored),
// without a reload: during it the banner names etcd's error and the
// watch reads disconnected; after it the banner clears, the watch reads
// connected again, and the fleet table lists this node again with a note
// not marked bad. While the fleet cannot be read its rows are kept,
// greyed as of the last read.
func TestGapsStatusPageEtcdOutage(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	var proxy *tcpproxy.Proxy
	n := startNode(t, func(cfg *agent.Config, srv *devetcd.Server) {
		var err error
		if proxy, err = tcpproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		cfg.Endpoints = []string{proxy.URL()}
	})
	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	waitJS(ctx, t, "the page", `document.getElementById("connected").textContent === "connected" && document.querySelectorAll("#fleet tbody tr").length === 1`)

	proxy.Sever()
	waitJS(ctx, t, "the outage on the page", `document.getElementById("connected").textContent === "disconnected" &&
		document.getElementById("banner").textContent.startsWith("etcd: ") && !document.getElementById("banner").hidden`)
	// The fleet unread: its rows and count are kept, greyed as of the
	// last read, as when the agent is gone (they were emptied, "Fleet 0").
	waitJS(ctx, t, "the fleet unread", `document.getElementById("fleet-note").textContent.startsWith("read the fleet: ")`)
	if note, rows, count, dated := text(ctx, t, "#fleet-note"), eval[int](ctx, t, `document.querySelectorAll("#fleet tbody tr").length`), text(ctx, t, "#fleet-count"),
		eval[bool](ctx, t, `document.getElementById("fleet-section").classList.contains("dated")`); rows != 1 || count != "1" || !dated || !strings.Contains(note, "; the rows below are as of ") {
		t.Errorf("during the outage: fleet note %q, %d fleet rows, fleet count %q, greyed %v; want the row and count kept, greyed, the note saying as of when", note, rows, count, dated)
	}

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitJS(ctx, t, "the page after the outage", `document.getElementById("connected").textContent === "connected" && document.getElementById("banner").hidden &&
		document.getElementById("connected").className === "ok"`)
	waitJS(ctx, t, "the fleet after the outage", `[...document.querySelectorAll("#fleet tbody tr")].map(r => r.cells[0].textContent).join() === "ui-test (this node)" &&
		document.getElementById("fleet-note").className === "note" && document.getElementById("fleet-count").textContent === "1"`)
	// The 502s of api/fleet during the outage are logged by the browser
	// itself ("Failed to load resource"); no other error may be.
	var errs []string
	for _, e := range scriptErrors() {
		if !strings.Contains(e, "Failed to load resource: the server responded with a status of 502") {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

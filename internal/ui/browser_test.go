package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/regiond/regiond/internal/cli"
	"github.com/regiond/regiond/internal/testprog"
	"github.com/regiond/regiond/routing"
)

// browser starts headless Chromium (Debian's chromium) for one test and
// collects the page's console errors and uncaught exceptions.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	exe := testprog.Need(t, "chromium", "apt-get install -y chromium")
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1800),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		testprog.Missing(t, "chromium does not start ("+err.Error()+")", "apt-get install -y chromium")
	}
	var mu sync.Mutex
	var errs []string
	messages := chromedp.Console(bctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { bcancel(); <-done })
	return bctx, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(errs) }
}

// text returns the text of the first element matching a CSS selector, or
// "" (without waiting for it).
func text(ctx context.Context, t *testing.T, sel string) string {
	t.Helper()
	return eval[string](ctx, t, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel))
}

// eval evaluates a JS expression in the page.
func eval[T any](ctx context.Context, t *testing.T, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("page: %s: %v", js, err)
	}
	return v
}

// waitJS waits (bounded) until a JS expression holds in the page.
func waitJS(ctx context.Context, t *testing.T, what, expr string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("page: waiting for %s (%s): %v", what, expr, err)
	}
}

// candidates is the "Pools (weight)" text of an effective entry.
func candidates(e *routing.Effective) string {
	var s []string
	for _, c := range e.Candidates {
		s = append(s, fmt.Sprintf("%s=%d", c.Pool, c.Weight))
	}
	return strings.Join(s, ", ")
}

// servingPool is the pool the map colors a country by: the candidate of
// the highest weight (the first of equals), "" for NoRoute.
func servingPool(e *routing.Effective) string {
	best := -1
	for i, c := range e.Candidates {
		if best < 0 || c.Weight > e.Candidates[best].Weight {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return e.Candidates[best].Pool
}

// checkMap checks that each country's shape is colored as the legend
// colors its serving pool in tb.
func checkMap(ctx context.Context, t *testing.T, tb *routing.Table, ccs ...string) {
	t.Helper()
	for _, cc := range ccs {
		want := servingPool(tb.Effective(cc))
		got := eval[[]string](ctx, t, fmt.Sprintf(`(() => { const p = document.querySelector("#map path[data-cc=%s]");
			const l = [...document.querySelectorAll("#map-legend .legend-item")].find(i => i.dataset.pool === p.dataset.pool);
			return [p.dataset.pool, p.getAttribute("fill"), l ? l.dataset.color : "no legend"]; })()`, cc))
		if got[0] != want || got[1] != got[2] {
			t.Errorf("map: %s colored for pool %q (fill %s, the legend's %s), want %q", cc, got[0], got[1], got[2], want)
		}
	}
}

// screenshot keeps a picture of the page: in the test's artifact directory
// with -artifacts (go test -artifacts -outputdir DIR), else under the
// system's temporary directory, named in the log either way.
func screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join(os.TempDir(), "regiond-test-artifacts")
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		dir = t.ArtifactDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the status page: %s (%d bytes)", path, len(png))
}

// regionctl runs the real CLI against the test's etcd and fails the test
// unless it exits 0.
func regionctl(t *testing.T, n *node, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"--endpoints", strings.Join(n.etcd.Endpoints, ",")}, args...)
	if code := cli.Main(context.Background(), full, &out, &errb); code != 0 {
		t.Fatalf("regionctl %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

// The page, in a real browser: it shows the node's revision and every
// country's decision as the API serves them, the live boost with its time
// left and the fleet; a drain made with regionctl shows up without a
// reload; the filter and the what-if box work; no script error.
func TestStatusPageInBrowser(t *testing.T) {
	n := startNode(t, nil)
	regionctl(t, n, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--reason", "comeback week")
	n.waitTable(t, func(tb *routing.Table) bool { return len(tb.Overrides()) == 1 })
	ctx, scriptErrors := browser(t)

	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	rev := n.table(t).Revision()
	waitJS(ctx, t, "the table rendered", fmt.Sprintf(`Number(document.body.dataset.revision) >= %d && document.querySelectorAll("#countries tbody tr").length > 0`, rev))
	var st struct{ Revision, Epoch int64 }
	n.getJSON(t, "/v1/status", &st)
	if got := text(ctx, t, "#revision"); got == "" || got == "–" {
		t.Fatalf("#revision shows %q", got)
	}
	if got := text(ctx, t, "#epoch"); got != fmt.Sprint(st.Epoch) {
		t.Errorf("#epoch shows %q, the API %d", got, st.Epoch)
	}
	if got := text(ctx, t, "#connected"); got != "connected" {
		t.Errorf("#connected shows %q", got)
	}

	// Every country's row shows what the table serves.
	rows := eval[int](ctx, t, `document.querySelectorAll("#countries tbody tr").length`)
	if want := len(routing.Countries()) + 1; rows != want {
		t.Errorf("%d country rows, want %d (every country and the unknown one)", rows, want)
	}
	tb := n.table(t)
	for _, cc := range []string{"DE", "KR", "PL", "US", "BR"} {
		got := text(ctx, t, fmt.Sprintf(`#countries tr[data-cc=%q] td:nth-child(4)`, cc))
		if want := candidates(tb.Effective(cc)); got != want {
			t.Errorf("%s: the page shows pools %q, the table %q", cc, got, want)
		}
	}
	if got := text(ctx, t, `#countries tr[data-cc="KR"] td:nth-child(4)`); got != "kr-music=100" {
		t.Errorf("KR under the boost shows %q, want kr-music=100", got)
	}

	// The map colors each country by its serving pool, as the legend says.
	waitJS(ctx, t, "the map", `document.querySelectorAll("#map path[data-cc]").length > 150 && document.querySelector("#map path[data-cc=DE]").dataset.pool !== undefined`)
	checkMap(ctx, t, tb, "DE", "KR", "US", "JP")

	// The boost, with its time left counting down from about an hour.
	waitJS(ctx, t, "the boost's time left", `(document.querySelector("#boosts td.left") || {}).textContent.match(/^(59m|1h 0m)/)`)
	if got := text(ctx, t, "#boosts tbody tr td:nth-child(2)"); got != "KR" {
		t.Errorf("boost row route %q, want KR", got)
	}
	waitJS(ctx, t, "the fleet", `document.querySelectorAll("#fleet tbody tr").length === 1`)
	if got := text(ctx, t, "#fleet tbody tr td:first-child"); got != "ui-test (this node)" {
		t.Errorf("fleet row %q, want this node", got)
	}

	// A drain made with regionctl shows up without a reload.
	eval[int](ctx, t, `window.__sameDocument = 42`)
	regionctl(t, n, "pool", "drain", "eu-central", "--reason", "browser test", "--force")
	drained := n.waitTable(t, func(tb *routing.Table) bool { p, _ := tb.Pool("eu-central"); return p.Status == routing.StatusDraining })
	waitJS(ctx, t, "the drain on the page", fmt.Sprintf(`Number(document.body.dataset.revision) >= %d`, drained.Revision()))
	if same := eval[int](ctx, t, `window.__sameDocument || 0`); same != 42 {
		t.Fatalf("the page was reloaded to show the drain (marker %d)", same)
	}
	de := text(ctx, t, `#countries tr[data-cc="DE"] td:nth-child(4)`)
	if want := candidates(drained.Effective("DE")); de != want || strings.Contains(de, "eu-central") {
		t.Errorf("DE after the drain shows %q, the table %q", de, want)
	}
	if got := text(ctx, t, `#countries tr[data-cc="DE"] td.reasons`); !strings.Contains(got, "pool-draining:eu-central") {
		t.Errorf("DE after the drain: degraded %q, want pool-draining:eu-central", got)
	}
	checkMap(ctx, t, drained, "DE", "PL", "FR")

	// The filter keeps the matching rows only.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#filter"), "kr-music")); err != nil {
		t.Fatal(err)
	}
	shown := eval[[]string](ctx, t, `[...document.querySelectorAll("#countries tbody tr")].filter(r => !r.hidden).map(r => r.dataset.cc)`)
	if strings.Join(shown, ",") != "KR" {
		t.Errorf("filter kr-music shows %v, want KR only", shown)
	}

	// What if eu-west goes down too: the page's answer is the endpoint's.
	var want struct {
		NoRoute []string `json:"no_route"`
	}
	n.getJSON(t, "/ui/api/whatif?down=eu-west", &want)
	err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#whatif-pools input[value="eu-west"]`)), chromedp.Click(chromedp.CSS("#whatif-run")),
		chromedp.WaitVisible(chromedp.CSS("#whatif-result .whatif-summary")))
	if err != nil {
		t.Fatalf("what-if: %v", err)
	}
	summary := text(ctx, t, "#whatif-result .whatif-summary")
	if len(want.NoRoute) > 0 {
		first := eval[string](ctx, t, `document.querySelector("#whatif-result tbody tr").dataset.cc`)
		if !contains(want.NoRoute, first) {
			t.Errorf("what-if lists %s first, want a country left with no route (%v)", first, want.NoRoute)
		}
	}
	if !strings.Contains(summary, "With eu-west down") || !strings.Contains(summary, fmt.Sprintf("%d with no route", len(want.NoRoute))) {
		t.Errorf("what-if summary %q; the endpoint: %d no route", summary, len(want.NoRoute))
	}
	// The picture: every country, the drain, the boost and the what-if.
	visible := eval[int](ctx, t, `(() => { const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input"));
		return [...document.querySelectorAll("#countries tbody tr")].filter(r => !r.hidden).length; })()`)
	if visible != rows {
		t.Errorf("an empty filter shows %d of %d countries", visible, rows)
	}
	screenshot(ctx, t, "status-page.png")
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

// getJSON decodes a GET of the agent's API.
func (n *node) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := n.http.Get(n.url(path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/regiond/regiond/internal/cli"
	"github.com/regiond/regiond/internal/devetcd"
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

// candidates is the "Pools (weight)" text of an effective entry: each
// candidate's weight, then, when the weights do not add up to 100 (a pool
// drained or unhealthy), each one's share of the viewers.
func candidates(e *routing.Effective) string {
	var s, share []string
	sum := 0
	for _, c := range e.Candidates {
		s = append(s, fmt.Sprintf("%s=%d", c.Pool, c.Weight))
		sum += c.Weight
	}
	if sum == 100 || sum == 0 {
		return strings.Join(s, ", ")
	}
	for _, c := range e.Candidates {
		share = append(share, fmt.Sprintf("%s %d%%", c.Pool, int(math.Round(100*float64(c.Weight)/float64(sum)))))
	}
	return strings.Join(s, ", ") + " (" + strings.Join(share, ", ") + " of viewers)"
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

// artifactsEnv names the directory screenshots go to without -artifacts:
// .ci/run sets it to test-artifacts/ at the top of the repository, where CI
// collects them.
const artifactsEnv = "REGIOND_TEST_ARTIFACTS"

// screenshot keeps a picture of the page: in the test's artifact directory
// with -artifacts (go test -artifacts -outputdir DIR), else in
// $REGIOND_TEST_ARTIFACTS (as .ci/run sets it), else under the system's
// temporary directory; named in the log either way.
func screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join(os.TempDir(), "regiond-test-artifacts")
	if d := os.Getenv(artifactsEnv); d != "" {
		dir = d
	}
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

// skippedKey is a routing key the browser test stores a value under that
// the agent refuses (targets must be a list), so the agent lists it as
// skipped.
const skippedKey = "routes/LU"

// The page, in a real browser: it shows the node's revision (the one
// /v1/status serves), when the table was last confirmed against etcd
// (synced_at) and the snapshot file written (written_at), the keys the
// agent skipped, and every country's decision as the API serves them, the
// live boost with its time left and the fleet; a drain made with regionctl
// shows up without a reload; the filter and the what-if box work; a second
// drain that leaves countries with no route marks their rows and shapes
// and counts them, as the what-if foretold; no script error. The
// browser's clock runs 10 minutes ahead of the agent's (an operator's
// laptop): the ages read by the agent's clock all the same.
func TestStatusPageInBrowser(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	n := startNode(t, nil)
	regionctl(t, n, "boost", "KR", "--target", "kr-music=100", "--ttl", "1h", "--reason", "comeback week")
	if _, err := devetcd.NewTestClient(t, n.etcd).Put(context.Background(), root+"routing/"+skippedKey, `{"targets":5}`); err != nil {
		t.Fatal(err)
	}
	n.waitTable(t, func(tb *routing.Table) bool {
		return len(tb.Overrides()) == 1 && slices.ContainsFunc(tb.Skipped(), func(s routing.Skipped) bool { return s.Key == skippedKey })
	})
	ctx, scriptErrors := browser(t)

	ahead := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `{ const now = Date.now; Date.now = () => now() + 600000; }`})
		return err
	})
	if err := chromedp.Do(ctx, ahead, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	if d := eval[float64](ctx, t, `(Date.now() - new Date().getTime()) / 1000`); d < 590 || d > 610 {
		t.Fatalf("the page's Date.now is %vs ahead of the browser's clock, want 600", d)
	}
	rev := n.table(t).Revision()
	waitJS(ctx, t, "the table rendered", fmt.Sprintf(`Number(document.body.dataset.revision) >= %d && document.querySelectorAll("#countries tbody tr").length > 0`, rev))
	checkRevision(ctx, t, n)
	var st struct{ Revision, Epoch int64 }
	n.getJSON(t, "/v1/status", &st)
	if got := text(ctx, t, "#epoch"); got != fmt.Sprint(st.Epoch) {
		t.Errorf("#epoch shows %q, the API %d", got, st.Epoch)
	}
	if got := text(ctx, t, "#connected"); got != "connected" {
		t.Errorf("#connected shows %q", got)
	}
	checkFreshness(ctx, t, n)
	checkSkipped(ctx, t, n)

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
	if nr := checkNoRoute(ctx, t, tb); len(nr) > 0 {
		t.Fatalf("the example fleet leaves %v with no route: the test needs a fleet that routes every country", nr)
	}
	// A pool added (its name sorts first) recolours no country, and no two
	// serving pools share a colour.
	colors := legendColors(ctx, t)
	regionctl(t, n, "pool", "set", "aa-new", "--host", "edge-new-1.example.net:443", "--residency", "eu", "--reason", "browser test")
	added := n.waitTable(t, func(tb *routing.Table) bool { _, ok := tb.Pool("aa-new"); return ok })
	waitJS(ctx, t, "the new pool on the page", fmt.Sprintf(`Number(document.body.dataset.revision) >= %d`, added.Revision()))
	if got := legendColors(ctx, t); !maps.Equal(got, colors) {
		t.Errorf("adding a pool recoloured the map: legend %v, before %v", got, colors)
	}
	seen := map[string]string{}
	for pool, c := range colors {
		if other, ok := seen[c]; ok {
			t.Errorf("pools %s and %s share the colour %s", pool, other, c)
		}
		seen[c] = pool
	}

	// The boost, with its time left counting down from about an hour.
	waitJS(ctx, t, "the boost's time left", `(document.querySelector("#boosts td.left") || {}).textContent.match(/^(59m|1h 0m)/)`)
	if got := text(ctx, t, "#boosts tbody tr td:nth-child(2)"); got != "KR" {
		t.Errorf("boost row route %q, want KR", got)
	}
	waitJS(ctx, t, "the fleet", `document.querySelectorAll("#fleet tbody tr").length === 1`)
	if got := text(ctx, t, "#fleet tbody tr td:first-child"); got != "ui-test (this node)" {
		t.Errorf("fleet row %q, want this node", got)
	}
	checkDivergedAgent(ctx, t, n)

	// A drain made with regionctl shows up without a reload.
	eval[int](ctx, t, `window.__sameDocument = 42`)
	regionctl(t, n, "pool", "drain", "eu-central", "--reason", "browser test", "--force")
	drained := n.waitTable(t, func(tb *routing.Table) bool { p, _ := tb.Pool("eu-central"); return p.Status == routing.StatusDraining })
	waitJS(ctx, t, "the drain on the page", fmt.Sprintf(`Number(document.body.dataset.revision) >= %d`, drained.Revision()))
	if same := eval[int](ctx, t, `window.__sameDocument || 0`); same != 42 {
		t.Fatalf("the page was reloaded to show the drain (marker %d)", same)
	}
	if r := checkRevision(ctx, t, n); r < drained.Revision() {
		t.Errorf("#revision %d after the drain, want at least the drain's %d", r, drained.Revision())
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

	// A table update that leaves the pools as they are keeps the what-if
	// checkboxes, the nodes themselves: rebuilt on every update, one could
	// be swapped from under a click ("Could not find node with given id").
	eval[int](ctx, t, `document.querySelector('#whatif-pools input[value="eu-west"]').__mark = 7`)
	regionctl(t, n, "route", "set", "PL", "--attr", "ui-test=1", "--reason", "browser test")
	routed := n.waitTable(t, func(tb *routing.Table) bool { r, ok := tb.Route("PL"); return ok && r.Attrs["ui-test"] == "1" })
	waitJS(ctx, t, "the route change on the page", fmt.Sprintf(`Number(document.body.dataset.revision) >= %d`, routed.Revision()))
	if mark := eval[int](ctx, t, `document.querySelector('#whatif-pools input[value="eu-west"]').__mark || 0`); mark != 7 {
		t.Errorf("a table update with the same pools rebuilt the what-if checkboxes")
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
	visible := eval[int](ctx, t, `(() => { const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input"));
		return [...document.querySelectorAll("#countries tbody tr")].filter(r => !r.hidden).length; })()`)
	if visible != rows {
		t.Errorf("an empty filter shows %d of %d countries", visible, rows)
	}

	// eu-west drained as well: the countries only the two could serve are
	// left with no route (as the what-if said), and the page marks them.
	regionctl(t, n, "pool", "drain", "eu-west", "--reason", "browser test: no route", "--force")
	both := n.waitTable(t, func(tb *routing.Table) bool { p, _ := tb.Pool("eu-west"); return p.Status == routing.StatusDraining })
	waitJS(ctx, t, "the second drain on the page", fmt.Sprintf(`Number(document.body.dataset.revision) >= %d`, both.Revision()))
	noRoute := checkNoRoute(ctx, t, both)
	if len(noRoute) == 0 {
		t.Fatal("with eu-central and eu-west drained every country still has a route: the test needs one without")
	}
	if strings.Join(noRoute, " ") != strings.Join(want.NoRoute, " ") {
		t.Errorf("no route after draining eu-west: %v; the what-if foretold %v", noRoute, want.NoRoute)
	}

	// etcd's NOSPACE alarm: the node serves on, but its status key is not
	// published; the banner says so (from /v1/status's status_error). A
	// delete passes the alarm; the page reads the status at the next one.
	checkStatusNotPublished(ctx, t, n)

	// The picture: every country, the drains, the boost, the skipped key,
	// the what-if and the countries left with no route.
	screenshot(ctx, t, "status-page.png")
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

// legendColors is the map legend's colour of each pool it lists.
func legendColors(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	m := eval[map[string]string](ctx, t, `Object.fromEntries([...document.querySelectorAll("#map-legend .legend-item")].map(i => [i.dataset.pool, i.dataset.color]))`)
	if len(m) < 3 {
		t.Fatalf("the legend lists %v, want the example fleet's serving pools", m)
	}
	return m
}

// checkDivergedAgent stores the status of an agent ahead of etcd's
// revision (one following a restored backup's history, as far as anyone
// can tell) and checks that the fleet table marks it diverged, with why,
// not green with lag 0; then removes it.
func checkDivergedAgent(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	cli := devetcd.NewTestClient(t, n.etcd)
	bg := context.Background()
	resp, err := cli.Get(bg, root+"agents/ui-test")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("this node's status key: %v (%d keys)", err, len(resp.Kvs))
	}
	var st map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
		t.Fatal(err)
	}
	st["revision"] = resp.Header.Revision + 1_000_000
	v, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(bg, root+"agents/ghost", string(v)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := cli.Delete(bg, root+"agents/ghost"); err != nil {
			t.Error(err)
		}
	}()
	waitJS(ctx, t, "the diverged agent", `[...document.querySelectorAll("#fleet tbody tr")].some(r => r.cells[0].textContent === "ghost")`)
	got := eval[[]string](ctx, t, `(() => { const c = [...document.querySelectorAll("#fleet tbody tr")].find(r => r.cells[0].textContent === "ghost").cells[2];
		return [c.textContent, c.className, c.title]; })()`)
	if got[0] != "diverged" || !strings.Contains(got[1], "bad") || !strings.Contains(got[2], "another history") {
		t.Errorf("the diverged agent's lag cell: %q (class %q, title %q); want diverged, bad, and why", got[0], got[1], got[2])
	}
	// A lost node (its record, no status key) is a row marked LOST, and
	// the note says what that means.
	if _, err := cli.Put(bg, root+"nodes/gone-node", string(resp.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := cli.Delete(bg, root+"nodes/gone-node"); err != nil {
			t.Error(err)
		}
	}()
	waitJS(ctx, t, "the lost node", `[...document.querySelectorAll("#fleet tbody tr")].some(r => r.cells[0].textContent === "gone-node" && r.cells[4].textContent === "LOST")`)
	if note := text(ctx, t, "#fleet-note"); !strings.Contains(note, "1 lost: ") || !strings.Contains(note, "regionctl agent rm NODE") {
		t.Errorf("the fleet note with a lost node: %q", note)
	}
}

// checkStatusNotPublished raises etcd's NOSPACE alarm and checks the
// page's banner names the unpublished status key and the way out, then
// disarms it.
func checkStatusNotPublished(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	cli := devetcd.NewTestClient(t, n.etcd)
	bg := context.Background()
	defer devetcd.RaiseNoSpaceAlarm(t, cli)()
	if _, err := cli.Delete(bg, root+"routing/routes/CO"); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		var st struct {
			StatusError string `json:"status_error"`
		}
		if n.getJSON(t, "/v1/status", &st); st.StatusError != "" {
			break
		}
		if i == 200 {
			t.Fatal("no status_error under the NOSPACE alarm")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := cli.Delete(bg, root+"routing/routes/TW"); err != nil {
		t.Fatal(err)
	}
	waitJS(ctx, t, "the banner", `(document.getElementById("banner").textContent || "").includes("status key not published")`)
	if got := text(ctx, t, "#banner"); !strings.Contains(got, "NOSPACE alarm is raised") || !strings.Contains(got, "etcdctl alarm disarm") {
		t.Errorf("the banner under NOSPACE: %q; want the alarm and the way out", got)
	}
}

// checkRevision waits (bounded) until the page's #revision shows the
// revision /v1/status serves, and returns it. That revision also moves on
// etcd's progress notifications, and the page follows each move with its
// blocking query: so the two agree within a moment, not at every instant.
func checkRevision(ctx context.Context, t *testing.T, n *node) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st struct{ Revision int64 }
		n.getJSON(t, "/v1/status", &st)
		got := text(ctx, t, "#revision")
		if got == fmt.Sprint(st.Revision) && st.Revision > 0 {
			return st.Revision
		}
		if time.Now().After(deadline) {
			t.Fatalf("#revision shows %q, /v1/status revision %d", got, st.Revision)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agoRE matches the page's "… ago" of a time under an hour old, capturing
// the minutes and seconds.
var agoRE = regexp.MustCompile(`^(?:(\d+)m )?(\d+)s ago`)

// checkAgo checks that what reads "<age> ago" for a time at (give or take
// the page's one-second clock and a rounding).
func checkAgo(t *testing.T, what, text string, at time.Time) {
	t.Helper()
	m := agoRE.FindStringSubmatch(text)
	if m == nil {
		t.Errorf("%s reads %q, want \"<age> ago\"", what, text)
		return
	}
	mins, _ := strconv.Atoi(m[1])
	secs, _ := strconv.Atoi(m[2])
	age := time.Duration(mins)*time.Minute + time.Duration(secs)*time.Second
	if d := time.Since(at) - age; d < -2*time.Second || d > 3*time.Second {
		t.Errorf("%s reads %q for %s, %v ago", what, text, at.Format(time.RFC3339Nano), time.Since(at).Round(time.Second))
	}
}

// checkFreshness checks the page's synced_at and written_at: each reads
// "<age> ago" of the time in its title, which is a time the agent gave
// (synced_at of /v1/status; written_at of the snapshot file that
// /ui/api/node names, after its path), at most as new as what the API
// gives right after and not older than a minute; written_at names the
// snapshot's revision too.
func checkFreshness(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	page := eval[[]string](ctx, t, `["synced", "written"].flatMap(id => [document.getElementById(id).textContent, document.getElementById(id).title])`)
	var st struct {
		SyncedAt string `json:"synced_at"`
	}
	n.getJSON(t, "/v1/status", &st)
	var node struct {
		Snapshot struct {
			Path      string
			Revision  int64
			WrittenAt string `json:"written_at"`
		}
	}
	n.getJSON(t, "/ui/api/node", &node)
	check := func(what, text, title, apiAt string) {
		t.Helper()
		at, err := time.Parse(time.RFC3339Nano, title)
		api, aerr := time.Parse(time.RFC3339Nano, apiAt)
		if err != nil || aerr != nil || at.After(api) || api.Sub(at) > time.Minute {
			t.Errorf("%s: the page's time %q (%v), the API's %q (%v)", what, title, err, apiAt, aerr)
			return
		}
		checkAgo(t, what, text, at)
	}
	check("#synced (synced_at)", page[0], page[1], st.SyncedAt)
	writtenAt, ok := strings.CutPrefix(page[3], node.Snapshot.Path+" ")
	if !ok || node.Snapshot.Path == "" {
		t.Errorf("#written's title %q does not name the snapshot file %q", page[3], node.Snapshot.Path)
	}
	check("#written (written_at)", page[2], writtenAt, node.Snapshot.WrittenAt)
	var r int64
	if m := regexp.MustCompile(` ago \(r(\d+)\)$`).FindStringSubmatch(page[2]); m != nil {
		r, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if r <= 0 || r > node.Snapshot.Revision {
		t.Errorf("#written reads %q, want the revision of the snapshot file (r%d now)", page[2], node.Snapshot.Revision)
	}
}

// checkSkipped checks that the page lists the keys /v1/status says the
// agent skipped, each with why, and among them skippedKey.
func checkSkipped(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	var st struct{ Skipped []routing.Skipped }
	n.getJSON(t, "/v1/status", &st)
	var want [][]string
	for _, s := range st.Skipped {
		want = append(want, []string{s.Key, s.Error})
	}
	got := eval[[][]string](ctx, t, `document.getElementById("skipped-box").hidden ? [] :
		[...document.querySelectorAll("#skipped tbody tr")].map(r => [...r.cells].map(c => c.textContent))`)
	if fmt.Sprint(got) != fmt.Sprint(want) || !slices.ContainsFunc(got, func(r []string) bool { return r[0] == skippedKey && r[1] != "" }) {
		t.Errorf("skipped keys on the page %q, /v1/status %q; want %s among them", got, want, skippedKey)
	}
	if c := text(ctx, t, "#skipped-count"); c != fmt.Sprint(len(want)) {
		t.Errorf("skipped count %q, want %d", c, len(want))
	}
}

// checkNoRoute checks how the page marks the countries tb leaves with no
// route, and returns them: exactly their rows have class noroute and say
// "none eligible", the count line names them in the table's order (hidden
// when there is none), and exactly their map shapes have class noroute.
func checkNoRoute(ctx context.Context, t *testing.T, tb *routing.Table) []string {
	t.Helper()
	var want []string
	for _, cc := range append(slices.Sorted(slices.Values(routing.Countries())), routing.Unknown) {
		if len(tb.Effective(cc).Candidates) == 0 {
			want = append(want, cc)
		}
	}
	got := eval[[]string](ctx, t, `[...document.querySelectorAll("#countries tbody tr.noroute")].map(r => r.dataset.cc)`)
	if !slices.Equal(got, want) {
		t.Errorf("rows marked noroute %v, the table's countries with no route %v", got, want)
	}
	pools := eval[[]string](ctx, t, `[...new Set([...document.querySelectorAll("#countries tbody tr.noroute td:nth-child(4)")].map(c => c.textContent))]`)
	if len(want) > 0 && !slices.Equal(pools, []string{"none eligible"}) {
		t.Errorf("no-route rows show pools %q, want \"none eligible\"", pools)
	}
	line := eval[string](ctx, t, `(e => e.hidden ? "hidden" : e.textContent)(document.getElementById("noroute-count"))`)
	wantLine := "hidden"
	if len(want) > 0 {
		wantLine = fmt.Sprintf("%d with no route: %s", len(want), strings.Join(want, " "))
	}
	if line != wantLine {
		t.Errorf("no-route count line %q, want %q", line, wantLine)
	}
	shapes := eval[[][]string](ctx, t, `(() => { const cc = (sel) => [...new Set([...document.querySelectorAll(sel)].map(p => p.dataset.cc))].sort();
		return [cc("#map path[data-cc]"), cc("#map path.noroute")]; })()`)
	var wantShapes []string
	for _, cc := range want {
		if slices.Contains(shapes[0], cc) {
			wantShapes = append(wantShapes, cc)
		}
	}
	if !slices.Equal(shapes[1], wantShapes) || (len(want) > 0 && len(wantShapes) == 0) {
		t.Errorf("map shapes marked noroute %v, want %v (those of %v on the map)", shapes[1], wantShapes, want)
	}
	return want
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

// TestStatusPageFollowsTheClock: a boost whose expires_at passes while
// its lease lives on (a leader election renews every lease) changes the
// table with no new revision; the page shows the change all the same,
// without a reload (it compared revisions only, and kept the boost for as
// long as the lease lived). The banner says so at once when the agent
// cannot be reached, and keeps saying it.
func TestStatusPageFollowsTheClock(t *testing.T) {
	// Not in parallel: the page must show the boost within its 6 s, which a
	// browser started beside another's missed in CI.
	n := startNode(t, nil)
	ends := time.Now().Add(6 * time.Second).UTC().Format(time.RFC3339Nano)
	if _, err := devetcd.NewTestClient(t, n.etcd).Put(context.Background(), root+"routing/overrides/kr-short",
		`{"route":"KR","targets":[{"pool":"kr-music","weight":100}],"expires_at":"`+ends+`"}`); err != nil {
		t.Fatal(err)
	}
	boosted := n.waitTable(t, func(tb *routing.Table) bool { return len(tb.Overrides()) == 1 })
	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	kr := `#countries tr[data-cc="KR"] td:nth-child(4)`
	waitJS(ctx, t, "KR under the boost", fmt.Sprintf(`(document.querySelector(%q) || {}).textContent === "kr-music=100"`, kr))
	ended := n.waitTable(t, func(tb *routing.Table) bool { return len(tb.Overrides()) == 0 })
	t.Logf("revision %d with the boost, %d after its end", boosted.Revision(), ended.Revision())
	want := candidates(ended.Effective("KR"))
	waitJS(ctx, t, "KR after the boost's expires_at", fmt.Sprintf(`(document.querySelector(%q) || {}).textContent === %q`, kr, want))

	// The agent gone: the banner says so and stays, and the facts below it
	// are marked as of the last answer, the fleet's rows too (they kept
	// the last answer, not greyed).
	waitJS(ctx, t, "the fleet", `document.querySelectorAll("#fleet tbody tr").length === 1`)
	eval[int](ctx, t, `(window.fetch = () => Promise.reject(new Error("connection refused")), 1)`)
	waitJS(ctx, t, "the agent-unreachable banner", `document.getElementById("banner").textContent.startsWith("Cannot reach the agent")`)
	for range 3 {
		time.Sleep(time.Second) // three of the page's one-second renders
		if got := text(ctx, t, "#banner"); !strings.HasPrefix(got, "Cannot reach the agent") || eval[bool](ctx, t, `document.getElementById("banner").hidden`) {
			t.Fatalf("the banner while the agent is unreachable: %q (hidden: %v)", got, eval[bool](ctx, t, `document.getElementById("banner").hidden`))
		}
	}
	if !eval[bool](ctx, t, `document.getElementById("node-status").classList.contains("dated")`) {
		t.Error("the node's facts are not marked dated while the agent is unreachable")
	}
	waitJS(ctx, t, "the fleet marked dated", `document.getElementById("fleet-section").classList.contains("dated")`)
	if note := text(ctx, t, "#fleet-note"); !strings.Contains(note, "connection refused") || !strings.Contains(note, "the rows below are as of ") {
		t.Errorf("the fleet note while the agent is unreachable: %q; want why, and that the rows are as of the last answer", note)
	}
	if c := eval[string](ctx, t, `getComputedStyle(document.querySelector("#fleet tbody td.ok")).color`); c != "rgb(93, 102, 119)" {
		t.Errorf("the fleet's rows while the agent is unreachable are coloured %s, want greyed (--muted, rgb(93, 102, 119))", c)
	}
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

// TestStatusPageShowsSnapshotNotWritten: while the snapshot file cannot
// be written (a symbolic link in its place, which the writer refuses;
// the file it points to holds the old table), the page says so as
// regionctl status does: the banner names snapshot_error, #written is
// marked bad and behind the table served, and this node's fleet row is
// not converged at lag 0 with the note saying why (the page showed
// none of it: no banner, the age in normal colour, lag 0 in green).
// Once the file is written again, all of it clears.
func TestStatusPageShowsSnapshotNotWritten(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	n := startNode(t, nil)
	var node struct{ Snapshot struct{ Path string } }
	n.getJSON(t, "/ui/api/node", &node)
	path := node.Snapshot.Path
	old := filepath.Join(filepath.Dir(path), "old-table.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(old, path+".link"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".link", path); err != nil {
		t.Fatal(err)
	}
	regionctl(t, n, "route", "set", "PL", "--attr", "ui-test=1", "--reason", "browser test")
	routed := n.waitTable(t, func(tb *routing.Table) bool { r, ok := tb.Route("PL"); return ok && r.Attrs["ui-test"] == "1" })
	n.wait(t, "snapshot_error in /v1/status", func() bool {
		var st struct {
			SnapshotError string `json:"snapshot_error"`
		}
		n.getJSON(t, "/v1/status", &st)
		return st.SnapshotError != ""
	})

	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	waitJS(ctx, t, "the snapshot banner", `(document.getElementById("banner").textContent || "").includes("snapshot files not written")`)
	if got := text(ctx, t, "#banner"); !strings.Contains(got, path) || !strings.Contains(got, "route by an older table") {
		t.Errorf("the banner with the snapshot file not written: %q; want the file and what it means", got)
	}
	waitJS(ctx, t, "#written marked", `document.getElementById("written").className === "bad"`)
	if got, want := text(ctx, t, "#written"), fmt.Sprintf("behind the table served (r%d)", routed.ChangeRevision()); !strings.Contains(got, want) {
		t.Errorf("#written reads %q, want it to say %q", got, want)
	}
	waitJS(ctx, t, "this node's fleet row not converged", `[...document.querySelectorAll("#fleet tbody tr")].some(r => r.cells[0].textContent === "ui-test (this node)" && r.cells[2].textContent.includes("not converged"))`)
	lag := eval[[]string](ctx, t, `(() => { const c = [...document.querySelectorAll("#fleet tbody tr")].find(r => r.cells[0].textContent === "ui-test (this node)").cells[2];
		return [c.textContent, c.className, c.title]; })()`)
	if lag[0] != "0, not converged" || !strings.Contains(lag[1], "bad") || !strings.Contains(lag[2], "snapshot files not written") {
		t.Errorf("this node's lag cell: %q (class %q, title %q); want 0, not converged, bad, and why", lag[0], lag[1], lag[2])
	}
	if note := text(ctx, t, "#fleet-note"); !strings.Contains(note, "ui-test: not converged: snapshot files not written") {
		t.Errorf("the fleet note: %q; want this node named not converged, and why", note)
	}
	screenshot(ctx, t, "status-page-snapshot-not-written.png")

	// The file written again: the page clears it all.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitJS(ctx, t, "the snapshot banner gone", `!(document.getElementById("banner").textContent || "").includes("snapshot") && document.getElementById("written").className === ""`)
	waitJS(ctx, t, "this node's fleet row converged", `[...document.querySelectorAll("#fleet tbody tr")].some(r => r.cells[0].textContent === "ui-test (this node)" && r.cells[2].textContent === "0" && r.cells[2].className.includes("ok"))`)
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

// TestStatusPageShowsBoostAttrs: a boost's attrs are shown in the boosts
// table, as regionctl boost ls shows them (a boost of attrs alone was a
// row with empty targets and nothing else to say what it does).
func TestStatusPageShowsBoostAttrs(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	n := startNode(t, nil)
	regionctl(t, n, "boost", "PL", "--attr", "flag.autoplay_preview=off", "--attr", "cdn.tier=gold", "--ttl", "10m", "--reason", "long")
	n.waitTable(t, func(tb *routing.Table) bool { return len(tb.Overrides()) == 1 })
	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	waitJS(ctx, t, "the boost", `document.querySelectorAll("#boosts tbody tr").length === 1`)
	got := eval[map[string]string](ctx, t, `(() => { const heads = [...document.querySelectorAll("#boosts thead th")].map(h => h.textContent);
		const cells = [...document.querySelector("#boosts tbody tr").cells].map(c => c.textContent);
		return Object.fromEntries(heads.map((h, i) => [h, cells[i]])); })()`)
	if got["Route"] != "PL" || got["Attrs"] != "cdn.tier=gold, flag.autoplay_preview=off" || got["Targets"] != "–" || got["Reason"] != "long" {
		t.Errorf("the boost's row %v; want route PL, attrs cdn.tier=gold, flag.autoplay_preview=off, targets – (the route's kept), reason long", got)
	}
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

// TestStatusPageFleetSkippedServedAlike: the fleet's Skipped column
// counts the keys served alike as regionctl status does ("2 (1 served
// alike)", not a bare 2 that reads as two keys keeping the agent from
// converging), and names the keys in its title.
func TestStatusPageFleetSkippedServedAlike(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	n := startNode(t, nil)
	cli := devetcd.NewTestClient(t, n.etcd)
	for k, v := range map[string]string{skippedKey: `{"targets":5}`, "health/eu-west/h1": "up"} {
		if _, err := cli.Put(context.Background(), root+"routing/"+k, v); err != nil {
			t.Fatal(err)
		}
	}
	n.waitTable(t, func(tb *routing.Table) bool { return len(tb.Skipped()) == 2 })
	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	// The status key is put a moment after the change: wait for it.
	waitJS(ctx, t, "the fleet's skipped keys", `[...document.querySelectorAll("#fleet tbody tr")].some(r => r.cells[6].textContent !== "0")`)
	got := eval[[]string](ctx, t, `(c => [c.textContent, c.className, c.title])(document.querySelector("#fleet tbody tr").cells[6])`)
	if got[0] != "2 (1 served alike)" || !strings.Contains(got[1], "bad") || got[2] != "routes/LU, health/eu-west/h1" {
		t.Errorf("the fleet's Skipped cell %q (class %q, title %q); want 2 (1 served alike), bad, naming routes/LU and health/eu-west/h1", got[0], got[1], got[2])
	}
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

// TestStatusPageWhatIfUnknownLast: the what-if lists the unknown country
// after the other countries of its group, as the Countries table does
// (it came first: "_" sorts before letters).
func TestStatusPageWhatIfUnknownLast(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	n := startNode(t, nil)
	var want struct {
		Changed []string
		NoRoute []string `json:"no_route"`
	}
	n.getJSON(t, "/ui/api/whatif?down=eu-central", &want)
	if !contains(want.Changed, routing.Unknown) || contains(want.NoRoute, routing.Unknown) || len(want.NoRoute) > 0 {
		t.Fatalf("with eu-central down the example fleet changes %v, no route for %v: the test needs the unknown country changed, every country routed", want.Changed, want.NoRoute)
	}
	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	waitJS(ctx, t, "the what-if pools", `!!document.querySelector('#whatif-pools input[value="eu-central"]')`)
	err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#whatif-pools input[value="eu-central"]`)), chromedp.Click(chromedp.CSS("#whatif-run")),
		chromedp.WaitVisible(chromedp.CSS("#whatif-result .whatif-summary")))
	if err != nil {
		t.Fatalf("what-if: %v", err)
	}
	order := eval[[]string](ctx, t, `[...document.querySelectorAll("#whatif-result tbody tr")].map(r => r.dataset.cc)`)
	if len(order) != len(want.Changed) || order[len(order)-1] != routing.Unknown || !slices.IsSorted(order[:len(order)-1]) {
		t.Errorf("the what-if lists %v; want the %d changed countries sorted, the unknown one last", order, len(want.Changed))
	}
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

// TestStatusPagePoolsAndPicker: with many pools, the page lists them in a
// collapsed table (status, health, live health keys), and the what-if
// picker shows the pools its filter finds, not a checkbox for each (2,000
// of them buried the Countries table; a pool's status showed nowhere
// but as a label's suffix).
func TestStatusPagePoolsAndPicker(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	n := startNode(t, nil)
	cli := devetcd.NewTestClient(t, n.etcd)
	for i := range 60 {
		if _, err := cli.Put(context.Background(), fmt.Sprintf("%srouting/pools/zz-extra-%02d", root, i),
			fmt.Sprintf(`{"host":"edge-extra-%02d.example.net:443","residency":"eu"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	regionctl(t, n, "pool", "drain", "eu-central", "--reason", "browser test", "--force")
	tb := n.waitTable(t, func(tb *routing.Table) bool {
		p, _ := tb.Pool("eu-central")
		return tb.NumPools() > 60 && p.Status == routing.StatusDraining
	})
	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	waitJS(ctx, t, "the pools", fmt.Sprintf(`document.querySelectorAll("#pools tbody tr").length === %d`, tb.NumPools()))
	if open := eval[bool](ctx, t, `document.getElementById("pools-box").open`); open {
		t.Error("the pools table is open at first; want it collapsed")
	}
	if got, want := text(ctx, t, "#pools-count"), fmt.Sprintf("%d, 1 not active", tb.NumPools()); got != want {
		t.Errorf("pools count %q, want %q", got, want)
	}
	got := eval[[]string](ctx, t, `[...document.querySelector('#pools tr[data-pool="eu-central"]').cells].map(c => c.textContent)`)
	if len(got) < 4 || got[1] != "draining" || got[2] != "yes" || got[3] != "– (no health_check)" {
		t.Errorf("the eu-central row %q; want draining, healthy, no health_check", got)
	}

	// The picker: no checkbox shown until a filter finds some.
	shown := func() []string {
		return eval[[]string](ctx, t, `[...document.querySelectorAll("#whatif-pools label")].filter(l => !l.hidden).map(l => l.firstChild.value)`)
	}
	if s := shown(); len(s) != 0 || !strings.Contains(text(ctx, t, "#whatif-pools-note"), "type part of an id") {
		t.Errorf("with %d pools and no filter the picker shows %v (note %q); want none, and how to find one", tb.NumPools(), s, text(ctx, t, "#whatif-pools-note"))
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#whatif-filter"), "eu-west")); err != nil {
		t.Fatal(err)
	}
	if s := shown(); strings.Join(s, ",") != "eu-west" {
		t.Errorf("the filter eu-west shows %v", s)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#whatif-pools input[value="eu-west"]`))); err != nil {
		t.Fatal(err)
	}
	eval[bool](ctx, t, `(f => { f.value = ""; return f.dispatchEvent(new Event("input")); })(document.getElementById("whatif-filter"))`)
	if s := shown(); strings.Join(s, ",") != "eu-west" {
		t.Errorf("with the filter cleared the picker shows %v; want the checked eu-west", s)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#whatif-run")), chromedp.WaitVisible(chromedp.CSS("#whatif-result .whatif-summary"))); err != nil {
		t.Fatalf("what-if: %v", err)
	}
	if s := text(ctx, t, "#whatif-result .whatif-summary"); !strings.HasPrefix(s, "With eu-west down") {
		t.Errorf("what-if summary %q", s)
	}
	eval[bool](ctx, t, `document.getElementById("pools-box").open = true`)
	screenshot(ctx, t, "status-page-pools.png")
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

// TestStatusPageWrittenClearsWhenNoSnapshot: #written marked bad (the
// file unreadable) is unmarked when the node answers with no snapshot
// file at all (an agent restarted with --snapshot ""): it kept its bad
// class. The node's answers are the page's fetch, rewritten in the page.
func TestStatusPageWrittenClearsWhenNoSnapshot(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	n := startNode(t, nil)
	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	waitJS(ctx, t, "the snapshot's age", `document.getElementById("written").textContent.includes(" ago (r")`)
	eval[int](ctx, t, `(() => { const real = window.fetch; window.__snap = {path: "/x/table.json", error: "read /x/table.json: input/output error"};
		window.fetch = async (url, opts) => {
			if (!String(url).endsWith("api/node")) return real(url, opts);
			const body = {node: "ui-test", version: "v"};
			if (window.__snap) body.snapshot = window.__snap;
			return new Response(JSON.stringify(body), {status: 200, headers: {"Content-Type": "application/json"}});
		}; return 1; })()`)
	waitJS(ctx, t, "#written unreadable", `document.getElementById("written").textContent === "unreadable" && document.getElementById("written").className === "bad"`)
	eval[int](ctx, t, `(window.__snap = null, 1)`)
	waitJS(ctx, t, "#written without a snapshot file", `document.getElementById("written").textContent.startsWith("no snapshot file")`)
	if c := eval[string](ctx, t, `document.getElementById("written").className`); c != "" {
		t.Errorf("#written with no snapshot file has class %q, want none (it kept the unreadable file's)", c)
	}
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

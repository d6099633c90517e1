package ui_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/devetcd"
	"github.com/regiond/regiond/routing"
)

// gapsFetchHook wraps the page's fetch: while window.__status holds an
// object, /v1/status answers with the agent's real status with those
// fields put over it; while window.__fleet holds [status, body],
// api/fleet answers that, and while window.__table does, /v1/table;
// while window.__snapBack holds a number,
// api/node says the snapshot file is that many revisions before the
// table's newest change; while window.__down is set, every request fails
// as with the agent gone.
const gapsFetchHook = `(() => { const real = window.fetch;
	window.fetch = async (url, opts) => {
		if (window.__down) throw new Error("connection refused");
		const u = String(url);
		if (u.endsWith("v1/status") && window.__status) {
			const body = await (await real(url, opts)).json();
			Object.assign(body, window.__status);
			return new Response(JSON.stringify(body), {status: 200, headers: {"Content-Type": "application/json"}});
		}
		if (u.endsWith("api/node") && window.__snapBack !== undefined) {
			const body = await (await real(url, opts)).json();
			body.snapshot.revision = body.table_change_revision - window.__snapBack;
			return new Response(JSON.stringify(body), {status: 200, headers: {"Content-Type": "application/json"}});
		}
		if (u.includes("v1/table") && window.__table) {
			return new Response(JSON.stringify(window.__table[1]), {status: window.__table[0], headers: {"Content-Type": "application/json"}});
		}
		if (u.endsWith("api/fleet") && window.__fleet) {
			return new Response(JSON.stringify(window.__fleet[1]), {status: window.__fleet[0], headers: {"Content-Type": "application/json"}});
		}
		return real(url, opts);
	}; return 1; })()`

// TestGapsStatusPageInBrowser protects, in a real browser, what an
// operator reads that the other browser tests do not look at:
//   - a boost's reason and attrs holding markup are shown as text, never
//     parsed as HTML (every value goes through textContent);
//   - the Skipped keys box is hidden when the agent skipped none;
//   - a degraded country's row is marked degraded;
//   - the map colours a country whose candidates tie by the first of them;
//   - the what-if picker shows at most 40 of the pools its filter finds,
//     and says how many match;
//   - the snapshot file at the table's newest change is not behind it (not
//     marked), one revision before it is;
//   - the filter keeps the rows matching every term, and "only degraded
//     or no route" keeps only those;
//   - synced_at's age is coloured by /v1/status's stale_seconds: a warning
//     past 30 s, bad past 300 s or when never synced ("never"), plain
//     when fresh;
//   - the fleet marks a lagging agent bad, a clean one ok, and its
//     skipped keys served alike a warning, not bad;
//   - an agent whose role may not read agents/ hides the fleet table and
//     says so, in a note not marked bad;
//   - once the agent answers again after it could not be reached, the
//     banner, the node's dated facts and the fleet's dated rows clear and
//     the badge says live again.
//
// The status and fleet answers of the last three are rewritten in the
// page (gapsFetchHook), as TestStatusPageWrittenClearsWhenNoSnapshot does.
func TestGapsStatusPageInBrowser(t *testing.T) {
	t.Parallel() // mostly waits on the browser and the agent: beside the other browser tests (at most GOMAXPROCS at once)
	n := startNode(t, nil)
	const reason, attr = `<b id="inj-reason">bold</b> & <img src="x">`, `<i id="inj-attr">v</i>`
	cli := devetcd.NewTestClient(t, n.etcd)
	if _, err := cli.Put(context.Background(), root+"routing/overrides/inj",
		fmt.Sprintf(`{"route":"KR","targets":[{"pool":"kr-music","weight":100}],"attrs":{"k":%q},"reason":%q}`, attr, reason)); err != nil {
		t.Fatal(err)
	}
	regionctl(t, n, "pool", "drain", "eu-central", "--reason", "gaps test", "--force")
	var puts []clientv3.Op
	for i := range 45 {
		puts = append(puts, clientv3.OpPut(fmt.Sprintf("%srouting/pools/zz-extra-%02d", root, i), fmt.Sprintf(`{"host":"edge-extra-%02d.example.net:443","residency":"eu"}`, i)))
	}
	if _, err := cli.Txn(context.Background()).Then(puts...).Commit(); err != nil {
		t.Fatal(err)
	}
	tb := n.waitTable(t, func(tb *routing.Table) bool {
		p, _ := tb.Pool("eu-central")
		_, extra := tb.Pool("zz-extra-44")
		return len(tb.Overrides()) == 1 && p.Status == routing.StatusDraining && extra
	})
	tw := tb.Effective("TW").Candidates
	if len(tw) != 2 || tw[0].Weight != tw[1].Weight {
		t.Fatalf("TW's candidates %+v: the test needs the example fleet's two of equal weight", tw)
	}
	if len(tb.Skipped()) != 0 || len(tb.Effective("DE").Degraded) == 0 {
		t.Fatalf("the test needs no skipped key and DE degraded: skipped %v, DE %+v", tb.Skipped(), tb.Effective("DE"))
	}
	ctx, scriptErrors := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url("/ui/"))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	waitJS(ctx, t, "the boost and the countries", fmt.Sprintf(`document.querySelectorAll("#boosts tbody tr").length === 1 && Number(document.body.dataset.revision) >= %d`, tb.Revision()))

	// Markup from etcd is text.
	cells := eval[[]string](ctx, t, `[...document.querySelector("#boosts tbody tr").cells].map(c => c.textContent)`)
	if injected := eval[bool](ctx, t, `!!document.querySelector("#inj-reason, #inj-attr, #boosts img")`); injected || len(cells) < 5 || cells[4] != reason || cells[3] != "k="+attr {
		t.Errorf("a boost's markup: parsed as HTML %v, cells %q; want the reason %q and attrs k=%s as text", injected, cells, reason, attr)
	}
	if !eval[bool](ctx, t, `document.getElementById("skipped-box").hidden`) {
		t.Error("the Skipped keys box is shown with no key skipped")
	}
	if cls := eval[string](ctx, t, `document.querySelector('#countries tr[data-cc="DE"]').className`); cls != "degraded" {
		t.Errorf("DE's row (degraded by the drain) has class %q, want degraded", cls)
	}

	// The map: a tie coloured by the first candidate.
	waitJS(ctx, t, "the map", `document.querySelectorAll("#map path[data-cc=TW]").length > 0 && document.querySelector("#map path[data-cc=TW]").dataset.pool !== undefined`)
	if got := eval[string](ctx, t, `document.querySelector("#map path[data-cc=TW]").dataset.pool`); got != tw[0].Pool {
		t.Errorf("the map colours TW (a tie of %s and %s) by %q, want the first, %s", tw[0].Pool, tw[1].Pool, got, tw[0].Pool)
	}

	// The what-if picker: the first 40 of the 45 pools found.
	eval[int](ctx, t, `(f => { f.value = "zz-extra"; f.dispatchEvent(new Event("input")); return 1; })(document.getElementById("whatif-filter"))`)
	if n, note := eval[int](ctx, t, `[...document.querySelectorAll("#whatif-pools label")].filter(l => !l.hidden).length`), text(ctx, t, "#whatif-pools-note"); n != 40 || note != "45 pools match; the first 40 shown: type more" {
		t.Errorf("the picker's filter zz-extra shows %d pools, note %q; want 40, and that 45 match", n, note)
	}

	// The filter: every term; the problems only.
	shown := func() []string {
		return eval[[]string](ctx, t, `[...document.querySelectorAll("#countries tbody tr")].filter(r => !r.hidden).map(r => r.dataset.cc)`)
	}
	setFilter := `(f => { f.value = %q; f.dispatchEvent(new Event("input")); return 1; })(document.getElementById("filter"))`
	eval[int](ctx, t, fmt.Sprintf(setFilter, "kr jp"))
	all := eval[[][]string](ctx, t, `(() => { const rows = [...document.querySelectorAll("#countries tbody tr")];
		const match = (f) => rows.filter(r => f(["kr", "jp"].map(w => r.dataset.search.includes(w)))).map(r => r.dataset.cc);
		return [match(m => m.every(Boolean)), match(m => m.some(Boolean))]; })()`)
	if got := shown(); strings.Join(got, " ") != strings.Join(all[0], " ") || len(all[1]) <= len(all[0]) {
		t.Errorf("filter \"kr jp\" shows %v; want the rows holding both (%v), not either (%v)", got, all[0], all[1])
	}
	eval[int](ctx, t, fmt.Sprintf(setFilter, ""))
	eval[int](ctx, t, `(c => { c.checked = true; c.dispatchEvent(new Event("change")); return 1; })(document.getElementById("only-problems"))`)
	problems := eval[[]string](ctx, t, `[...document.querySelectorAll("#countries tbody tr")].filter(r => r.classList.contains("degraded") || r.classList.contains("noroute")).map(r => r.dataset.cc)`)
	if got := shown(); len(problems) == 0 || strings.Join(got, " ") != strings.Join(problems, " ") {
		t.Errorf("only degraded or no route shows %v; want %v", got, problems)
	}
	if got, want := text(ctx, t, "#country-count"), fmt.Sprintf("%d of %d", len(problems), len(routing.Countries())+1); got != want {
		t.Errorf("country count %q with only the problems shown, want %q", got, want)
	}

	// The snapshot file at the table's newest change, then before it.
	eval[int](ctx, t, gapsFetchHook)
	eval[int](ctx, t, `(window.__snapBack = 0, 1)`)
	waitJS(ctx, t, "#written at the table's change", `document.getElementById("written").textContent.endsWith(" (r" + window.regiondUI.node.table_change_revision + ")") && window.regiondUI.node.snapshot.revision === window.regiondUI.node.table_change_revision`)
	if cls := eval[string](ctx, t, `document.getElementById("written").className`); cls != "" {
		t.Errorf("#written at the table's newest change reads %q with class %q; want it not marked", text(ctx, t, "#written"), cls)
	}
	eval[int](ctx, t, `(window.__snapBack = 1, 1)`)
	waitJS(ctx, t, "#written behind", `document.getElementById("written").textContent.includes(", behind the table served (r") && document.getElementById("written").className === "bad"`)
	eval[int](ctx, t, `(delete window.__snapBack, 1)`)

	// synced_at's colour by stale_seconds.
	for _, c := range []struct {
		status, class, text string
	}{
		{`{"stale_seconds": 100}`, "warn", " ago"},
		{`{"stale_seconds": 400}`, "bad", " ago"},
		{`{"stale_seconds": 0}`, "", " ago"},
		{`{"stale_seconds": -1, "synced_at": ""}`, "bad", "never"},
	} {
		eval[int](ctx, t, `(window.__status = `+c.status+`, 1)`)
		waitJS(ctx, t, "#synced for "+c.status, fmt.Sprintf(`window.regiondUI.status && window.regiondUI.status.stale_seconds === %s.stale_seconds && document.getElementById("synced").textContent.endsWith(%q)`, c.status, c.text))
		if got := eval[string](ctx, t, `document.getElementById("synced").className`); got != c.class {
			t.Errorf("#synced with %s has class %q, want %q", c.status, got, c.class)
		}
	}
	eval[int](ctx, t, `(window.__status = null, 1)`)

	// The fleet's colours, and the fleet denied.
	now := time.Now().UTC().Format(time.RFC3339Nano)
	eval[int](ctx, t, fmt.Sprintf(`(window.__fleet = [200, {revision: 50, routing_revision: 40, epoch: 1, lost: [], agents: [
		{node: "lagging", revision: 39, lag: 1, epoch: 1, connected: true, synced_at: %[1]q, skipped: 0, skipped_alike: 0, version: "v"},
		{node: "alike", revision: 50, lag: 0, epoch: 1, connected: true, synced_at: %[1]q, skipped: 2, skipped_alike: 2, version: "v"},
		{node: "clean", revision: 50, lag: 0, epoch: 1, connected: true, synced_at: %[1]q, skipped: 0, skipped_alike: 0, version: "v"}]}], 1)`, now))
	waitJS(ctx, t, "the rewritten fleet", `[...document.querySelectorAll("#fleet tbody tr")].map(r => r.cells[0].textContent).join() === "lagging,alike,clean"`)
	fleet := eval[[][]string](ctx, t, `[...document.querySelectorAll("#fleet tbody tr")].map(r => [r.cells[2].className, r.cells[6].className])`)
	if want := [][]string{{"num bad", "num"}, {"num ok", "num warn"}, {"num ok", "num"}}; fmt.Sprint(fleet) != fmt.Sprint(want) {
		t.Errorf("the fleet's lag and skipped classes %q, want %q (lag 1 bad; 2 skipped all served alike a warning; none plain)", fleet, want)
	}
	eval[int](ctx, t, `(window.__fleet = [403, {denied: true, error: "etcdserver: permission denied"}], 1)`)
	waitJS(ctx, t, "the fleet denied", `document.getElementById("fleet-note").textContent.startsWith("This agent may not read the fleet: etcdserver: permission denied")`)
	if hidden, cls := eval[bool](ctx, t, `document.getElementById("fleet").hidden`), text(ctx, t, "#fleet-note"); !hidden {
		t.Errorf("the fleet table is shown while the agent may not read the fleet (note %q)", cls)
	}
	if cls := eval[string](ctx, t, `document.getElementById("fleet-note").className`); cls != "note" {
		t.Errorf("the fleet note when denied has class %q, want note (least privilege is no fault)", cls)
	}
	eval[int](ctx, t, `(window.__fleet = null, 1)`)
	waitJS(ctx, t, "the real fleet again", `!document.getElementById("fleet").hidden && document.querySelectorAll("#fleet tbody tr").length === 1`)

	// The table not served (a 503 before the first sync, a 429 with too
	// many blocking queries waiting): the badge says so, not "live".
	eval[int](ctx, t, `(window.__table = [503, {error: "no table yet"}], 1)`)
	waitJS(ctx, t, "the table not served", `document.getElementById("live").textContent === "no table" && document.getElementById("live").classList.contains("bad") &&
		document.getElementById("banner").textContent.includes("no table yet")`)
	eval[int](ctx, t, `(window.__table = null, 1)`)
	waitJS(ctx, t, "the table served again", `document.getElementById("live").textContent === "live" && document.getElementById("banner").hidden`)

	// The agent gone, then back: everything clears.
	eval[int](ctx, t, `(window.__down = true, 1)`)
	waitJS(ctx, t, "the agent unreachable", `document.getElementById("banner").textContent.startsWith("Cannot reach the agent") &&
		document.getElementById("node-status").classList.contains("dated") && document.getElementById("fleet-section").classList.contains("dated")`)
	eval[int](ctx, t, `(window.__down = false, 1)`)
	waitJS(ctx, t, "the agent reached again", `document.getElementById("banner").hidden && document.getElementById("live").textContent === "live" &&
		!document.getElementById("node-status").classList.contains("dated") && !document.getElementById("fleet-section").classList.contains("dated")`)
	if errs := scriptErrors(); len(errs) > 0 {
		t.Errorf("errors on the page's console:\n%s", strings.Join(errs, "\n"))
	}
}

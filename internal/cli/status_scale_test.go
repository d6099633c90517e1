package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/regiond/regiond/routing"
)

// scaleFleet puts 30 live agents at the newest routing change, with
// three kinds of problems, and one lost node: 8 in step (edge-ok-NN), 6
// behind by 1 to 6 revisions (edge-lag-NN), 3 serving a refused route
// (edge-ref-N), 12 whose snapshot files are not written, all for one
// reason (edge-snap-NN), and one of another history (edge-future, its
// revision past etcd's); edge-lost's record says revision rev-1 and it
// has no status key. It returns the newest routing change.
func (e *tenv) scaleFleet() int64 {
	e.t.Helper()
	for range 8 { // revisions to lag by: the seed may be etcd's first write
		if _, err := testClient.Put(context.Background(), e.prefix+"-scratch", "x"); err != nil {
			e.t.Fatal(err)
		}
	}
	e.seed()
	lease := grantLease(e.t)
	rev := e.newest()
	now := time.Now().UTC().Format(time.RFC3339)
	put := func(st routing.AgentStatus) {
		st.Connected, st.Version, st.SyncedAt = true, "test", now
		if st.Revision == 0 {
			st.Revision = rev
		}
		e.putAgentStatus(st, lease)
	}
	for i := range 8 {
		put(routing.AgentStatus{Node: fmt.Sprintf("edge-ok-%02d", i)})
	}
	for i := range 6 {
		put(routing.AgentStatus{Node: fmt.Sprintf("edge-lag-%02d", i), Revision: rev - int64(i+1)})
	}
	for i := range 3 {
		put(routing.AgentStatus{Node: fmt.Sprintf("edge-ref-%d", i), Skipped: 1, SkippedKeys: []string{"routes/PL"}})
	}
	for i := range 12 {
		put(routing.AgentStatus{Node: fmt.Sprintf("edge-snap-%02d", i), SnapshotError: "write snapshot index: no space left on device"})
	}
	put(routing.AgentStatus{Node: "edge-future", Revision: rev + 1_000_000})
	e.putNodeRecord(routing.AgentStatus{Node: "edge-lost", Revision: rev - 1, Connected: true, Version: "test", SyncedAt: now})
	return rev
}

// rowsOf are the table rows of a status output: its lines whose first
// column is an edge- node.
func rowsOf(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, "edge-") && !strings.HasSuffix(f[0], ":") {
			rows = append(rows, f)
		}
	}
	return rows
}

// TestStatusNotConvergedAtScale: with many agents not converged (the
// scale review's 5,000, 600 of them not converged), status's summary says
// how many for each reason; the paragraphs under the table say each
// message once, with how many agents and the first 10 names and "and N
// more" (they were one per agent: 200 alike), a single agent's as
// before; the table lists every agent, by node. --not-converged lists
// only the agents not converged and the lost node, sorted by why (column
// REASON), the most behind first; -o json has the counts by reason
// (not_converged) and, with --not-converged, only those agents.
func TestStatusNotConvergedAtScale(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scaleFleet()
	snapMsg := "not converged: its snapshot files are not written, so the front doors reading them route by an older table: write snapshot index: no space left on device"

	out := e.must(ExitOK, "status").stdout
	if !strings.Contains(out, "30 live agent(s): 8 converged, 22 not (1 of another history, 3 serving refused values, 12 with snapshot files not written, 6 behind); 1 lost (") {
		t.Fatalf("status summary:\n%s", out)
	}
	names := "edge-snap-00, edge-snap-01, edge-snap-02, edge-snap-03, edge-snap-04, edge-snap-05, edge-snap-06, edge-snap-07, edge-snap-08, edge-snap-09, and 2 more"
	if !strings.Contains(out, "\n12 agents: "+snapMsg+"\n  "+names+"\n") || strings.Count(out, "no space left on device") != 1 {
		t.Fatalf("status's paragraphs of the 12 agents with snapshot files not written: want one, naming 10 and 2 more:\n%s", out)
	}
	if !strings.Contains(out, "\nedge-future: not converged: revision ") {
		t.Fatalf("status's paragraph of the single agent of another history, as before:\n%s", out)
	}
	rows := rowsOf(out)
	if len(rows) != 31 || !slices.IsSortedFunc(rows[:30], func(a, b []string) int { return strings.Compare(a[0], b[0]) }) || rows[30][0] != "edge-lost" {
		t.Fatalf("status's table: want the 30 agents by node, then edge-lost; got %d rows:\n%s", len(rows), out)
	}
	if strings.Contains(out, "REASON") {
		t.Fatalf("status's default table has a REASON column:\n%s", out)
	}

	out = e.must(ExitOK, "status", "--not-converged").stdout
	if !strings.Contains(out, "30 live agent(s): 8 converged, 22 not (") || !strings.Contains(out, "\n12 agents: "+snapMsg) {
		t.Fatalf("status --not-converged: the summary and paragraphs are the fleet's:\n%s", out)
	}
	rows = rowsOf(out)
	var got []string
	for _, r := range rows {
		got = append(got, r[0]+" "+r[len(r)-1])
	}
	want := []string{"edge-future other_history", "edge-ref-0 refused_values", "edge-ref-1 refused_values", "edge-ref-2 refused_values"}
	for i := range 12 {
		want = append(want, fmt.Sprintf("edge-snap-%02d snapshot_not_written", i))
	}
	for i := 5; i >= 0; i-- { // the most behind first
		want = append(want, fmt.Sprintf("edge-lag-%02d behind", i))
	}
	want = append(want, "edge-lost lost")
	if !slices.Equal(got, want) || !strings.Contains(out, "REASON") {
		t.Fatalf("status --not-converged rows:\n%s\nwant (node, reason) %v", out, want)
	}
	// Judged as --max-lag judges them: within 3 revisions, the 3 least
	// behind are no problem.
	out = e.must(ExitNotConverged, "status", "--not-converged", "--max-lag", "3").stdout
	if rows := rowsOf(out); len(rows) != 20 || rows[16][0] != "edge-lag-05" || rows[18][0] != "edge-lag-03" {
		t.Fatalf("status --not-converged --max-lag 3: want 19 agents and edge-lost, edge-lag-05 to -03 among them:\n%s", out)
	}

	type fleetJSON struct {
		Agents       []struct{ Node string }
		Lost         []struct{ Node string }
		Converged    int            `json:"converged"`
		NotConverged map[string]int `json:"not_converged"`
	}
	counts := map[string]int{"other_history": 1, "refused_values": 3, "snapshot_not_written": 12, "behind": 6}
	var all, problems fleetJSON
	mustJSON(t, e.must(ExitOK, "status", "-o", "json").stdout, &all)
	mustJSON(t, e.must(ExitOK, "status", "--not-converged", "-o", "json").stdout, &problems)
	if len(all.Agents) != 30 || len(all.Lost) != 1 || all.Converged != 8 || !maps.Equal(all.NotConverged, counts) {
		t.Fatalf("status -o json: %d agents, %d lost, converged %d, not_converged %v; want 30, 1, 8, %v", len(all.Agents), len(all.Lost), all.Converged, all.NotConverged, counts)
	}
	if len(problems.Agents) != 22 || problems.Agents[0].Node != "edge-future" || len(problems.Lost) != 1 || problems.Converged != 8 || !maps.Equal(problems.NotConverged, counts) {
		t.Fatalf("status --not-converged -o json: %+v", problems)
	}

	// A fleet in step: no row, and a line that says so; an empty one
	// says it has no agent, not that every agent is converged.
	e2 := newEnv(t)
	e2.seed()
	if out := e2.must(ExitOK, "status", "--not-converged").stdout; !strings.Contains(out, "no live agent, and no node is lost") || strings.Contains(out, "converged (lag") {
		t.Fatalf("status --not-converged of no fleet:\n%s", out)
	}
	rev, _ := e2.fingerprint()
	e2.putAgent("edge-a", rev, grantLease(t))
	if out := e2.must(ExitOK, "status", "--not-converged").stdout; len(rowsOf(out)) != 0 || !strings.Contains(out, "every live agent is converged (lag at most 0) and no node is lost") {
		t.Fatalf("status --not-converged of a fleet in step:\n%s", out)
	}
}

// TestWaitConvergedTimeoutJSON: a --wait-converged that times out says in
// -o json, beside "converged": false, how many agents confirmed the write
// (converged_agents), how many did not for each reason (not_converged)
// and the first 10 of each (not_converged_nodes), as stderr says them (the
// scale review: only "converged": false was there).
func TestWaitConvergedTimeoutJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scaleFleet()
	ok := make([]string, 8)
	for i := range ok {
		ok[i] = fmt.Sprintf("edge-ok-%02d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.agentSim(ctx, 50*time.Millisecond, grantLease(t), ok...) // they confirm the write; the others do not move

	r := e.must(ExitNotConverged, "-o", "json", "pool", "drain", "eu-north", "--wait-converged=2s")
	var out struct {
		Converged         *bool               `json:"converged"`
		ConvergedAgents   int                 `json:"converged_agents"`
		NotConverged      map[string]int      `json:"not_converged"`
		NotConvergedNodes map[string][]string `json:"not_converged_nodes"`
	}
	mustJSON(t, r.stdout, &out)
	counts := map[string]int{"behind": 6, "refused_values": 3, "snapshot_not_written": 12, "other_history": 1, "lost": 1}
	if out.Converged == nil || *out.Converged || out.ConvergedAgents != 8 || !maps.Equal(out.NotConverged, counts) {
		t.Fatalf("-o json of a timed-out wait: converged %v, converged_agents %d, not_converged %v; want false, 8, %v\n%s",
			out.Converged, out.ConvergedAgents, out.NotConverged, counts, r)
	}
	snap := make([]string, 10)
	for i := range snap {
		snap[i] = fmt.Sprintf("edge-snap-%02d", i)
	}
	if n := out.NotConvergedNodes; !slices.Equal(n["snapshot_not_written"], snap) || !slices.Equal(n["lost"], []string{"edge-lost"}) ||
		!slices.Equal(n["other_history"], []string{"edge-future"}) || len(n["behind"]) != 6 || n["behind"][0] != "edge-lag-00" || len(n["refused_values"]) != 3 {
		t.Fatalf("-o json of a timed-out wait: not_converged_nodes %v", n)
	}
	if !strings.Contains(r.stderr, "and 12 more (regionctl status lists them all)") {
		t.Fatalf("the timed-out wait's message: %s", r.stderr)
	}
}

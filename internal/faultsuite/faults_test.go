package faultsuite

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// faultKinds are the faults the suite injects, in a shuffled cycle so that
// every kind comes up in every run.
var faultKinds = []string{"kill-leader", "partition", "restart-proxy", "kill-agent", "cut-agent", "kill-agent", "cut-agent"}

// injectFaultsUntil injects one fault after another (each healed before
// the next) until done is closed. It runs in the test's goroutine: the
// cluster's helpers may fail the test.
func (f *fleet) injectFaultsUntil(done <-chan struct{}) {
	var cycle []string
	for {
		select {
		case <-done:
			return
		case <-time.After(time.Duration(100+f.rng.IntN(400)) * time.Millisecond):
		}
		if len(cycle) == 0 {
			cycle = append([]string(nil), faultKinds...)
			f.rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
		}
		kind := cycle[0]
		cycle = cycle[1:]
		f.inject(kind)
		f.faults[kind]++
	}
}

// awaitLeaderless waits until partitioned member i says it has no leader
// (raft's election timeout without a word from the others), failing the
// test after 10 s: a partition held only until then would test nothing,
// since watches there end (WithRequireLeader) only once it has none.
func (f *fleet) awaitLeaderless(i int) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := f.c.MemberStatus(context.Background(), i)
		if err == nil && st.Leader == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("partition of member %d: 10s later it still reports a leader (%v, %v)", i, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inject runs one fault and heals it.
func (f *fleet) inject(kind string) {
	hold := func(lo, hi int) { time.Sleep(time.Duration(lo+f.rng.IntN(hi-lo)) * time.Millisecond) }
	switch kind {
	case "kill-leader":
		i := f.c.KillLeader(f.t)
		hold(500, 2000)
		f.c.Restart(i, 30*time.Second)
	case "partition":
		i := f.rng.IntN(len(f.c.Members))
		f.c.Partition(i)
		f.awaitLeaderless(i) // the fault has taken effect: a watch there ends (no leader)
		hold(1000, 3000)
		f.c.Heal(i)
	case "restart-proxy":
		f.proxy.Stop()
		hold(200, 1500)
		f.proxy.Start()
	case "kill-agent":
		a := f.agents[f.rng.IntN(len(f.agents))]
		a.kill()
		hold(100, 1000)
		if err := a.start(); err != nil {
			f.t.Fatal(err)
		}
	case "cut-agent":
		a := f.agents[f.rng.IntN(len(f.agents))]
		for _, p := range f.links[a] {
			p.Sever()
		}
		hold(300, 3000)
		for _, p := range f.links[a] {
			if err := p.Restore(); err != nil {
				f.t.Fatalf("restore %s's connections: %v", a.name, err)
			}
		}
	default:
		f.t.Fatalf("unknown fault %q", kind)
	}
}

// checkpoint waits until every agent serves revision rev or later, then
// compares each agent's whole table with a fresh compile of etcd's state at
// the agent's revision, and fails on anything the checkers found.
func (f *fleet) checkpoint(ctx context.Context, rev int64, name string) {
	f.t.Helper()
	began := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// Poll every agent until each serves rev: when each got there tells
	// which agent was the last.
	pending := append([]*agentProc(nil), f.agents...)
	slowest := ""
	for len(pending) > 0 {
		var still []*agentProc
		for _, a := range pending {
			st, err := a.status(wctx)
			switch {
			case err == nil && st.Revision >= rev && st.Connected && !st.Stale:
				slowest = a.name
			case wctx.Err() != nil:
				f.t.Fatalf("%s: %s does not serve revision %d after %v (status %+v, err %v)\n%s",
					name, a.name, rev, time.Since(began).Round(time.Millisecond), st, err, a.logTail(40))
			default:
				still = append(still, a)
			}
		}
		if pending = still; len(pending) > 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if d := time.Since(began); d > 5*time.Second {
		for _, a := range f.agents {
			if a.name == slowest {
				f.t.Logf("%s: %s took %v to catch up; its log:\n%s", name, a.name, d.Round(time.Millisecond), a.logTail(40))
			}
		}
	}
	converged := time.Since(began)
	f.verifyRecorder(ctx)
	for _, a := range f.agents {
		if _, err := f.chk.checkTable(ctx, a); err != nil {
			f.t.Errorf("%s: %s: %v", name, a.name, err)
		}
	}
	for _, e := range f.chk.Errs() {
		f.t.Errorf("%s: %s", name, e)
	}
	if err := f.rec.Err(); err != nil {
		f.t.Errorf("%s: %v", name, err)
	}
	if f.t.Failed() {
		f.t.FailNow()
	}
	f.t.Logf("%s: every agent at revision ≥ %d within %v (the last: %s); %d tables equal the reference", name, rev,
		converged.Round(time.Millisecond), slowest, len(f.agents))
}

// report checks the recorder against etcd's final state and logs the
// run's figures.
func (f *fleet) report(ctx context.Context, w *writer, took time.Duration) {
	f.t.Helper()
	f.verifyRecorder(ctx)
	resyncs, reopens := map[string]float64{}, map[string]float64{}
	for _, a := range f.agents {
		for reason, n := range f.metricByLabel(ctx, a, "regiond_watch_resyncs_total", "reason") {
			resyncs[reason] += n
		}
		for reason, n := range f.metricByLabel(ctx, a, "regiond_watch_reopens_total", "reason") {
			reopens[reason] += n
		}
	}
	f.t.Logf("%d operations committed (%d failed under faults) in %v; %d events recorded (%d replays dropped); %d compactions",
		w.ops, w.failed, took.Round(time.Millisecond), f.rec.Events(), f.rec.dupCount(), f.compactions.Load())
	f.t.Logf("faults: %s", formatCounts(f.faults))
	f.t.Logf("agents' relists since their last start, by reason: %s", formatCounts(resyncs))
	f.t.Logf("agents' watch reopens (no list) since their last start, by reason: %s", formatCounts(reopens))
	// The compactions every 200 ms overtake the watches of agents cut off
	// for 0.3-3 s: had none relisted for it, the run tested no
	// compaction past a watch (tens do in a run).
	if f.compactions.Load() == 0 || resyncs["compacted"] == 0 {
		f.t.Errorf("%d compactions, %v relists for compaction: the run never compacted past an agent's watch", f.compactions.Load(), resyncs["compacted"])
	}
	f.t.Logf("checked: %d decisions (%d NoRoute), %d tables, %d agent starts; max lag at a sample %d revisions",
		f.chk.resolves.Load(), f.chk.noRoutes.Load(), f.chk.tables.Load(), f.chk.restarts.Load(), f.chk.maxLag.Load())
}

// verifyRecorder checks the recorder against etcd: its state at etcd's
// current revision must be etcd's.
func (f *fleet) verifyRecorder(ctx context.Context) {
	f.t.Helper()
	resp, err := f.admin.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		f.t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := f.rec.WaitHeard(wctx, resp.Header.Revision); err != nil {
		f.t.Fatal(err)
	}
	got, err := f.rec.StateAt(resp.Header.Revision)
	if err != nil {
		f.t.Fatalf("recorder at the final revision: %v", err)
	}
	if len(got) != len(resp.Kvs) {
		var keys []string
		for _, kv := range got {
			keys = append(keys, kv.Key)
		}
		f.t.Logf("recorder keys %v", keys)
		keys = nil
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		f.t.Logf("etcd keys %v", keys)
		f.t.Fatalf("the recorder holds %d keys at %d, etcd %d", len(got), resp.Header.Revision, len(resp.Kvs))
	}
	for i, kv := range resp.Kvs {
		if got[i].Key != string(kv.Key[len(prefix):]) || string(got[i].Value) != string(kv.Value) || got[i].ModRevision != kv.ModRevision {
			f.t.Fatalf("the recorder's %s (mod %d) differs from etcd's %s (mod %d) at %d", got[i].Key, got[i].ModRevision, kv.Key, kv.ModRevision, resp.Header.Revision)
		}
	}
}

// metricByLabel reads a counter of a's /metrics by one label's value.
func (f *fleet) metricByLabel(ctx context.Context, a *agentProc, name, label string) map[string]float64 {
	out := map[string]float64{}
	code, body, err := a.get(ctx, "/metrics")
	if err != nil || code != http.StatusOK {
		f.t.Errorf("%s /metrics: %d %v", a.name, code, err)
		return out
	}
	re := regexp.MustCompile(`(?m)^` + name + `\{[^}]*` + label + `="([^"]*)"[^}]*\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] += v
	}
	return out
}

func formatCounts[V int | float64](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%v ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

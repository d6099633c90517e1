package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
)

func (a *app) statusCmd() *cobra.Command {
	var maxLag int64
	cmd := &cobra.Command{
		Use:   "status [--max-lag N] [--expect-agents N] [--not-converged]",
		Short: "Show which revision every live agent serves",
		Long: `status lists the live agents (from <root>/agents/), after a summary (how
many are converged, as --max-lag 0 counts, and how many run each version:
an upgrade's progress), with the revision and epoch each serves, its lag
(how many revisions it is behind the newest change under <root>/routing/:
its newest key, or a delete an agent reports having applied) and its
skipped keys: keys whose current value the agent refused, so that it
serves their last good value or nothing, where another agent may serve
something else. The summary breaks the agents not converged down by
why (a status key that does not decode, of another history, serving
refused values, snapshot files not written, behind: each agent under the
first that applies); under the table, the agents not converged for
another reason than their lag are named with why, those of one message
together (the first 10 names, and how many more). --not-converged lists
only the agents not converged (as --max-lag judges them when given, else
as --max-lag 0 does) and the LOST nodes, sorted by why (column REASON),
the most behind first: the rows to look at in a fleet of thousands; the
summary stays the fleet's. With --max-lag N it exits 5 when an agent lags more than N
revisions (0: every agent must be current) or serves refused values of a
pool, route, policy, boost or the epoch, naming the node and the keys (fix
or delete those keys: regionctl validate says what is wrong with them;
skipped health keys and keys outside the grammar, which every agent serves
alike, are shown but do not count, however many, but for an older agent
without skipped_alike past the ten keys it names), when an agent follows
another history (its revision past etcd's, or another epoch than etcd's: a
restored backup, until it relists), and when no agent is live (is --prefix
the agents' --prefix?). --wait-converged counts the same agents as not
converged. Only live agents have a status key; an agent also keeps its last
status, without a lease, as its node record (<root>/nodes/<node>), which a
clean stop removes. A node whose status key ended with no clean stop (cut
off from etcd long enough for its key's lease to end, while its node's
front doors read its last table; crashed; its host gone) is listed LOST,
as its record last said: --max-lag exits 5 naming it when it lags, as
--wait-converged waits for it. regionctl agent rm NODE forgets a node taken out of the
fleet. --expect-agents N (the fleet's size) exits 5 when fewer than N are
live (within --max-lag, when given), as it makes --wait-converged wait for
N: it also counts agents whose role or version keeps no node record.

First comes a line about etcd's members (etcd's member list, then each
member's status, asked at its client URLs from this host, bounded by
--command-timeout): how many answer, the leader and its raft term, each
member that does not answer and why, and how many more voting members
etcd can lose before it loses its quorum; lines of their own name a
learner and the errors and alarms a member reports. A member that does
not answer, or answers without a leader, is also a warning on stderr.
None of this changes the exit code, which is about the agents; if etcd
refuses the member list to the user, the line says so.`,
		Example: `  regionctl status
  regionctl status --not-converged
  regionctl status --max-lag 0 -o json`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.Flags().Int64Var(&maxLag, "max-lag", -1, "exit 5 when an agent, or a lost node as its record last said, lags more than N revisions, serves refused values or follows another history, or none is live (-1: never)")
	var expect int
	cmd.Flags().IntVar(&expect, "expect-agents", 0, "exit 5 when fewer than N agents are live (the fleet's size; set REGIONCTL_EXPECT_AGENTS per fleet), and with --max-lag, when fewer than N are within it")
	var problems bool
	cmd.Flags().BoolVar(&problems, "not-converged", false, "list only the agents not converged (as --max-lag judges them, 0 when not given) and the lost nodes, sorted by why (column REASON; -o json: agents and lost hold only those); the summary stays the fleet's")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		if maxLag < -1 {
			return usagef("--max-lag %d: want 0 or more revisions (or -1, the default: never exit 5)", maxLag)
		}
		if expect < 0 {
			return usagef("--expect-agents %d: want the fleet's number of agents (0, the default: no check)", expect)
		}
		return a.runStatus(ctx, maxLag, expect, fleetView{problems: problems, maxLag: max(maxLag, 0)})
	})
	return cmd
}

func (a *app) runStatus(ctx context.Context, maxLag int64, expect int, view fleetView) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	// etcd's members, beside the agents' read: a member down costs no
	// time then, unless it is the slower.
	members := make(chan *store.EtcdCluster, 1)
	go func() {
		tc, _ := store.DialConfig{CACert: a.cacert, Cert: a.cert, Key: a.tlsKey}.TLS() // loaded once already, by the dial
		members <- st.EtcdMembers(ctx, tc)
	}()
	fleet, err := st.Fleet(ctx)
	if err != nil {
		return err
	}
	etcd := <-members
	for _, w := range etcdWarnings(etcd) {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", w)
	}
	if fleet.LostUnknown != "" {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", fleet.LostUnknown)
	}
	if len(fleet.Agents) == 0 && len(fleet.Lost) == 0 && maxLag < 0 && expect == 0 { // those exit 5 saying so
		// The CLI review: "0 live agent(s)" alone, for a typo in --prefix.
		fmt.Fprintf(a.stderr, "regionctl: warning: no agent is live or lost under %s/: is --prefix the agents' --prefix, and are they running?\n", a.prefix)
	}
	ahead := store.ClocksAhead(fleet.Agents, time.Now())
	if w := clockWarning(ahead, len(fleet.Agents), 0); w != "" {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", w)
	}
	var aheadJSON map[string]float64
	for _, c := range ahead {
		if aheadJSON == nil {
			aheadJSON = map[string]float64{}
		}
		aheadJSON[c.Node] = c.Ahead.Seconds()
	}
	// -o json: the fleet (only its problems with --not-converged), and
	// the summary's counts beside it, the whole fleet's.
	out := struct {
		*store.Fleet
		Converged    int                `json:"converged"`
		NotConverged map[string]int     `json:"not_converged"`
		Versions     map[string]int     `json:"versions"`
		Etcd         *store.EtcdCluster `json:"etcd"`
		ClocksAhead  map[string]float64 `json:"clocks_ahead,omitempty"`
	}{view.fleet(fleet), len(fleet.Agents) - len(fleet.Unconverged(0)), store.ReasonCounts(fleet.Agents, 0), versionTally(fleet.Agents), etcd, aheadJSON}
	err = a.printer().print(out, func(w io.Writer) {
		for _, l := range etcdLines(etcd) {
			fmt.Fprintln(w, l)
		}
		printFleet(w, fleet, view)
	})
	if err != nil {
		return err
	}
	if maxLag < 0 {
		if live := len(fleet.Agents); live < expect {
			return &store.NotConvergedError{Revision: fleet.RoutingRevision, Expected: expect, Confirmed: live}
		}
		return nil
	}
	lag := fleet.Unconverged(maxLag)
	within := len(fleet.Agents) - len(lag)
	// A lost node counts as --wait-converged counts it: as its record
	// last said (one that had the newest change when it was cut off
	// serves it still).
	var lost []store.AgentInfo
	for _, a := range fleet.Lost {
		if !a.Converged(maxLag) {
			lost = append(lost, a)
		}
	}
	switch {
	case len(lag) > 0 || len(lost) > 0:
		return &store.NotConvergedError{Revision: fleet.RoutingRevision, Lagging: lag, Lost: lost, Expected: expect, Confirmed: within}
	case len(fleet.Agents) == 0: // nothing serves the routing state
		return &store.NotConvergedError{Revision: fleet.RoutingRevision, NoAgents: st.Keyspace().AgentsPrefix()}
	case within < expect:
		return &store.NotConvergedError{Revision: fleet.RoutingRevision, Expected: expect, Confirmed: within}
	}
	return nil
}

// etcdLines are status's lines about etcd's members: the summary
// ("etcd: 3 members, 2 answering, leader m0 (raft term 4); m1
// (http://10.0.0.12:2379) does not answer: dial: connect: connection
// refused; one more member lost loses the quorum"), then one per learner,
// per member whose status was refused, and per error its status reports.
func etcdLines(c *store.EtcdCluster) []string {
	if c.Error != "" {
		return []string{"etcd: members not known: " + c.Error + "; status goes on with the agents"}
	}
	answering := 0
	for _, m := range c.Members {
		if m.Answering {
			answering++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "etcd: %d member%s, %d answering", len(c.Members), plural(len(c.Members)), answering)
	if c.Leader != "" {
		fmt.Fprintf(&b, ", leader %s (raft term %d)", c.Leader, c.RaftTerm)
	} else {
		b.WriteString(", no leader known")
	}
	down := c.Down()
	for _, m := range down {
		fmt.Fprintf(&b, "; %s", memberDown(m))
	}
	if len(down) > 0 || len(c.Leaderless()) > 0 || c.QuorumAtRisk {
		b.WriteString("; " + c.Tolerance())
	}
	lines := []string{b.String()}
	reports := map[string][]string{} // error → the members that report it
	var order []string
	for _, m := range c.Members {
		if m.IsLearner {
			lines = append(lines, fmt.Sprintf("etcd: %s is a learner: it does not vote (etcdctl member promote %s, once it has caught up)", m.Display(), m.ID))
		}
		if m.Answering && m.Error != "" {
			lines = append(lines, fmt.Sprintf("etcd: %s: %s", m.Display(), m.Error))
		}
		for _, e := range m.StatusErrors {
			if _, ok := reports[e]; !ok {
				order = append(order, e)
			}
			reports[e] = append(reports[e], m.Display())
		}
	}
	for _, e := range order {
		verb := "report"
		if len(reports[e]) == 1 {
			verb = "reports"
		}
		lines = append(lines, fmt.Sprintf("etcd: %s %s: %s", strings.Join(reports[e], ", "), verb, e))
	}
	return lines
}

// etcdWarnings are the warnings of status about etcd's members: one per
// member that does not answer, or answers without a leader.
func etcdWarnings(c *store.EtcdCluster) []string {
	var out []string
	for _, m := range c.Down() {
		out = append(out, fmt.Sprintf("etcd member %s; %s (to replace a failed member: docs/operations.md, \"Replacing a failed etcd member\")", memberDown(m), c.Tolerance()))
	}
	for _, m := range c.Leaderless() {
		out = append(out, fmt.Sprintf("etcd member %s answers without a leader (cut off from its peers?); %s", m.Display(), c.Tolerance()))
	}
	return out
}

// memberDown is "m1 (http://10.0.0.12:2379) does not answer: why".
func memberDown(m store.EtcdMember) string {
	where := ""
	if len(m.ClientURLs) > 0 {
		where = " (" + strings.Join(m.ClientURLs, ", ") + ")"
	}
	return fmt.Sprintf("%s%s does not answer: %s", m.Display(), where, m.Error)
}

// disconnected counts the agents whose status says their watch is down.
func disconnected(agents []store.AgentInfo) int {
	n := 0
	for _, a := range agents {
		if a.Invalid == "" && !a.Connected {
			n++
		}
	}
	return n
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// fleetView is how status shows the fleet: whole, or with problems set
// (--not-converged) only the agents not converged at maxLag and the lost
// nodes, sorted by why.
type fleetView struct {
	problems bool
	maxLag   int64
}

// fleet is f as the view lists it: f itself, or a copy with only the
// agents not converged, in the order of rows (the lost nodes are all
// listed).
func (v fleetView) fleet(f *store.Fleet) *store.Fleet {
	if !v.problems {
		return f
	}
	g := *f
	g.Agents = v.rows(f.Agents)
	return &g
}

// rows are the agents not converged at maxLag, by why (store.Reasons'
// order), then the most behind first, then by node.
func (v fleetView) rows(agents []store.AgentInfo) []store.AgentInfo {
	rank := map[string]int{}
	for i, r := range store.Reasons {
		rank[r] = i
	}
	out := []store.AgentInfo{}
	for _, a := range agents {
		if !a.Converged(v.maxLag) {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b store.AgentInfo) int {
		return cmp.Or(cmp.Compare(rank[a.NotConvergedReason(v.maxLag)], rank[b.NotConvergedReason(v.maxLag)]),
			cmp.Compare(b.Lag, a.Lag), cmp.Compare(a.Node, b.Node))
	})
	return out
}

func printFleet(w io.Writer, f *store.Fleet, view fleetView) {
	// The summary first: a fleet of thousands does not fit a screen.
	fmt.Fprintf(w, "epoch %d, newest routing change at revision %d, %d live agent(s)", f.Epoch, f.RoutingRevision, len(f.Agents))
	if n := len(f.Agents); n > 0 {
		behind := len(f.Unconverged(0))
		fmt.Fprintf(w, ": %d converged, %d not", n-behind, behind)
		if behind > 0 { // why, at a glance: 600 spread through the table say nothing
			fmt.Fprintf(w, " (%s)", store.ReasonsString(store.ReasonCounts(f.Agents, 0)))
		}
		// Converged counts revisions; an agent at the newest one whose
		// watch is down follows no change until it is back.
		if off := disconnected(f.Agents); off > 0 {
			fmt.Fprintf(w, "; %d not connected to etcd (serving their table; following no change until their watch is back)", off)
		}
	}
	if n := len(f.Lost); n > 0 {
		fmt.Fprintf(w, "; %d lost (status key gone with no clean stop: cut off from etcd, crashed or gone; regionctl agent rm NODE forgets one taken out of the fleet)", n)
	}
	if n := len(f.Agents); n > 0 {
		fmt.Fprintf(w, "\nversions: %s", versionCounts(f.Agents))
	}
	fmt.Fprint(w, "\n\n")
	printAgents(w, f, view)
	for _, l := range notConvergedNotes(f.Agents) {
		fmt.Fprintf(w, "\n%s\n", l)
	}
}

// printAgents writes status's table: every live agent, then the lost
// nodes; with view.problems, only the agents view.rows keeps and the
// lost nodes, with column REASON.
func printAgents(w io.Writer, f *store.Fleet, view fleetView) {
	agents := f.Agents
	cols := []any{"NODE", "REVISION", "LAG", "EPOCH", "CONNECTED", "SYNCED_AT", "VERSION", "SKIPPED"}
	if view.problems {
		agents = view.rows(f.Agents)
		if len(agents) == 0 && len(f.Lost) == 0 {
			if len(f.Agents) == 0 {
				fmt.Fprintln(w, "no live agent, and no node is lost")
				return
			}
			fmt.Fprintf(w, "every live agent is converged (lag at most %d) and no node is lost\n", view.maxLag)
			return
		}
		cols = append(cols, "REASON")
	}
	row(w, cols...)
	// reason is the REASON cell, when the view has the column.
	reason := func(r string) []any {
		if !view.problems {
			return nil
		}
		return []any{r}
	}
	for _, a := range agents {
		if a.Invalid != "" {
			row(w, append([]any{a.Node, "?", "?", "?", "?", "invalid status: " + a.Invalid, "-", "?"}, reason(store.ReasonInvalid)...)...)
			continue
		}
		row(w, append([]any{a.Node, a.Revision, a.Lag, a.Epoch, a.Connected, orDash(a.SyncedAt), orDash(a.Version), store.SkippedString(a.AgentStatus)},
			reason(a.NotConvergedReason(view.maxLag))...)...)
	}
	// A lost node as its record last said: what it may still serve.
	for _, a := range f.Lost {
		if a.Invalid != "" {
			row(w, append([]any{a.Node, "?", "?", "?", "LOST", "invalid record: " + a.Invalid, "-", "?"}, reason(store.ReasonLost)...)...)
			continue
		}
		row(w, append([]any{a.Node, a.Revision, a.Lag, a.Epoch, "LOST", orDash(a.SyncedAt), orDash(a.Version), store.SkippedString(a.AgentStatus)},
			reason(store.ReasonLost)...)...)
	}
}

// maxNoteGroups is how many distinct messages notConvergedNotes writes.
const maxNoteGroups = 10

// notConvergedNotes are the paragraphs under status's table that say why
// agents are not converged beyond their lag (of another history, snapshot
// files not written): one per distinct message, the most agents first; a
// single agent's as "node: not converged: why", several agents' as "N
// agents: not converged: why" and a line naming the first
// store.MaxNamedAgents of them and how many more (the scale review: 200
// paragraphs alike at 5,000 agents). Past maxNoteGroups messages, one
// line says how many more there are.
func notConvergedNotes(agents []store.AgentInfo) []string {
	nodes := map[string][]string{} // message → its agents, in key order
	var order []string
	add := func(msg, node string) {
		if _, ok := nodes[msg]; !ok {
			order = append(order, msg)
		}
		nodes[msg] = append(nodes[msg], node)
	}
	for _, a := range agents {
		if a.Diverged != "" {
			add(a.Diverged, a.Node)
		}
		if a.SnapshotError != "" {
			add(store.SnapshotErrorString(a.SnapshotError), a.Node)
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(len(nodes[b]), len(nodes[a])) })
	var out []string
	for i, msg := range order {
		if i == maxNoteGroups {
			rest := 0
			for _, m := range order[i:] {
				rest += len(nodes[m])
			}
			out = append(out, fmt.Sprintf("and %d more message(s), of %d agent(s) (regionctl status -o json has each agent's diverged and snapshot_error)", len(order)-i, rest))
			break
		}
		ns := nodes[msg]
		if len(ns) == 1 {
			out = append(out, fmt.Sprintf("%s: not converged: %s", ns[0], msg))
			continue
		}
		out = append(out, fmt.Sprintf("%d agents: not converged: %s\n  %s", len(ns), msg, store.FirstNames(ns, ", ")))
	}
	return out
}

// versionCounts is "v1.4.0 (2998), v1.3.2 (2)": each version the agents
// report and how many report it, the most common first (an upgrade's
// progress at a glance).
func versionCounts(agents []store.AgentInfo) string {
	counts := versionTally(agents)
	vs := slices.Collect(maps.Keys(counts))
	slices.SortFunc(vs, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%s (%d)", v, counts[v])
	}
	return strings.Join(parts, ", ")
}

// versionTally counts the agents by the version they report ("-": none,
// "?": a status key that does not decode).
func versionTally(agents []store.AgentInfo) map[string]int {
	counts := map[string]int{}
	for _, a := range agents {
		v := orDash(a.Version)
		if a.Invalid != "" {
			v = "?" // as in the table: the key says nothing
		}
		counts[v]++
	}
	return counts
}

// clockWarning says which of the read agents have a clock ahead of this
// host's ("" when none): boosts end at the expires_at regionctl sets by
// its clock, by each agent's own. For a boost of ttl (0: none), it names
// the agents on which the boost has ended when it arrives.
func clockWarning(ahead []store.ClockAhead, read int, ttl time.Duration) string {
	if len(ahead) == 0 {
		return ""
	}
	const shown = 5
	var names, ended []string
	for i, c := range ahead {
		if i < shown {
			names = append(names, fmt.Sprintf("%s +%s", c.Node, c.Ahead.Round(time.Second)))
		}
		if ttl > 0 && c.Ahead >= ttl {
			ended = append(ended, c.Node)
		}
	}
	if len(ahead) > shown {
		names = append(names, fmt.Sprintf("and %d more", len(ahead)-shown))
	}
	msg := fmt.Sprintf("the clock of %d of the %d agent(s) read is ahead of this host's by more than %s (%s): this host's clock or theirs is off (check NTP); a boost's expires_at is set by regionctl's clock and each agent ends it by its own",
		len(ahead), read, store.MaxClockSkew, strings.Join(names, ", "))
	if len(ended) > 0 {
		if len(ended) > shown {
			ended = append(ended[:shown], fmt.Sprintf("and %d more", len(ended)-shown))
		}
		msg += fmt.Sprintf("; this boost (--ttl %s) has ended by their clocks when it arrives on %s", ttl, strings.Join(ended, ", "))
	}
	return msg
}

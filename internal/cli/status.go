package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
)

func (a *app) statusCmd() *cobra.Command {
	var maxLag int64
	cmd := &cobra.Command{
		Use:   "status [--max-lag N] [--expect-agents N]",
		Short: "Show which revision every live agent serves",
		Long: `status lists the live agents (from <root>/agents/), after a summary (how
many are converged, as --max-lag 0 counts, and how many run each version:
an upgrade's progress), with the revision and epoch each serves, its lag
(how many revisions it is behind the newest change under <root>/routing/:
its newest key, or a delete an agent reports having applied) and its
skipped keys: keys whose current value the agent refused, so that it
serves their last good value or nothing, where another agent may serve
something else. With --max-lag N it exits 5 when an agent lags more than N
revisions (0: every agent must be current) or serves refused values of a
pool, route, policy, boost or the epoch, naming the node and the keys (fix
or delete those keys: regionctl validate says what is wrong with them;
skipped health keys and keys outside the grammar, which every agent serves
alike, are shown but do not count, however many, but for an older agent
without skipped_alike past the ten keys it names), when an agent follows
another history (its revision past etcd's, or another epoch than etcd's: a
restored backup, until it relists), and when no agent is live (is --prefix
the agents' --prefix?). --wait-converged counts the same agents as not
converged. Only live agents have a status key: one stopped, or cut off from
etcd long enough for its key's lease to end (while its node's front doors
read its last table), is not listed; --expect-agents N (the fleet's size)
exits 5 when fewer than N are live (within --max-lag, when given), as it
makes --wait-converged wait for N.`,
		Example: `  regionctl status
  regionctl status --max-lag 0 -o json`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.Flags().Int64Var(&maxLag, "max-lag", -1, "exit 5 when an agent lags more than N revisions, serves refused values or follows another history, or none is live (-1: never)")
	var expect int
	cmd.Flags().IntVar(&expect, "expect-agents", 0, "exit 5 when fewer than N agents are live (the fleet's size; set REGIONCTL_EXPECT_AGENTS per fleet), and with --max-lag, when fewer than N are within it")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		if maxLag < -1 {
			return usagef("--max-lag %d: want 0 or more revisions (or -1, the default: never exit 5)", maxLag)
		}
		if expect < 0 {
			return usagef("--expect-agents %d: want the fleet's number of agents (0, the default: no check)", expect)
		}
		return a.runStatus(ctx, maxLag, expect)
	})
	return cmd
}

func (a *app) runStatus(ctx context.Context, maxLag int64, expect int) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	fleet, err := st.Fleet(ctx)
	if err != nil {
		return err
	}
	// -o json: the fleet, and the summary's counts beside it.
	out := struct {
		*store.Fleet
		Converged int            `json:"converged"`
		Versions  map[string]int `json:"versions"`
	}{fleet, len(fleet.Agents) - len(fleet.Unconverged(0)), versionTally(fleet.Agents)}
	err = a.printer().print(out, func(w io.Writer) { printFleet(w, fleet) })
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
	switch {
	case len(lag) > 0:
		return &store.NotConvergedError{Revision: fleet.RoutingRevision, Lagging: lag, Expected: expect, Confirmed: within}
	case len(fleet.Agents) == 0: // nothing serves the routing state
		return &store.NotConvergedError{Revision: fleet.RoutingRevision, NoAgents: st.Keyspace().AgentsPrefix()}
	case within < expect:
		return &store.NotConvergedError{Revision: fleet.RoutingRevision, Expected: expect, Confirmed: within}
	}
	return nil
}

func printFleet(w io.Writer, f *store.Fleet) {
	// The summary first: a fleet of thousands does not fit a screen.
	fmt.Fprintf(w, "epoch %d, newest routing change at revision %d, %d live agent(s)", f.Epoch, f.RoutingRevision, len(f.Agents))
	if n := len(f.Agents); n > 0 {
		behind := len(f.Unconverged(0))
		fmt.Fprintf(w, ": %d converged, %d not", n-behind, behind)
		fmt.Fprintf(w, "\nversions: %s", versionCounts(f.Agents))
	}
	fmt.Fprint(w, "\n\n")
	row(w, "NODE", "REVISION", "LAG", "EPOCH", "CONNECTED", "SYNCED_AT", "VERSION", "SKIPPED")
	for _, a := range f.Agents {
		if a.Invalid != "" {
			row(w, a.Node, "?", "?", "?", "?", "invalid status: "+a.Invalid, "-", "?")
			continue
		}
		row(w, a.Node, a.Revision, a.Lag, a.Epoch, a.Connected, orDash(a.SyncedAt), orDash(a.Version), store.SkippedString(a.AgentStatus))
	}
	for _, a := range f.Agents {
		if a.Diverged != "" {
			fmt.Fprintf(w, "\n%s: not converged: %s\n", a.Node, a.Diverged)
		}
	}
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

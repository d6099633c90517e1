package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/store"
)

func (a *app) agentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Forget a node taken out of the fleet (regionctl status lists it lost)",
		Example: `  regionctl status           # edge-fra-3 LOST: taken out of the fleet without a clean stop
  regionctl agent rm edge-fra-3`,
		RunE: groupRun,
	}
	cmd.AddCommand(a.agentRmCmd())
	return cmd
}

func (a *app) agentRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm NODE",
		Short: "Delete a lost node's record, so status and --wait-converged no longer wait for it",
		Long: `rm deletes the node record of NODE (<root>/nodes/NODE): each agent keeps
its last status there without a lease, and a clean stop removes it. A node
whose status key ended with no clean stop (cut off from etcd, crashed, its
host gone) is listed LOST by regionctl status, and --wait-converged waits
for it; once the node is out of the fleet for good, rm forgets it. rm is
refused (exit 1) while the node's agent is live (its status key is there):
stop it, and its clean stop removes the record. An agent of NODE that runs
again puts its record back. Not audited: it changes no routing state.`,
		Example: `  regionctl status           # edge-fra-3 LOST
  regionctl agent rm edge-fra-3`,
		Args: exactArgs(1, "a node name"),
	}
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		st, err := a.store(ctx)
		if err != nil {
			return err
		}
		node := args[0]
		if !keyspace.ValidNode(node) {
			return usagef("agent rm %q: a node name is not empty and has no '/' or spaces (regionctl status lists the lost nodes)", node)
		}
		rec, err := st.ForgetNode(ctx, node)
		switch {
		case errors.Is(err, store.ErrNodeLive):
			return refusef(st.Keyspace().Node(node), "%v: stop it (systemctl stop regiond on that node; its clean stop removes the record), or check --node", err)
		case errors.Is(err, store.ErrNoNodeRecord):
			return refusef(st.Keyspace().Node(node), "%v: nothing to forget (regionctl status lists the lost nodes)", err)
		case err != nil:
			return err
		}
		if rec.Invalid != "" {
			fmt.Fprintf(a.stdout, "forgot node %s (its record did not decode: %s)\n", node, rec.Invalid)
			return nil
		}
		fmt.Fprintf(a.stdout, "forgot node %s (its record said revision %d, epoch %d, version %s)\n", node, rec.Revision, rec.Epoch, orDash(rec.Version))
		return nil
	})
	return cmd
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/didyoumean"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
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
	var ignore bool
	cmd := &cobra.Command{
		Use:   "rm NODE...",
		Short: "Delete lost nodes' records, so status and --wait-converged no longer wait for them",
		Long: `rm deletes the node record of each NODE (<root>/nodes/NODE): each agent
keeps its last status there without a lease, and a clean stop removes it.
A node whose status key ended with no clean stop (cut off from etcd,
crashed, its host gone) is listed LOST by regionctl status, and
--wait-converged waits for it; once the node is out of the fleet for good,
rm forgets it. rm of a node is refused while the node's agent is live (its
status key is there): stop it, and its clean stop removes the record. With
several nodes, each is forgotten or refused on its own, and any refusal
exits 1, naming each. An agent of NODE that runs again puts its record
back. With --ignore-not-found, a node with no record is passed over (a
clean-up script run twice). Not audited: it changes no routing state.`,
		Example: `  regionctl status           # edge-fra-3 LOST
  regionctl agent rm edge-fra-3
  regionctl agent rm edge-fra-3 edge-fra-4 edge-fra-5   # a rack taken out`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s takes one or more node names (regionctl status lists the lost nodes)", cmd.CommandPath())
			}
			return nil
		},
	}
	addIgnoreNotFoundFlag(cmd, &ignore)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		for _, node := range args {
			if !keyspace.ValidNode(node) {
				return usagef("agent rm %q: a node name is not empty and has no '/' or spaces (regionctl status lists the lost nodes)", node)
			}
		}
		st, err := a.store(ctx)
		if err != nil {
			return store.NothingWritten(err) // etcd not reached: nothing deleted
		}
		var refused routing.Errors
		seen := map[string]bool{}
		for _, node := range args {
			if seen[node] {
				continue // named twice: forgotten once
			}
			seen[node] = true
			why, err := a.forgetNode(ctx, st, node, ignore)
			if err != nil {
				// The nodes refused before it are named all the same:
				// the run ends with etcd's error (its exit code).
				for _, r := range refused {
					fmt.Fprintf(a.stderr, "REFUSED %s\n", r)
				}
				return err
			}
			if why != nil {
				refused = append(refused, why)
			}
		}
		if len(refused) > 0 {
			return refusedError{refused}
		}
		return nil
	})
	return cmd
}

// forgetNode deletes node's record and says so on stdout; a refusal (the
// node live, no record unless ignoreAbsent) is returned as a problem
// naming the record's key, an error of etcd as an error.
func (a *app) forgetNode(ctx context.Context, st *store.Store, node string, ignoreAbsent bool) (*routing.FieldError, error) {
	rec, err := st.ForgetNode(ctx, node)
	key := st.Keyspace().Node(node)
	switch {
	case errors.Is(err, store.ErrNodeLive):
		return &routing.FieldError{Key: key, Msg: fmt.Sprintf("%v: stop it (systemctl stop regiond on that node; its clean stop removes the record), or check --node", err)}, nil
	case errors.Is(err, store.ErrNoNodeRecord) && ignoreAbsent:
		fmt.Fprintf(a.stdout, "node %s has no record: nothing to forget (--ignore-not-found)\n", node)
		return nil, nil
	case errors.Is(err, store.ErrNoNodeRecord):
		msg := fmt.Sprintf("%v: nothing to forget (regionctl status lists the lost nodes)", err)
		if names, lerr := st.NodeNames(ctx); lerr == nil { // a hint only: a refused list says nothing
			if near := didyoumean.Near(node, names); len(near) > 0 {
				msg += "; did you mean " + strings.Join(near, " or ") + "?"
			}
		}
		return &routing.FieldError{Key: key, Msg: msg}, nil
	case err != nil:
		return nil, err
	}
	if rec.Invalid != "" {
		fmt.Fprintf(a.stdout, "forgot node %s (its record did not decode: %s)\n", node, rec.Invalid)
		return nil, nil
	}
	fmt.Fprintf(a.stdout, "forgot node %s (its record said revision %d, epoch %d, version %s)\n", node, rec.Revision, rec.Epoch, orDash(rec.Version))
	return nil, nil
}

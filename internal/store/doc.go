// Package store is regionctl's etcd I/O. It loads the whole routing state
// at one revision (paged) and sends every write through one path: the
// caller builds the whole proposed state from the current one, the store
// validates it (docs/keys-and-values.md, invariants) and commits it in one Txn guarded by the epoch,
// which bumps the epoch and writes the audit record of the change:
//
//	If(mod_revision(epoch) == R_E, no audit record of epoch E+1 or later)
//	Then(puts, deletes, epoch=E+1, audit/<E+1>, delete audit records older than the newest 10,000)
//
// A writer that lost the race gets a *ConflictError; a proposal that breaks
// an invariant gets a *RefusedError listing every problem; an epoch key
// reset by hand (an audit record of E+1 exists) gets an *EpochResetError;
// an etcd that does not answer gives an *UnreachableError naming the
// endpoints tried. A commit that gets no answer is read back (see resolve)
// so that it reports what really happened; when even that fails, the
// error is an *OutcomeUnknownError.
//
//	st := store.New(cli, keyspace.Default(), store.Options{})
//	res, err := st.Write(ctx, store.WriteRequest{
//		Command: "pool drain eu-central",
//		Reason:  "kernel upgrade",
//		Build: func(ctx context.Context, cur *store.State) (*store.Plan, error) {
//			cfg := cur.Config.Clone()
//			p := cfg.Pools["eu-central"]
//			p.Status = routing.StatusDraining
//			cfg.Pools["eu-central"] = p
//			return &store.Plan{Config: cfg}, nil
//		},
//	})
//
// Overrides (boosts) live under their own lease; health markers are kept
// alive by Heartbeat through a concurrency.Session.
package store

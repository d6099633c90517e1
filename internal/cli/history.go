package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/didyoumean"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

func (a *app) historyCmd() *cobra.Command {
	var limit int64
	var keys []string
	cmd := &cobra.Command{
		Use:   "history [EPOCH] [--touching KEY...]",
		Short: "List the audit trail (or the records that changed some keys), or show one epoch's changes",
		Long: `history lists the audit trail, newest first, or shows one epoch's changes.

With --touching it lists only the records whose changes touch those keys
(who touched DE? eu-west?), --limit counting those, reading back through
the newest ` + strconv.Itoa(maxSearchEpochs) + ` epochs at most (a note on stderr says when the search
stopped there). KEY is relative to <root>/routing/, as the records name
keys (routes/DE, pools/eu-west, policy/residency, overrides/ID), or a bare
route name, pool id or boost id: the one of routes/X, pools/X, overrides/X
the key grammar allows, or else the one stored now (a usage error names
the choices when that is not one key). A route's key also matches its
boosts' changes (overrides whose value names the route). (--key is the
client certificate's key file, as in every verb.)`,
		Example: `  regionctl history
  regionctl history --limit 100 -o json
  regionctl history --touching DE --touching pools/eu-west
  regionctl history --touching routes/DE,routes/AT --limit 0
  regionctl history 42`,
		Args: cobra.MaximumNArgs(1),
	}
	cmd.Flags().Int64Var(&limit, "limit", 20, "newest records to list, with --touching matching records (0: all)")
	cmd.Flags().StringSliceVar(&keys, "touching", nil, "list only the records that change KEY (routes/DE, pools/eu-west, or a bare route, pool or boost id); repeatable or comma-separated")
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		if a.tlsKey != "" && a.cert == "" {
			// history --key DE: the global flag of the TLS key.
			return usagef("%s %q without --cert: %s is the client certificate's key file; to list the records that changed a key: regionctl history --touching %s",
				a.flagOrEnv("key", "--key"), a.tlsKey, a.flagOrEnv("key", "--key"), a.tlsKey)
		}
		if len(args) == 1 {
			epoch, err := parseEpoch(args[0])
			if err != nil {
				if _, nerr := strconv.ParseInt(args[0], 10, 64); len(keys) == 0 && nerr != nil {
					return usagef("history %q: want an epoch (a positive integer); the records that changed a key: regionctl history --touching %s", args[0], args[0])
				}
				return err
			}
			if len(keys) > 0 {
				return usagef("history %d shows that epoch's changes; --touching filters the list of records: give one or the other", epoch)
			}
			return a.runHistoryEpoch(ctx, epoch)
		}
		if limit < 0 {
			return usagef("--limit %d: want 0 (all) or more", limit)
		}
		if len(keys) > 0 {
			return a.runHistoryKeys(ctx, keys, limit)
		}
		return a.runHistory(ctx, limit)
	})
	return cmd
}

func parseEpoch(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, usagef("epoch %q: want a positive integer (see regionctl history)", s)
	}
	return n, nil
}

func (a *app) runHistory(ctx context.Context, limit int64) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	recs, err := st.History(ctx, limit)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Rewritten {
			fmt.Fprintf(a.stderr, "regionctl: warning: the audit record of epoch %d was put again after its commit: it is not what that commit wrote (its revision %d is the rewrite's; \"rewritten\" in -o json)\n", r.Epoch, r.Revision)
		}
	}
	if len(recs) > 1 {
		gaps, err := st.AuditGaps(ctx, recs[len(recs)-1].Epoch, recs[0].Epoch)
		if err != nil {
			fmt.Fprintf(a.stderr, "regionctl: warning: could not check the list for missing records: %v\n", err)
		}
		a.warnMissing(st, gaps)
	}
	if len(recs) > 0 {
		a.warnOldestMissing(ctx, st, recs[len(recs)-1].Epoch)
	}
	a.warnNewestMissing(ctx, st)
	return a.printer().print(recs, func(w io.Writer) {
		row(w, "EPOCH", "AT", "USER", "KEYS", "REASON", "COMMAND")
		for _, r := range recs {
			row(w, r.Epoch, auditTime(r.At), orDash(r.User), len(r.Changes), orDash(r.Reason), r.Command)
		}
	})
}

func (a *app) runHistoryEpoch(ctx context.Context, epoch int64) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	rec, err := st.AuditRecord(ctx, epoch)
	if err != nil {
		return err
	}
	if rec.Rewritten {
		fmt.Fprintf(a.stderr, "regionctl: warning: the audit record of epoch %d was put again after its commit: it is not what that commit wrote (its revision %d is the rewrite's)\n", rec.Epoch, rec.Revision)
	}
	return a.printer().print(rec, func(w io.Writer) { printAudit(w, rec) })
}

func printAudit(w io.Writer, r store.AuditEntry) {
	fmt.Fprintf(w, "epoch %d at %s (revision %d)\n", r.Epoch, auditTime(r.At), r.Revision)
	fmt.Fprintf(w, "by %s on %s: %s\n", orDash(r.User), orDash(r.Host), r.Command)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", r.Reason)
	}
	for _, line := range diffLines(r.Changes) {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// maxSearchEpochs is how far back from the newest record history --touching
// reads the audit trail: as far as a rollback's warning reads it.
const maxSearchEpochs = maxReadEpochs

func (a *app) runHistoryKeys(ctx context.Context, specs []string, limit int64) error {
	f, err := a.historyFilter(ctx, specs)
	if err != nil {
		return err
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	res, err := st.SearchHistory(ctx, func(r store.AuditEntry) bool { return len(f.touched(r)) > 0 }, limit, maxSearchEpochs)
	if err != nil {
		return err
	}
	for _, r := range res.Records {
		if r.Rewritten {
			fmt.Fprintf(a.stderr, "regionctl: warning: the audit record of epoch %d was put again after its commit: it is not what that commit wrote (its revision %d is the rewrite's; \"rewritten\" in -o json)\n", r.Epoch, r.Revision)
		}
	}
	a.warnMissing(st, res.Missing)
	a.warnNewestMissing(ctx, st)
	if res.Newest > 0 && !res.Capped {
		// The oldest match: warnOldestMissing names the records deleted
		// below it when it is the oldest record kept, also when --limit
		// ended the search there, as the list's --limit does.
		a.warnOldestMissing(ctx, st, res.Oldest)
	}
	keys := strings.Join(f.keys, ", ")
	switch {
	case res.Newest == 0:
		fmt.Fprintf(a.stderr, "regionctl: note: no audit record is kept under %s\n", st.Keyspace().AuditPrefix())
	case res.Capped && (limit == 0 || int64(len(res.Records)) < limit):
		fmt.Fprintf(a.stderr, "regionctl: note: the search stopped at its cap, the newest %d epochs (%d back to %d): %d record(s) of them touch %s; older records kept were not searched (regionctl history --limit 0 -o json lists every one)\n",
			maxSearchEpochs, res.Newest, res.Oldest, len(res.Records), keys)
	case len(res.Records) == 0:
		fmt.Fprintf(a.stderr, "regionctl: note: no audit record kept (epochs %d back to %d) touches %s\n", res.Newest, res.Oldest, keys)
	}
	recs := res.Records
	if recs == nil {
		recs = []store.AuditEntry{}
	}
	return a.printer().print(recs, func(w io.Writer) {
		row(w, "EPOCH", "AT", "USER", "KEYS", "TOUCHED", "REASON", "COMMAND")
		for _, r := range recs {
			row(w, r.Epoch, auditTime(r.At), orDash(r.User), len(r.Changes), strings.Join(f.touched(r), ","), orDash(r.Reason), r.Command)
		}
	})
}

// warnMissing names on stderr the runs of epochs whose audit records are
// missing between older and newer ones kept: regionctl deletes only the
// oldest records, so another client deleted these (the operator role can
// write audit/), and the list has a hole no row shows.
func (a *app) warnMissing(st *store.Store, gaps []store.EpochRange) {
	if len(gaps) == 0 {
		return
	}
	what := missingRecords(gaps...)
	fmt.Fprintf(a.stderr, "regionctl: warning: the audit %s missing, though older and newer ones are kept: deleted around regionctl (by hand? the operator role can write %s; regionctl deletes only the oldest records), so the changes of those epochs are not listed, and rollback cannot rebuild a config through them\n",
		what, st.Keyspace().AuditPrefix())
}

// missingRecords says which audit records are missing, as the warnings
// name them: "record of epoch 4 is", "records of epochs 1 to 2, 7 are".
func missingRecords(gaps ...store.EpochRange) string {
	var n int64
	runs := make([]string, len(gaps))
	for i, g := range gaps {
		n += g.To - g.From + 1
		runs[i] = g.String()
	}
	if n == 1 {
		return "record of epoch " + runs[0] + " is"
	}
	return "records of epochs " + strings.Join(runs, ", ") + " are"
}

// warnOldestMissing names on stderr the epochs whose audit records are
// missing below oldest, the epoch of the oldest record a listing reached,
// when that is the oldest record kept: regionctl keeps the newest
// store.DefaultAuditKeep records, those from max(1, current-keep+1), and
// deletes only older ones, so these were deleted around it (warnMissing
// sees only the holes between records kept). It reads the oldest audit
// key and the epoch key, after the listing: a commit meanwhile can only
// hide such a hole, never make one up.
func (a *app) warnOldestMissing(ctx context.Context, st *store.Store, oldest int64) {
	ks := st.Keyspace()
	rctx, cancel := context.WithTimeout(ctx, a.commandTimeout)
	defer cancel()
	first, err := st.Client().Get(rctx, ks.Audit(0), clientv3.WithRange(auditRecordsEnd(ks)), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		fmt.Fprintf(a.stderr, "regionctl: warning: could not check the list for missing records: read the oldest audit key under %s: %v\n", ks.AuditPrefix(), err)
		return
	}
	if len(first.Kvs) == 0 {
		return
	}
	if kept, err := ks.ParseAudit(string(first.Kvs[0].Key)); err != nil || kept != oldest {
		return // the listing stopped short of the oldest record kept
	}
	resp, err := st.Client().Get(rctx, ks.Epoch())
	if err != nil {
		fmt.Fprintf(a.stderr, "regionctl: warning: could not check the list for missing records: read the epoch key %s: %v\n", ks.Epoch(), err)
		return
	}
	if len(resp.Kvs) == 0 {
		return
	}
	cur, ok := routing.ParseEpoch(resp.Kvs[0].Value)
	if !ok || oldest > cur {
		return // an epoch key put by hand: other verbs name it
	}
	from := max(1, cur-store.DefaultAuditKeep+1)
	if oldest <= from {
		return
	}
	what := missingRecords(store.EpochRange{From: from, To: oldest - 1})
	fmt.Fprintf(a.stderr, "regionctl: warning: the audit %s missing, though regionctl keeps the newest %d and the current epoch is %d (the oldest record kept is of epoch %d): deleted around regionctl (by hand? the operator role can write %s), so the changes of those epochs are not listed, and rollback cannot rebuild a config through them\n",
		what, store.DefaultAuditKeep, cur, oldest, ks.AuditPrefix())
}

// warnNewestMissing names on stderr the epochs up to the current one
// whose audit records are missing above the newest record kept: every
// commit writes its record in the Txn that sets the epoch, so these were
// deleted around regionctl, or the epoch key was put forward by hand
// (warnMissing sees only the holes between records kept, which a later
// commit would make of these). The epoch key and the newest audit key
// are read in one Txn, at one revision: a commit meanwhile cannot make
// up a hole.
func (a *app) warnNewestMissing(ctx context.Context, st *store.Store) {
	ks := st.Keyspace()
	rctx, cancel := context.WithTimeout(ctx, a.commandTimeout)
	defer cancel()
	newestKey := []clientv3.OpOption{clientv3.WithRange(auditRecordsEnd(ks)), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1)}
	resp, err := st.Client().Txn(rctx).Then(clientv3.OpGet(ks.Epoch()), clientv3.OpGet(ks.Audit(0), newestKey...)).Commit()
	if err != nil {
		fmt.Fprintf(a.stderr, "regionctl: warning: could not check the list for missing records: read the epoch key %s and the newest audit key: %v\n", ks.Epoch(), err)
		return
	}
	epochKVs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(epochKVs) == 0 {
		return
	}
	cur, ok := routing.ParseEpoch(epochKVs[0].Value)
	if !ok || cur < 1 {
		return // a malformed epoch key: other verbs name it
	}
	var newest int64
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if newest, err = ks.ParseAudit(string(kvs[0].Key)); err != nil {
			return // a key put by hand among the records' digits: not a record
		}
	}
	from := max(newest+1, cur-store.DefaultAuditKeep+1, 1)
	if from > cur {
		return
	}
	what := missingRecords(store.EpochRange{From: from, To: cur})
	kept := "no record is kept"
	if newest > 0 {
		kept = fmt.Sprintf("the newest record kept is of epoch %d", newest)
	}
	fmt.Fprintf(a.stderr, "regionctl: warning: the audit %s missing, though the current epoch is %d (%s): deleted around regionctl (by hand? the operator role can write %s; regionctl deletes only the oldest records), or the epoch key %s put forward by hand, so the changes of those epochs are not listed, and rollback cannot rebuild a config through them\n",
		what, cur, kept, ks.AuditPrefix(), ks.Epoch())
}

// auditRecordsEnd is the end of the range of the audit records' keys,
// from ks.Audit(0): their epochs are digits, so a key put by hand under
// the audit prefix with a name of letters (audit/zz-note) sorts outside
// it, and hides neither the newest nor the oldest record.
func auditRecordsEnd(ks keyspace.Space) string { return ks.AuditPrefix() + ":" }

// keyFilter is what history --touching matches: changes of keys, and of the
// boosts of routes.
type keyFilter struct {
	keys   []string        // relative to <root>/routing/, as given
	exact  map[string]bool // the keys
	routes map[string]bool // routes whose boosts' changes match too
}

// touched returns the keys of r's changes that the filter matches, in
// the record's order.
func (f keyFilter) touched(r store.AuditEntry) []string {
	var out []string
	for _, c := range r.Changes {
		if f.exact[c.Key] || strings.HasPrefix(c.Key, routing.OverrideKey("")) && (f.boostOf(c.Before) || f.boostOf(c.After)) {
			out = append(out, c.Key)
		}
	}
	return out
}

// boostOf reports whether an override value (an audit change's before or
// after) is a boost of one of the filter's routes.
func (f keyFilter) boostOf(raw json.RawMessage) bool {
	if len(f.routes) == 0 {
		return false
	}
	var o struct {
		Route string `json:"route"`
	}
	return json.Unmarshal(raw, &o) == nil && f.routes[o.Route]
}

// historyFilter resolves history --touching's values: a key relative to
// <root>/routing/ (the full key is taken too), checked against the key
// grammar, or a bare name X: the one of routes/X, pools/X, overrides/X
// the grammar allows, else the one stored now. A name that stays
// ambiguous, or names nothing, is a usage error naming the choices.
func (a *app) historyFilter(ctx context.Context, specs []string) (keyFilter, error) {
	f := keyFilter{exact: map[string]bool{}, routes: map[string]bool{}}
	ks, err := keyspace.New(a.prefix)
	if err != nil {
		return f, usageError{err}
	}
	var cur *store.State // read once, for a bare name the grammar leaves ambiguous
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		if rel, ok := ks.Rel(spec); ok {
			spec = rel
		}
		var rel string
		switch {
		case spec == "":
			return f, usagef("--touching '': want a key relative to %s (routes/DE, pools/eu-west) or a route, pool or boost id", ks.Routing())
		case strings.Contains(spec, "/"):
			k, err := routing.ParseKey(spec)
			if err != nil {
				return f, usagef("--touching %s: %v", spec, err)
			}
			if k.Kind == routing.KindHealth || k.Kind == routing.KindEpoch {
				return f, usagef("--touching %s: no audit record names it (health keys are the origins' heartbeats; every commit moves the epoch): give a pool, route, policy or boost key", spec)
			}
			rel = spec
		default:
			var cands []string
			for _, c := range []string{routing.RouteKey(spec), routing.PoolKey(spec), routing.OverrideKey(spec)} {
				if _, err := routing.ParseKey(c); err == nil {
					cands = append(cands, c)
				}
			}
			if len(cands) == 0 {
				return f, usagef("--touching %s: no route name, pool id or boost id is spelled so%s; or give a key relative to %s (routes/DE)", spec, routing.CountryHint(spec), ks.Routing())
			}
			rel = cands[0]
			if len(cands) > 1 {
				if cur == nil {
					if cur, err = a.load(ctx); err != nil {
						return f, err
					}
				}
				var stored []string
				have := map[string]bool{}
				for _, kv := range cur.KVs {
					have[kv.Key] = true
				}
				for _, c := range cands {
					if have[c] {
						stored = append(stored, c)
					}
				}
				switch len(stored) {
				case 1:
					rel = stored[0]
				case 0:
					return f, usagef("--touching %s: no key of that name is stored now, and it could be %s: give the key%s%s", spec, strings.Join(cands, " or "), routing.CountryHint(spec), storedNear(cur, spec))
				default:
					return f, usagef("--touching %s names %s: give the key", spec, strings.Join(stored, " and "))
				}
			}
		}
		if !f.exact[rel] {
			f.keys = append(f.keys, rel)
			f.exact[rel] = true
		}
		if k, _ := routing.ParseKey(rel); k.Kind == routing.KindRoute {
			f.routes[k.ID] = true
		}
	}
	return f, nil
}

// storedNear is "; did you mean X?" for the stored route names, pool ids
// and boost ids within two edits of name, else "" (the CLI review:
// --touching eu-wes named no key near it).
func storedNear(cur *store.State, name string) string {
	var names []string
	for _, kv := range cur.KVs {
		if k, err := routing.ParseKey(kv.Key); err == nil && (k.Kind == routing.KindRoute || k.Kind == routing.KindPool || k.Kind == routing.KindOverride) {
			names = append(names, k.ID)
		}
	}
	slices.Sort(names)
	if near := didyoumean.Near(name, slices.Compact(names)); len(near) > 0 {
		return "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return ""
}

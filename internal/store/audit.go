package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// AuditEntry is an audit record with the revision of the Txn that wrote it.
type AuditEntry struct {
	routing.Audit
	// Revision is the mod revision of the record's key: the revision of
	// the Txn that wrote it (of the rewrite's when Rewritten).
	Revision int64 `json:"revision"`
	// Rewritten says the record is not what its commit wrote: put again
	// since (etcd's version of its key is past 1), deleted and put again
	// (its revision is past the next epoch's record, or past the epoch
	// key's for the newest), or naming another epoch than its key.
	// regionctl writes each record once, in its commit's Txn; the operator
	// role can write audit/ (etcd's RBAC has no append-only). Revision is
	// then the rewrite's.
	Rewritten bool `json:"rewritten,omitempty"`
}

// History returns the newest audit records, newest first; limit <= 0
// means all.
func (s *Store) History(ctx context.Context, limit int64) ([]AuditEntry, error) {
	prefix := s.ks.AuditPrefix()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(limit))
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, prefix, opts...)
	if err != nil {
		return nil, s.permErr("read the audit records "+prefix, err, s.roles.ReadNeed(prefix))
	}
	out := make([]AuditEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e, err := s.decodeAudit(string(kv.Key), kv.Value, kv.ModRevision, kv.Version)
		if err != nil {
			s.log.Warn("skip audit record", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, e)
	}
	// Newest first: each record was committed before the next epoch's.
	for i := 1; i < len(out); i++ {
		if out[i].Revision > out[i-1].Revision {
			out[i].Rewritten = true
		}
	}
	if len(out) > 0 && !out[0].Rewritten {
		out[0].Rewritten = s.pastItsCommit(ctx, out[0])
	}
	return out, nil
}

// pastItsCommit reports whether e's revision is past its commit's: past
// the next epoch's record, or, for the current epoch, past the epoch key's
// (a record deleted and put again; its version is 1 again). Reads that
// fail say nothing.
func (s *Store) pastItsCommit(ctx context.Context, e AuditEntry) bool {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	if resp, err := s.cli.Get(rctx, s.ks.Audit(e.Epoch+1)); err == nil && len(resp.Kvs) > 0 {
		return e.Revision > resp.Kvs[0].ModRevision
	}
	cur, modRev, err := s.epochAt(ctx, 0)
	return err == nil && cur == e.Epoch && modRev > 0 && e.Revision > modRev
}

// AuditRecord returns the audit record of one epoch, or ErrNotFound.
func (s *Store) AuditRecord(ctx context.Context, epoch int64) (AuditEntry, error) {
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	key := s.ks.Audit(epoch)
	resp, err := s.cli.Get(rctx, key)
	if err != nil {
		return AuditEntry{}, s.permErr(fmt.Sprintf("read the audit record of epoch %d (%s)", epoch, key), err, s.roles.ReadNeed(key))
	}
	if len(resp.Kvs) == 0 {
		return AuditEntry{}, s.missingAudit(ctx, epoch)
	}
	e, err := s.decodeAudit(key, resp.Kvs[0].Value, resp.Kvs[0].ModRevision, resp.Kvs[0].Version)
	if err == nil && !e.Rewritten {
		e.Rewritten = s.pastItsCommit(ctx, e)
	}
	return e, err
}

// notFound is an ErrNotFound whose message is said whole, for an
// operator: without ErrNotFound's "store: " text.
type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }
func (e *notFound) Unwrap() error { return ErrNotFound }

// missingAudit says why the audit record of epoch is not found: its epoch
// not committed (yet), older than the newest AuditKeep regionctl keeps,
// or deleted around regionctl (regionctl deletes only the oldest, so a
// record missing with older ones kept, or younger than the newest
// AuditKeep, was deleted by another client: the operator role can write
// audit/). It wraps ErrNotFound.
func (s *Store) missingAudit(ctx context.Context, epoch int64) error {
	cur, _, curErr := s.epochAt(ctx, 0)
	if curErr == nil && epoch == cur+1 {
		// What regionctl names after a write whose outcome it could
		// not learn: that write did not commit, or not yet.
		return &notFound{fmt.Sprintf("no audit record of epoch %d: epoch %d is not committed (the current epoch is %d); a write whose outcome was unknown did not apply, and may be run again", epoch, epoch, cur)}
	}
	if curErr == nil && epoch > cur {
		return &notFound{fmt.Sprintf("no audit record of epoch %d: the current epoch is %d", epoch, cur)}
	}
	lo, hi, err := s.auditBounds(ctx)
	kept := ""
	if err == nil && lo > 0 {
		kept = fmt.Sprintf(" (the records kept are of epochs %d to %d)", lo, hi)
	}
	switch {
	case err == nil && lo > 0 && lo < epoch && epoch < hi:
		return &notFound{fmt.Sprintf("the audit record of epoch %d is missing, though older and newer ones are kept%s: deleted around regionctl (by hand? the operator role can write %s), which deletes only the oldest records, beyond the newest %d",
			epoch, kept, s.ks.AuditPrefix(), s.opts.AuditKeep)}
	case curErr == nil && epoch <= cur-s.opts.AuditKeep:
		return &notFound{fmt.Sprintf("the audit record of epoch %d is no longer kept: only the newest %d are%s", epoch, s.opts.AuditKeep, kept)}
	case curErr == nil:
		return &notFound{fmt.Sprintf("the audit record of epoch %d is missing, though regionctl keeps the newest %d and the current epoch is %d%s: deleted around regionctl (by hand? the operator role can write %s)",
			epoch, s.opts.AuditKeep, cur, kept, s.ks.AuditPrefix())}
	}
	return &notFound{fmt.Sprintf("no audit record of epoch %d%s", epoch, kept)}
}

// auditBounds returns the epochs of the oldest and newest audit records
// kept (0, 0: none), from etcd's index (keys only).
func (s *Store) auditBounds(ctx context.Context) (oldest, newest int64, err error) {
	prefix := s.ks.AuditPrefix()
	first, err := s.getAudit(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil || len(first.Kvs) == 0 {
		return 0, 0, err
	}
	last, err := s.getAudit(ctx, prefix, append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly()}, clientv3.WithLastKey()...)...)
	if err != nil || len(last.Kvs) == 0 {
		return 0, 0, err
	}
	oldest, err1 := s.ks.ParseAudit(string(first.Kvs[0].Key))
	newest, err2 := s.ks.ParseAudit(string(last.Kvs[0].Key))
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("audit keys under %s: %w", prefix, err)
	}
	return oldest, newest, nil
}

// EpochRange is a run of epochs, From to To (inclusive).
type EpochRange struct {
	From, To int64
}

// String is the run as a message names it: "5", or "5 to 7".
func (r EpochRange) String() string {
	if r.From == r.To {
		return strconv.FormatInt(r.From, 10)
	}
	return fmt.Sprintf("%d to %d", r.From, r.To)
}

// AuditGaps returns the runs of epochs from oldest to newest (inclusive)
// with no audit record kept, oldest first: regionctl deletes only the
// oldest records, so these were deleted around it (by hand). It reads
// keys only.
func (s *Store) AuditGaps(ctx context.Context, oldest, newest int64) ([]EpochRange, error) {
	if newest-oldest < 1 {
		return nil, nil
	}
	resp, err := s.getAudit(ctx, s.ks.Audit(oldest), clientv3.WithRange(s.ks.Audit(newest+1)), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var gaps []EpochRange
	next := oldest // the epoch whose record comes next, if none is missing
	for _, kv := range resp.Kvs {
		n, err := s.ks.ParseAudit(string(kv.Key))
		if err != nil {
			continue
		}
		if n > next {
			gaps = append(gaps, EpochRange{next, n - 1})
		}
		next = max(next, n+1)
	}
	if next <= newest {
		gaps = append(gaps, EpochRange{next, newest})
	}
	return gaps, nil
}

func (s *Store) decodeAudit(key string, value []byte, rev, version int64) (AuditEntry, error) {
	e := AuditEntry{Revision: rev, Rewritten: version > 1}
	if err := json.Unmarshal(value, &e.Audit); err != nil {
		return e, fmt.Errorf("decode audit record %s: %w", key, err)
	}
	if n, err := s.ks.ParseAudit(key); err == nil {
		// The epoch is the key's: a record naming another was not
		// written by that epoch's commit.
		if e.Epoch != 0 && e.Epoch != n {
			e.Rewritten = true
		}
		e.Epoch = n
	}
	return e, nil
}

// ConfigAt returns the config as it was right after epoch was committed:
// read at the revision of that epoch's Txn (also for the current epoch:
// a hand edit made since, with no epoch of its own, is not part of it)
// or, when that revision was compacted, rebuilt by undoing the audit
// records of the later epochs, and by restoring each key written by hand
// since that no later record undoes as the newest record at or before
// epoch wrote it (the records cannot undo the hand edits they do not
// record). notes, for a rebuilt config, say so, and name the keys whose
// value at epoch the records contradict, restore over a hand edit, or
// cannot know.
func (s *Store) ConfigAt(ctx context.Context, epoch int64, cur *State) (cfg *routing.Config, notes []string, err error) {
	if epoch > cur.Epoch || epoch < 1 {
		return nil, nil, &notFound{fmt.Sprintf("no epoch %d: the current epoch is %d", epoch, cur.Epoch)}
	}
	rec, err := s.AuditRecord(ctx, epoch)
	if err != nil {
		return nil, nil, err
	}
	if rec.Rewritten {
		return nil, nil, fmt.Errorf("the audit record of epoch %d was put again after its commit (at revision %d): its revision no longer names the commit, so epoch %d's config cannot be found from it; roll back to another epoch (regionctl history)",
			epoch, rec.Revision, epoch)
	}
	old, err := s.LoadAt(ctx, rec.Revision)
	if err == nil {
		return old.Config, nil, nil
	}
	if !errors.Is(err, ErrCompacted) {
		return nil, nil, err
	}
	s.log.Info("revision compacted, rebuilding config from the audit trail", "epoch", epoch, "revision", rec.Revision)
	cfg, notes, err = s.undoTo(ctx, epoch, rec.Revision, cur)
	if err != nil {
		return nil, nil, fmt.Errorf("epoch %d's revision %d is compacted, so its config was rebuilt from the audit trail (the current config with each later record's change undone): %w", epoch, rec.Revision, err)
	}
	notes = append([]string{fmt.Sprintf("epoch %d's revision %d is compacted: its config was rebuilt from the audit trail (the current config with each later record's change undone), which knows no hand edit", epoch, rec.Revision)}, notes...)
	return cfg, notes, nil
}

// maxCheckEpochs bounds how many records at and before the epoch a
// rebuild reads to check the values it restores.
const maxCheckEpochs = 100

// handEdit is a config key written around regionctl after the epoch a
// rebuild restores (its mod revision past that epoch's commit) that no
// later record undoes.
type handEdit struct {
	rev   int64 // the key's mod revision
	after int64 // the newest epoch committed before it
}

// undoTo rebuilds the config of epoch, committed at revision epochRev, by
// applying, newest first, the "before" value of every config change of
// the epochs after it, then restoring each key written by hand since that
// no later record undoes as the newest record at or before epoch wrote
// it. notes name the keys the records show written by hand meanwhile.
func (s *Store) undoTo(ctx context.Context, epoch, epochRev int64, cur *State) (*routing.Config, []string, error) {
	vals, err := cur.Config.Values()
	if err != nil {
		return nil, nil, fmt.Errorf("encode current config: %w", err)
	}
	for rel, raw := range cur.invalid {
		vals[rel] = raw
	}
	from := map[string]int64{}               // the record whose "before" a value is
	restored := map[string]json.RawMessage{} // each undone key's value before its first later record
	first := map[string]int64{}              // and that record
	revs := map[int64]int64{epoch: epochRev} // the commit revision of each epoch from epoch on
	for e := cur.Epoch; e > epoch; e-- {
		rec, err := s.AuditRecord(ctx, e)
		if err != nil {
			return nil, nil, fmt.Errorf("rebuild config of epoch %d: %w", epoch, err)
		}
		if rec.Rewritten {
			return nil, nil, fmt.Errorf("rebuild config of epoch %d: the audit record of epoch %d was put again after its commit (at revision %d): its changes are not its commit's, so the config cannot be rebuilt through it",
				epoch, e, rec.Revision)
		}
		revs[e] = rec.Revision
		for _, c := range rec.Changes {
			if !routing.IsConfigKey(c.Key) {
				continue
			}
			restored[c.Key], first[c.Key] = c.Before, e
			if len(c.Before) == 0 || string(c.Before) == "null" {
				delete(vals, c.Key)
			} else {
				vals[c.Key] = c.Before
				from[c.Key] = e
			}
		}
	}
	// A key put after epoch's commit that no later record undoes was put
	// around regionctl (regionctl's commits record each key they write):
	// its value at epoch is the newest record at or before epoch's.
	hand := map[string]handEdit{}
	for _, kv := range cur.KVs {
		if _, undone := restored[kv.Key]; undone || kv.ModRevision <= epochRev || !routing.IsConfigKey(kv.Key) {
			continue
		}
		h := handEdit{rev: kv.ModRevision, after: epoch}
		for e := epoch + 1; e <= cur.Epoch && revs[e] < kv.ModRevision; e++ {
			h.after = e
		}
		hand[kv.Key] = h
	}
	wrote, oldest, stopped := s.newestWrites(ctx, epoch, restored, hand)
	var notes []string
	if stopped != "" {
		notes = append(notes, stopped)
	}
	back := map[string]int64{} // the hand-edited keys restored, and the record they were restored from
	for k, h := range hand {
		w, ok := wrote[k]
		if !ok {
			notes = append(notes, fmt.Sprintf("%s: written around regionctl after epoch %d's commit and kept as it is now: its value at epoch %d is not known (no record of epochs %d back to %d writes it); check it (regionctl history --touching %s)",
				k, h.after, epoch, epoch, oldest, k))
			continue
		}
		back[k] = w.epoch
		if len(w.after) == 0 || string(w.after) == "null" {
			delete(vals, k)
		} else {
			vals[k] = w.after
		}
		notes = append(notes, fmt.Sprintf("%s: written around regionctl after epoch %d's commit (at revision %d), and no later record undoes it: restored as epoch %d wrote it (%s), its newest record up to epoch %d; a hand edit before epoch %d's commit would not be known",
			k, h.after, h.rev, w.epoch, shortValue(w.after), epoch, epoch))
	}
	cfg, err := configFromValues(vals, func(rel string) string {
		if e, ok := from[rel]; ok {
			return fmt.Sprintf("its value before epoch %d, as that record holds it: written around regionctl (by hand) after epoch %d, "+
				"so no record holds the value it had at epoch %d and rollback cannot restore it; apply the config wanted with %s set (regionctl export, edit, apply)", e, epoch, epoch, rel)
		}
		if e, ok := back[rel]; ok {
			return fmt.Sprintf("its value as epoch %d's record holds it, restored over a hand edit since: apply the config wanted with %s set (regionctl export, edit, apply)", e, rel)
		}
		if h, ok := hand[rel]; ok {
			return fmt.Sprintf("its current value, written by hand after epoch %d's commit, and no record holds the value it had at epoch %d: apply the config wanted with %s set (regionctl history --touching %s shows the values regionctl wrote)",
				h.after, epoch, rel, rel)
		}
		return "its current value, unchanged since the epoch asked for: fix it first (regionctl validate)"
	})
	if err != nil {
		return nil, nil, err
	}
	for k, before := range restored {
		if w, ok := wrote[k]; ok && !sameValue(before, w.after) {
			notes = append(notes, fmt.Sprintf("%s: restored as epoch %d's record found it (%s), not as epoch %d wrote it (%s): written by hand between those epochs, "+
				"before or after epoch %d's commit, so its value at epoch %d is not known; check it (regionctl history --touching %s)",
				k, first[k], shortValue(before), w.epoch, shortValue(w.after), epoch, epoch, k))
		}
	}
	sort.Strings(notes)
	return cfg, notes, nil
}

// write is a key's change in the newest record at or before an epoch
// that writes it.
type write struct {
	epoch int64
	after json.RawMessage
}

// newestWrites finds, for each undone key (restored) and each key written
// by hand since (hand), the newest record at or before epoch that writes
// it: the value the key had at epoch unless a hand edit came between. A
// key restored as absent was created after epoch (its first later record
// found none): no record at or before epoch wrote it, so it is not looked
// for (each would read every record of the bound). It reads at most
// maxCheckEpochs records back from epoch, fewer once each key is found,
// and returns the oldest epoch it read and, when a read failed, a note.
func (s *Store) newestWrites(ctx context.Context, epoch int64, restored map[string]json.RawMessage, hand map[string]handEdit) (wrote map[string]write, oldest int64, stopped string) {
	wrote = map[string]write{}
	want := map[string]bool{}
	for k, v := range restored {
		if !sameValue(v, nil) {
			want[k] = true
		}
	}
	for k := range hand {
		want[k] = true
	}
	oldest = epoch
	for e := epoch; e >= 1 && e > epoch-maxCheckEpochs && len(want) > 0; e-- {
		rec, err := s.AuditRecord(ctx, e)
		if errors.Is(err, ErrNotFound) {
			break // not kept (older than the newest AuditKeep, or deleted by hand): older values are not known
		}
		if err != nil {
			return wrote, oldest, fmt.Sprintf("the check of the restored values against the records stopped at epoch %d: %v", e, err)
		}
		oldest = e
		if rec.Rewritten {
			continue
		}
		for _, c := range rec.Changes {
			if want[c.Key] {
				delete(want, c.Key)
				wrote[c.Key] = write{epoch: e, after: c.After}
			}
		}
	}
	return wrote, oldest, ""
}

// sameValue reports whether two audit values are the same value: JSON
// alike but for white space, absent and null alike.
func sameValue(a, b json.RawMessage) bool {
	norm := func(v json.RawMessage) string {
		var buf bytes.Buffer
		if len(v) == 0 || json.Compact(&buf, v) != nil {
			return string(v)
		}
		return buf.String()
	}
	x, y := norm(a), norm(b)
	return x == y || (x == "" || x == "null") && (y == "" || y == "null")
}

// shortValue is an audit value as a note shows it: absent, or its first
// 60 bytes.
func shortValue(v json.RawMessage) string {
	if len(v) == 0 || string(v) == "null" {
		return "absent"
	}
	if len(v) > 60 {
		return string(v[:60]) + "…"
	}
	return string(v)
}

// configFromValues decodes config values keyed by relative key; origin,
// when set, says where a value that does not decode came from.
func configFromValues(vals map[string][]byte, origin func(rel string) string) (*routing.Config, error) {
	cfg := &routing.Config{Pools: map[string]routing.Pool{}, Routes: map[string]routing.Route{}}
	var errs routing.Errors
	for rel, raw := range vals {
		k, _ := routing.ParseKey(rel)
		v, err := routing.DecodeValue(rel, raw)
		if err != nil {
			msg := err.Error()
			if origin != nil {
				msg += " (" + origin(rel) + ")"
			}
			errs = append(errs, &routing.FieldError{Msg: msg})
			continue
		}
		switch x := v.(type) {
		case *routing.Pool:
			cfg.Pools[k.ID] = *x
		case *routing.Route:
			cfg.Routes[k.ID] = *x
		case *routing.Residency:
			cfg.Policy.Residency = x
		}
	}
	if len(errs) > 0 {
		errs.Sort()
		return nil, fmt.Errorf("rebuilt config does not decode: %w", errs)
	}
	return cfg, nil
}

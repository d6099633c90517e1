package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// ErrCompacted is returned by LoadAt when the revision was compacted away.
var ErrCompacted = errors.New("store: revision compacted")

// State is the whole routing state at one revision.
type State struct {
	// Revision is the etcd revision the state was read at.
	Revision int64
	// Epoch is the config epoch.
	Epoch int64
	// EpochModRevision is the mod revision of the epoch key (0 when the
	// key does not exist yet), the Txn guard.
	EpochModRevision int64
	// Config holds the pools, routes and policy whose values decode.
	Config *routing.Config
	// Overrides are the live boosts by id.
	Overrides map[string]LiveOverride
	// Health holds the live health markers by relative key.
	Health map[string]routing.Health
	// Skipped lists the keys whose values were refused (or that are not in
	// the key grammar); the agent keeps their last good value.
	Skipped []routing.Skipped
	// KVs holds every key of the routing prefix, relative, for
	// routing.Compile.
	KVs []routing.KV

	// BadOverrides are the boost keys whose values do not decode (a hand
	// edit), by id: the agent skips them; a boost of the same id is
	// refused until they are cancelled (boost cancel deletes them).
	BadOverrides map[string]LiveOverrideRaw

	epochErr   error
	epochValue string            // the epoch key's value when it holds no epoch
	invalid    map[string][]byte // config keys whose values do not decode
	stored     map[string][]byte // config keys whose values decode: the bytes etcd holds
}

// WrittenAround returns the config and boost keys (relative) put after
// the epoch key's last commit: regionctl's writes put them in the commit's
// own Txn, so these were written by another client (etcdctl, a script
// with the operator role), without an audit record. Sorted; nil when the
// epoch key does not exist.
func (st *State) WrittenAround() []string {
	if st.EpochModRevision == 0 {
		return nil
	}
	var keys []string
	for _, kv := range st.KVs {
		if kv.ModRevision <= st.EpochModRevision {
			continue
		}
		if k, err := routing.ParseKey(kv.Key); err == nil && (routing.IsConfigKey(kv.Key) || k.Kind == routing.KindOverride) {
			keys = append(keys, kv.Key)
		}
	}
	sort.Strings(keys)
	return keys
}

// NewestChange is the newest mod revision of the routing prefix's keys as
// read (the epoch key's included): what an agent must have applied to
// serve this state. A key deleted since its last put leaves no trace here
// (the write verbs' deletes move the epoch key in the same Txn, so theirs
// are covered).
func (st *State) NewestChange() int64 {
	newest := st.EpochModRevision
	for _, kv := range st.KVs {
		newest = max(newest, kv.ModRevision)
	}
	return newest
}

// LiveOverrideRaw is a boost key whose stored value does not decode.
type LiveOverrideRaw struct {
	// Value is the stored value, as etcd holds it.
	Value []byte
	// Lease is the key's lease (0: none); boost cancel leaves it alone.
	Lease int64
	// ModRevision is the key's mod revision, the guard of its delete.
	ModRevision int64
	// Err says why the value does not decode.
	Err error
}

// LiveOverride is a boost as stored, with its lease.
type LiveOverride struct {
	// Override is the boost's decoded value.
	Override routing.Override `json:"override"`
	// Lease is the key's lease (0: none).
	Lease int64 `json:"lease"`
	// LeaseID is Lease in hex, as etcdctl's lease commands take it (as a
	// JSON number a lease id is past 2^53, which jq and JavaScript round).
	LeaseID string `json:"lease_id,omitempty"`
	// ModRevision is the key's mod revision: of several boosts of one
	// route the newest wins, and a replace or cancel is guarded by it.
	ModRevision int64 `json:"mod_revision"`
}

// Load reads the whole routing prefix at the current revision.
func (s *Store) Load(ctx context.Context) (*State, error) {
	return s.LoadAt(ctx, 0)
}

// LoadAt reads the whole routing prefix at revision rev (0: current). It
// returns ErrCompacted when rev is older than the compacted revision.
func (s *Store) LoadAt(ctx context.Context, rev int64) (*State, error) {
	prefix := s.ks.Routing()
	kvs, rev, err := s.getRange(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), rev)
	if err != nil {
		return nil, err
	}
	st := &State{
		Revision:     rev,
		Config:       &routing.Config{Pools: map[string]routing.Pool{}, Routes: map[string]routing.Route{}},
		Overrides:    map[string]LiveOverride{},
		Health:       map[string]routing.Health{},
		invalid:      map[string][]byte{},
		stored:       map[string][]byte{},
		BadOverrides: map[string]LiveOverrideRaw{},
	}
	for _, kv := range kvs {
		rel, _ := s.ks.Rel(string(kv.Key))
		st.add(rel, kv)
	}
	if st.epochErr != nil { // a write refuses it with the fix: the audit trail's newest epoch
		e := s.epochReset(ctx, st, false, "")
		e.Malformed = []byte(st.epochValue)
		st.epochErr = e
	}
	return st, nil
}

// getRange reads [key, end) at rev (0: current) in pages and returns the
// keys and the revision read at.
func (s *Store) getRange(ctx context.Context, key, end string, rev int64, extra ...clientv3.OpOption) ([]*mvccpb.KeyValue, int64, error) {
	kvs, rev, _, err := s.getRangeCluster(ctx, key, end, rev, extra...)
	return kvs, rev, err
}

// getRangeCluster is getRange, also returning the ID of the etcd cluster
// that answered its first page (0 when the answer does not say).
func (s *Store) getRangeCluster(ctx context.Context, key, end string, rev int64, extra ...clientv3.OpOption) ([]*mvccpb.KeyValue, int64, uint64, error) {
	var out []*mvccpb.KeyValue
	var cluster uint64
	start := key
	for {
		opts := append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(s.opts.PageSize)}, extra...)
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.cli.Get(rctx, key, opts...)
		cancel()
		if errors.Is(err, rpctypes.ErrCompacted) {
			return nil, 0, 0, fmt.Errorf("read %s at revision %d: %w", key, rev, ErrCompacted)
		}
		if err != nil {
			return nil, 0, 0, s.permErr("read "+start, err, s.roles.ReadNeed(start))
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if cluster == 0 {
			cluster = resp.Header.GetClusterId()
		}
		out = append(out, resp.Kvs...)
		if !resp.More || len(resp.Kvs) == 0 {
			return out, rev, cluster, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// add decodes one key of the routing prefix into the state.
func (st *State) add(rel string, kv *mvccpb.KeyValue) {
	st.KVs = append(st.KVs, routing.KV{Key: rel, Value: kv.Value, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision, Version: kv.Version})
	k, err := routing.ParseKey(rel)
	if err != nil {
		// A key too long to print is named as the agents name it.
		if name := routing.ShortKey([]byte(rel)); name != rel {
			_, err = routing.ParseKey(name)
			rel = name
		}
		st.skip(rel, err)
		return
	}
	if k.Kind == routing.KindEpoch {
		st.EpochModRevision = kv.ModRevision
		n, ok := routing.ParseEpoch(kv.Value)
		if !ok {
			st.epochErr = fmt.Errorf("the epoch key holds %q, not an integer from 0 to %d; repair it with etcdctl before writing", kv.Value, int64(routing.MaxEpoch))
			st.epochValue = string(kv.Value)
			st.skip(rel, st.epochErr)
			return // Epoch stays 0
		}
		st.Epoch = n
		return
	}
	v, err := routing.DecodeValue(rel, kv.Value)
	if err != nil {
		st.skip(rel, err)
		if routing.IsConfigKey(rel) {
			st.invalid[rel] = kv.Value
		}
		if k.Kind == routing.KindOverride {
			st.BadOverrides[k.ID] = LiveOverrideRaw{Value: kv.Value, Lease: kv.Lease, ModRevision: kv.ModRevision, Err: err}
		}
		return
	}
	if routing.IsConfigKey(rel) {
		st.stored[rel] = kv.Value
	}
	switch x := v.(type) {
	case *routing.Pool:
		st.Config.Pools[k.ID] = *x
	case *routing.Route:
		st.Config.Routes[k.ID] = *x
	case *routing.Residency:
		st.Config.Policy.Residency = x
	case *routing.Override:
		lo := LiveOverride{Override: *x, Lease: kv.Lease, ModRevision: kv.ModRevision}
		if kv.Lease != 0 {
			lo.LeaseID = strconv.FormatInt(kv.Lease, 16)
		}
		st.Overrides[k.ID] = lo
	case *routing.Health:
		st.Health[rel] = *x
	}
}

func (st *State) skip(rel string, err error) {
	st.Skipped = append(st.Skipped, routing.Skipped{Key: rel, Error: err.Error()})
}

// OverrideMap returns the live overrides keyed by id, for
// routing.CompileConfig.
func (st *State) OverrideMap() map[string]routing.StoredOverride {
	out := make(map[string]routing.StoredOverride, len(st.Overrides))
	for id, o := range st.Overrides {
		out[id] = routing.StoredOverride{Override: o.Override, ModRevision: o.ModRevision}
	}
	return out
}

// OverrideIDs returns the ids of the live overrides in order.
func (st *State) OverrideIDs() []string {
	ids := make([]string, 0, len(st.Overrides))
	for id := range st.Overrides {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// InvalidConfigKeys returns the config keys whose stored values do not
// decode, in order.
func (st *State) InvalidConfigKeys() []string {
	keys := make([]string, 0, len(st.invalid))
	for k := range st.invalid {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// InvalidConfig returns the stored value of the config key rel (relative
// to <root>/routing/) when it does not decode, a hand edit the agents skip
// (serving its last good value), and why; ok is false when rel holds a
// value that decodes, or nothing.
func (st *State) InvalidConfig(rel string) (raw []byte, why error, ok bool) {
	raw, ok = st.invalid[rel]
	if !ok {
		return nil, nil, false
	}
	_, why = routing.DecodeValue(rel, raw)
	return raw, why, true
}

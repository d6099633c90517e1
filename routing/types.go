package routing

import (
	"bytes"
	"encoding/json"
	"sort"
	"time"
)

// Pool status values.
const (
	StatusActive   = "active"
	StatusDraining = "draining"
	StatusDown     = "down"
)

// Route affinity values.
const (
	AffinitySticky = "sticky"
	AffinityRandom = "random"
)

// DefaultRoute is the route every chain ends with.
const DefaultRoute = "_default"

// Extra holds the fields of a stored value that this version does not know.
// They are kept when the value is re-encoded (forward compatibility) and
// ignored otherwise.
type Extra map[string]json.RawMessage

// Pool is an edge pool, origin or catalog shard that viewers can be sent to.
// Stored at <root>/routing/pools/<id>.
type Pool struct {
	// Host is where viewers of the pool are sent: a name or an IP, with an
	// optional port ("edge-fra-1.example.net:443"). Never empty.
	Host string `json:"host"`
	// Region is a label for operators ("eu-central"); routing does not
	// read it. Empty when not set.
	Region string `json:"region,omitempty"`
	// Residency is the pool's residency class ("eu"): the pool serves
	// viewers of that class and of countries in no class.
	Residency string `json:"residency"`
	// Status is StatusActive, StatusDraining or StatusDown; only an active
	// pool is a candidate. Empty decodes as active.
	Status string `json:"status"`
	// HealthCheck makes the pool eligible only while it has a live health
	// key (or within the grace window after its last one went).
	HealthCheck bool `json:"health_check,omitempty"`
	// Attrs are free-form strings given to the front door with each
	// decision for the pool, overlaid by the route chain's attrs.
	Attrs map[string]string `json:"attrs,omitempty"`
	// Extra holds the stored value's fields this version does not know.
	Extra Extra `json:"-"`
}

// Target is one weighted pool of a route.
type Target struct {
	// Pool is the id of the pool the target sends viewers to.
	Pool string `json:"pool"`
	// Weight is the target's share of its route's viewers, 0..100 (the
	// weights of a route sum to 100); a target of weight 0 is never picked.
	Weight int `json:"weight"`
	// Extra holds the stored target's fields this version does not know.
	Extra Extra `json:"-"`
}

// Route maps a country, a named group or _default to weighted pools.
// Stored at <root>/routing/routes/<name>.
type Route struct {
	// Targets are the weighted pools the route sends viewers to; empty for
	// a route that only falls back.
	Targets []Target `json:"targets,omitempty"`
	// Fallback names the routes tried next, in order, when no target of
	// this one has an eligible pool.
	Fallback []string `json:"fallback,omitempty"`
	// Affinity is AffinitySticky (the same key gets the same pool) or
	// AffinityRandom; empty decodes as sticky.
	Affinity string `json:"affinity,omitempty"`
	// Attrs are merged into the attrs of the decisions whose chain passes
	// the route up to the winner; the country's own route wins a key.
	Attrs map[string]string `json:"attrs,omitempty"`
	// Extra holds the stored value's fields this version does not know.
	Extra Extra `json:"-"`
}

// Residency is the data-residency policy: which countries belong to which
// class, and the class of viewers whose country is unknown.
// Stored at <root>/routing/policy/residency.
type Residency struct {
	// Classes maps each class name ("eu") to its countries, upper-case ISO
	// codes, each in one class at most. Nil decodes as the built-in eu
	// class (DefaultResidency).
	Classes map[string][]string `json:"classes"`
	// UnknownCountryClass is the class of viewers whose country is
	// unknown; empty decodes as "eu" (fail closed).
	UnknownCountryClass string `json:"unknown_country_class"`
	// Extra holds the stored value's fields this version does not know.
	Extra Extra `json:"-"`
}

// Override is a temporary boost: it replaces the targets and/or merges the
// attrs of one route until its lease ends or its ExpiresAt passes,
// whichever comes first.
// Stored at <root>/routing/overrides/<id>.
type Override struct {
	// Route names the route the boost applies to; a boost of a route that
	// does not exist is not applied.
	Route string `json:"route"`
	// Targets, when not empty, replace the route's targets.
	Targets []Target `json:"targets,omitempty"`
	// Attrs are merged over the route's attrs (of several live boosts of
	// one route, the newest wins a key).
	Attrs map[string]string `json:"attrs,omitempty"`
	// Reason is the operator's note on why (boost --reason); shown by
	// boost ls, not read by routing.
	Reason string `json:"reason,omitempty"`
	// Author is the user regionctl wrote the boost as (its --user, the
	// client certificate's common name, or the OS user).
	Author string `json:"author,omitempty"`
	// ExpiresAt (RFC 3339) is when the boost ends by the agents' clocks:
	// regionctl writes the lease's grant plus its TTL. A table stops
	// applying the override then, although etcd may keep the lease alive
	// longer (a leader election renews every lease to its full TTL).
	// Empty: the lease alone ends it.
	ExpiresAt string `json:"expires_at,omitempty"`
	// Extra holds the stored value's fields this version does not know.
	Extra Extra `json:"-"`
}

// Expiry returns ExpiresAt as a time; zero when it is empty or does not
// parse (a decoded override's does: see normalize).
func (o *Override) Expiry() time.Time {
	if o.ExpiresAt == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, o.ExpiresAt)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Expired reports whether the override has ended by the clock at now.
func (o *Override) Expired(now time.Time) bool {
	end := o.Expiry()
	return !end.IsZero() && !now.Before(end)
}

// Health is a live-instance marker of a pool, bound to a lease.
// Stored at <root>/routing/health/<pool>/<instance>.
type Health struct {
	// Addr is the instance's address as its heartbeat was given it
	// (--addr). Informational: the key alone makes a live instance.
	Addr string `json:"addr"`
	// Since (RFC 3339 UTC, seconds) is when the heartbeat put the key
	// after it was absent: its start, or its return after a lost lease
	// (docs/keys-and-values.md); informational, empty when not written.
	Since string `json:"since,omitempty"`
	// Extra holds the stored value's fields this version does not know.
	Extra Extra `json:"-"`
}

// Change is one key of an audit record.
type Change struct {
	// Key is the key written, relative to <root>/routing/ ("pools/eu-central").
	Key string `json:"key"`
	// Op is "put" or "delete".
	Op string `json:"op"`
	// Before is the key's value before the write: JSON null when absent,
	// a JSON string when the stored value was not JSON.
	Before json.RawMessage `json:"before"`
	// After is the key's value after the write; JSON null for a delete.
	After json.RawMessage `json:"after"`
}

// Audit is the record regionctl writes at <root>/audit/<epoch> in the same
// transaction as the change it describes.
type Audit struct {
	// Epoch is the epoch the write set (the previous one plus 1); the
	// record's key holds it too.
	Epoch int64 `json:"epoch"`
	// At (RFC 3339 UTC, seconds) is when regionctl built the write.
	At string `json:"at"`
	// User is regionctl's --user, else its client certificate's common
	// name, else the OS user.
	User string `json:"user"`
	// Host is the host name of the machine regionctl ran on.
	Host string `json:"host"`
	// Reason is the operator's --reason for the write.
	Reason string `json:"reason"`
	// Command is the verb and its arguments as typed, without the
	// connection flags, quoted so it can be run again.
	Command string `json:"command"`
	// Changes are the keys the write put or deleted.
	Changes []Change `json:"changes"`
}

// AgentStatus is what an agent publishes at <root>/agents/<node>.
type AgentStatus struct {
	// Node is the agent's --node, the last element of its key.
	Node string `json:"node"`
	// Revision is the etcd revision the agent's table is known to be
	// current at.
	Revision int64 `json:"revision"`
	// Epoch is the routing epoch of the agent's table.
	Epoch int64 `json:"epoch"`
	// SyncedAt (RFC 3339 UTC, seconds) is when the table was last
	// confirmed current against etcd; empty when never.
	SyncedAt string `json:"synced_at"`
	// Connected reports whether a watch of etcd was following the prefix
	// when the status was put.
	Connected bool `json:"connected"`
	// Version is the agent binary's version.
	Version string `json:"version"`
	// ChangeRevision is the revision of the newest routing event (a put
	// or a delete) the agent applied from its watch since it started;
	// absent before the first. regionctl status takes the newest of them
	// as a routing change when it is newer than every key: a delete
	// leaves no key.
	ChangeRevision int64 `json:"change_revision,omitempty"`
	// Skipped counts the keys whose current value the agent refused (it
	// serves their last good value, or nothing). An agent with skipped
	// keys not served alike is not converged: it may serve what no other
	// agent does.
	Skipped int `json:"skipped,omitempty"`
	// SkippedKeys names the first MaxStatusSkippedKeys of them: those it
	// may serve otherwise than another agent first, then those it serves
	// alike (ServedAlike), each sorted.
	SkippedKeys []string `json:"skipped_keys,omitempty"`
	// SkippedAlike counts the skipped keys every agent serves alike.
	SkippedAlike int `json:"skipped_alike,omitempty"`
	// SnapshotError says why the agent's snapshot file (or its index)
	// does not hold the table it serves: its last write failed (a full
	// or read-only directory), so the front doors that read the file
	// route by an older table. Empty while the files are written.
	SnapshotError string `json:"snapshot_error,omitempty"`
	// ClusterID is the ID (hex) of the etcd cluster the agent's table was
	// listed from; absent before a list, and from older agents. An agent
	// whose cluster is not the one regionctl reads serves another
	// cluster's history: etcd restored from a backup (a new cluster)
	// under an agent that has not relisted, or a status key of the
	// backup's own.
	ClusterID string `json:"cluster_id,omitempty"`
}

// MaxStatusSkippedKeys bounds AgentStatus.SkippedKeys.
const MaxStatusSkippedKeys = 10

// ServedAlike reports whether every agent serves the refused key rel
// (relative to <root>/routing/) alike, whatever it has seen before: a
// health key counts as a live instance whatever its value, and a key
// outside the grammar counts nowhere. Any other refused key (a pool,
// route, the residency policy, a boost, the epoch) is served from its
// last good value, which an agent started after the refused write does
// not have.
func ServedAlike(rel string) bool {
	k, err := ParseKey(rel)
	return err != nil || k.Kind == KindHealth
}

// DefaultResidency returns the built-in policy: class "eu" is the EEA
// and the EU territories with codes of their own (EEA()), and viewers of
// unknown country are treated as "eu" (fail closed).
func DefaultResidency() Residency {
	return Residency{Classes: map[string][]string{"eu": EEA()}, UnknownCountryClass: "eu"}
}

// UnmarshalJSON decodes a pool, keeping unknown fields in Extra.
func (p *Pool) UnmarshalJSON(b []byte) error {
	*p = Pool{}
	return unmarshal(b, p).Err()
}

// MarshalJSON encodes a pool with its unknown fields.
func (p Pool) MarshalJSON() ([]byte, error) {
	type plain Pool
	return encodeWithExtra(plain(p), p.Extra)
}

// UnmarshalJSON decodes a route, keeping unknown fields in Extra.
func (r *Route) UnmarshalJSON(b []byte) error {
	*r = Route{}
	return unmarshal(b, r).Err()
}

// MarshalJSON encodes a route with its unknown fields.
func (r Route) MarshalJSON() ([]byte, error) {
	type plain Route
	return encodeWithExtra(plain(r), r.Extra)
}

// UnmarshalJSON decodes a target, keeping unknown fields in Extra.
func (t *Target) UnmarshalJSON(b []byte) error {
	*t = Target{}
	return unmarshal(b, t).Err()
}

// MarshalJSON encodes a target with its unknown fields.
func (t Target) MarshalJSON() ([]byte, error) {
	type plain Target
	return encodeWithExtra(plain(t), t.Extra)
}

// UnmarshalJSON decodes a residency policy, keeping unknown fields in Extra.
func (p *Residency) UnmarshalJSON(b []byte) error {
	*p = Residency{}
	return unmarshal(b, p).Err()
}

// MarshalJSON encodes a residency policy with its unknown fields.
func (p Residency) MarshalJSON() ([]byte, error) {
	type plain Residency
	return encodeWithExtra(plain(p), p.Extra)
}

// UnmarshalJSON decodes an override, keeping unknown fields in Extra.
func (o *Override) UnmarshalJSON(b []byte) error {
	*o = Override{}
	return unmarshal(b, o).Err()
}

// MarshalJSON encodes an override with its unknown fields.
func (o Override) MarshalJSON() ([]byte, error) {
	type plain Override
	return encodeWithExtra(plain(o), o.Extra)
}

// UnmarshalJSON decodes a health marker, keeping unknown fields in Extra.
func (h *Health) UnmarshalJSON(b []byte) error {
	*h = Health{}
	return unmarshal(b, h).Err()
}

// MarshalJSON encodes a health marker with its unknown fields.
func (h Health) MarshalJSON() ([]byte, error) {
	type plain Health
	return encodeWithExtra(plain(h), h.Extra)
}

// encodeWithExtra encodes v and appends the extra fields in sorted order.
func encodeWithExtra(v any, extra Extra) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.Write(b[:len(b)-1])
	for _, k := range keys {
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		var c bytes.Buffer
		if err := json.Compact(&c, extra[k]); err != nil {
			return nil, err
		}
		buf.Write(c.Bytes())
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

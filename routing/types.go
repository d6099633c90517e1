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
	Host        string            `json:"host"`
	Region      string            `json:"region,omitempty"`
	Residency   string            `json:"residency"`
	Status      string            `json:"status"`
	HealthCheck bool              `json:"health_check,omitempty"`
	Attrs       map[string]string `json:"attrs,omitempty"`
	Extra       Extra             `json:"-"`
}

// Target is one weighted pool of a route.
type Target struct {
	Pool   string `json:"pool"`
	Weight int    `json:"weight"`
	Extra  Extra  `json:"-"`
}

// Route maps a country, a named group or _default to weighted pools.
// Stored at <root>/routing/routes/<name>.
type Route struct {
	Targets  []Target          `json:"targets,omitempty"`
	Fallback []string          `json:"fallback,omitempty"`
	Affinity string            `json:"affinity,omitempty"`
	Attrs    map[string]string `json:"attrs,omitempty"`
	Extra    Extra             `json:"-"`
}

// Residency is the data-residency policy: which countries belong to which
// class, and the class of viewers whose country is unknown.
// Stored at <root>/routing/policy/residency.
type Residency struct {
	Classes             map[string][]string `json:"classes"`
	UnknownCountryClass string              `json:"unknown_country_class"`
	Extra               Extra               `json:"-"`
}

// Override is a temporary boost: it replaces the targets and/or merges the
// attrs of one route until its lease ends or its ExpiresAt passes,
// whichever comes first.
// Stored at <root>/routing/overrides/<id>.
type Override struct {
	Route   string            `json:"route"`
	Targets []Target          `json:"targets,omitempty"`
	Attrs   map[string]string `json:"attrs,omitempty"`
	Reason  string            `json:"reason,omitempty"`
	Author  string            `json:"author,omitempty"`
	// ExpiresAt (RFC 3339) is when the boost ends by the agents' clocks:
	// regionctl writes the lease's grant plus its TTL. A table stops
	// applying the override then, although etcd may keep the lease alive
	// longer (a leader election renews every lease to its full TTL).
	// Empty: the lease alone ends it.
	ExpiresAt string `json:"expires_at,omitempty"`
	Extra     Extra  `json:"-"`
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
	Addr  string `json:"addr"`
	Since string `json:"since,omitempty"`
	Extra Extra  `json:"-"`
}

// Change is one key of an audit record.
type Change struct {
	Key    string          `json:"key"`
	Op     string          `json:"op"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// Audit is the record regionctl writes at <root>/audit/<epoch> in the same
// transaction as the change it describes.
type Audit struct {
	Epoch   int64    `json:"epoch"`
	At      string   `json:"at"`
	User    string   `json:"user"`
	Host    string   `json:"host"`
	Reason  string   `json:"reason"`
	Command string   `json:"command"`
	Changes []Change `json:"changes"`
}

// AgentStatus is what an agent publishes at <root>/agents/<node>.
type AgentStatus struct {
	Node      string `json:"node"`
	Revision  int64  `json:"revision"`
	Epoch     int64  `json:"epoch"`
	SyncedAt  string `json:"synced_at"`
	Connected bool   `json:"connected"`
	Version   string `json:"version"`
	// ChangeRevision is the revision of the newest routing event (a put
	// or a delete) the agent applied from its watch since it started;
	// absent before the first. regionctl status takes the newest of them
	// as a routing change when it is newer than every key: a delete
	// leaves no key.
	ChangeRevision int64 `json:"change_revision,omitempty"`
	// Skipped counts the keys whose current value the agent refused (it
	// serves their last good value, or nothing); SkippedKeys names the
	// first MaxStatusSkippedKeys of them: those it may serve otherwise
	// than another agent first, then those it serves alike (ServedAlike),
	// each sorted. SkippedAlike counts the latter. An agent with skipped
	// keys not served alike is not converged: it may serve what no other
	// agent does.
	Skipped      int      `json:"skipped,omitempty"`
	SkippedKeys  []string `json:"skipped_keys,omitempty"`
	SkippedAlike int      `json:"skipped_alike,omitempty"`
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

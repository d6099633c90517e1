package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/regiond/regiond/routing"
)

// Plan is a proposed change of the state, built by a verb from the current
// State. The store validates the whole resulting state before writing.
type Plan struct {
	// Config is the whole proposed config; nil leaves the config as it is.
	// Config keys present now and absent from it are deleted.
	Config *routing.Config
	// Prune also deletes stored config keys whose values do not decode
	// (and are therefore absent from every loaded Config) unless Config
	// sets them.
	Prune bool
	// DeleteInvalid deletes these stored config keys (relative to
	// <root>/routing/) whose values do not decode, a hand edit the agents
	// skip, unless Config sets them: pool rm and route rm of such a key,
	// which leave the other undecodable keys as they are.
	DeleteInvalid []string
	// PutOverrides adds or replaces boosts, each under a new lease.
	PutOverrides []OverridePut
	// DeleteOverrides cancels boosts by id.
	DeleteOverrides []string
	// Force skips the check that refuses a change after which some country
	// that has an eligible pool now would have none.
	Force bool
	// AllowResidencyChange skips the check that refuses a change of the
	// residency policy that takes a code out of the class the stored
	// policy puts it in (see residencyChanges); Force does not.
	AllowResidencyChange bool
}

// OverridePut is a boost to write under a new lease of TTL. Its
// Override's ExpiresAt is set when the plan is made: now plus TTL, so
// agents end the boost by their clocks even when etcd renews the lease.
type OverridePut struct {
	// ID is the boost's id, its key's last element.
	ID string
	// Override is the boost's value.
	Override routing.Override
	// TTL is the life of the boost's lease.
	TTL time.Duration
}

// op is one key write of a plan.
type op struct {
	rel           string
	before, after []byte // nil: absent
	ttl           time.Duration
	guard         bool  // compare mod revision (overrides)
	modRev        int64 // mod revision read; 0: absent
	oldLease      int64 // lease to revoke after commit
}

// effects are what a write does that a write without its Plan's Force or
// AllowResidencyChange refuses ("" for none).
type effects struct {
	// forced names the countries the write leaves with no eligible
	// pool (see lostCountries).
	forced string
	// residency names the codes the write takes out of their residency
	// class (see residencyChanges).
	residency string
}

// prepare validates the proposed state and returns the key writes, sorted
// by key, and what the plan does that its Force or AllowResidencyChange
// lets through. An empty result means the plan changes nothing.
func (s *Store) prepare(st *State, p *Plan) ([]op, effects, error) {
	if st.epochErr != nil {
		return nil, effects{}, st.epochErr
	}
	if st.Epoch >= routing.MaxEpoch { // only a hand edit gets here: regionctl counts from 1
		return nil, effects{}, fmt.Errorf("the epoch key %s holds %d, the largest epoch (2^53−1): the next would be refused as malformed by every agent; put a smaller one with etcdctl (the newest audit record's epoch), then re-run",
			s.ks.Epoch(), st.Epoch)
	}
	next := st.Config
	var errs routing.Errors
	if p.Config != nil {
		// Sizes are measured below, on the bytes written (writeSizes).
		next = p.Config
		errs = append(errs, routing.ValidateExceptSize(next)...)
	}
	// One clock for the checks and the boosts written: each boost's
	// expires_at is set first, so the checks see what is written.
	now := s.opts.Now()
	p = withExpiries(p, now)
	errs = append(errs, checkOverrides(st, next, p, now)...)
	ops, err := configOps(st, next, p.Config != nil, p.Prune, p.DeleteInvalid)
	if err != nil {
		return nil, effects{}, err
	}
	ovOps, err := overrideOps(st, p)
	if err != nil {
		return nil, effects{}, err
	}
	ops = append(ops, ovOps...)
	errs = append(errs, writeSizes(ops)...)
	if e := policyRefused(st, ops); e != nil {
		errs = append(errs, e)
	}
	var eff effects
	if slices.ContainsFunc(ops, func(o op) bool { return o.rel == routing.PolicyKey }) {
		// Judged against the policy of the state read, the read the
		// Txn's compares are based on: a policy written meanwhile is a
		// conflict, and a retry judges the write against it.
		changed := residencyChanges(st, next)
		switch {
		case len(changed) > 0 && p.AllowResidencyChange:
			lines := make([]string, len(changed))
			for i, c := range changed {
				lines[i] = c.what
			}
			eff.residency = strings.Join(lines, "; ")
		case len(changed) > 0:
			for _, c := range changed {
				errs = append(errs, &routing.FieldError{Key: routing.PolicyKey, Msg: c.what + "; " + c.how})
			}
		}
	}
	if len(errs) == 0 && mayLoseCandidates(ops) {
		// Forced or not, the effect is worked out: a forced write (and
		// its dry run) says what it does rather than nothing.
		switch lost := lostCountries(st, next, p, now); {
		case lost != "" && p.Force:
			eff.forced = lost
		case lost != "":
			errs = append(errs, &routing.FieldError{Key: "effect", Msg: lost + "; re-run with --force to write anyway"})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].rel < ops[j].rel })
	if len(errs) > 0 {
		errs = append(errs, invalidLeft(st, ops, errs)...)
		errs.Sort()
		return nil, effects{}, &RefusedError{Errs: errs, Changes: changes(ops)}
	}
	return ops, eff, nil
}

// residencyChange is one line of residencyChanges: what the write does,
// and what to do instead, or to write it anyway.
type residencyChange struct{ what, how string }

// residencyChanges names, one line per group of codes alike, the codes
// that next's residency policy takes out of the class the stored one
// (st's: the built-in policy when no policy key is stored, or when the
// stored value is refused) puts them in, into no class or another, each
// group with the class, and the routes that may then send its viewers to
// pools of another residency (routing.ResidencyChanges). None when the
// policy only adds codes to classes.
func residencyChanges(st *State, next *routing.Config) []residencyChange {
	type group struct {
		codes    []string
		from, to string
		routes   []string
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, c := range routing.ResidencyChanges(st.Config.ResidencyOrDefault(), next) {
		k := c.From + "|" + c.To + "|" + strings.Join(c.Routes, "|")
		g := byKey[k]
		if g == nil {
			g = &group{from: c.From, to: c.To, routes: c.Routes}
			byKey[k] = g
			groups = append(groups, g)
		}
		code := c.Code
		if code == routing.Unknown {
			code = unknownCountry
		}
		g.codes = append(g.codes, code)
	}
	out := make([]residencyChange, 0, len(groups))
	for _, g := range groups {
		into := "into no class"
		if g.to != "" {
			into = "into class " + g.to
		}
		whose := "its"
		if len(g.codes) > 1 {
			whose = "their"
		}
		line := fmt.Sprintf("this write takes %s out of class %s (%s)", strings.Join(g.codes, ", "), g.from, into)
		if len(g.routes) > 0 {
			line += fmt.Sprintf(": %s may then send %s viewers to pools of another residency than %s", strings.Join(g.routes, ", "), whose, g.from)
		} else {
			line += fmt.Sprintf(": no route of %s chain sends %s viewers to a pool of another residency yet, but no check holds them to class %s any more", whose, whose, g.from)
		}
		codes := strings.Join(g.codes, ", ")
		back := fmt.Sprintf("put %s back in class %s", codes, g.from)
		if len(g.codes) == 1 && g.codes[0] == unknownCountry {
			back = "set unknown_country_class back to " + g.from
		}
		out = append(out, residencyChange{what: line, how: fmt.Sprintf("%s, or, if %s viewers are meant to leave class %s, re-run with --allow-residency-change (--force does not allow it)",
			back, whose, g.from)})
	}
	return out
}

// unknownCountry is how residencyChanges names routing.Unknown.
const unknownCountry = "the unknown country (unknown_country_class)"

// writeSizes measures each value a write puts by the bytes it puts, as
// the agents measure it. A value the write leaves as it is is not
// measured again: its stored bytes decoded, so they are within the limit
// (a stored value over it is an invalid key), whatever regionctl's
// encoding of it would weigh.
func writeSizes(ops []op) routing.Errors {
	var errs routing.Errors
	for _, o := range ops {
		if o.after != nil {
			errs = append(errs, routing.CheckWriteSize(o.rel, o.after)...)
		}
	}
	return errs
}

// invalidLeft names, beside a refused write's problems errs, each pool or
// route key whose stored value does not decode, that the write leaves as
// it is, and that a problem says "does not exist": the write's checks
// read such a key as missing (the drills: one pool's invalid value
// refused every drain of every other pool, as routes naming a pool that
// does not exist, with no word of the value).
func invalidLeft(st *State, ops []op, errs routing.Errors) routing.Errors {
	var out routing.Errors
	for _, k := range st.InvalidConfigKeys() {
		kind, id, ok := strings.Cut(k, "/")
		if !ok || (kind != "pools" && kind != "routes") || slices.ContainsFunc(ops, func(o op) bool { return o.rel == k }) {
			continue
		}
		missing := strings.TrimSuffix(kind, "s") + " " + id + " does not exist"
		if !strings.Contains(errs.Error(), missing) {
			continue
		}
		_, why, _ := st.InvalidConfig(k)
		out = append(out, &routing.FieldError{Key: k, Msg: fmt.Sprintf("the stored value is invalid (%s): the agents serve its last good value, "+
			"but this write's checks see no %s (%q above); replace it whole (regionctl %s set %s with every field, or apply -f) or remove it (%s rm %s), then re-run",
			strings.TrimPrefix(why.Error(), k+": "), strings.TrimSuffix(kind, "s")+" "+id, missing, strings.TrimSuffix(kind, "s"), id, strings.TrimSuffix(kind, "s"), id)})
	}
	return out
}

// policyRefused refuses a write that leaves a refused residency policy in
// place (a hand edit the agents skip, serving its last good value): the
// write's checks (each pool's and boost's residency, the countries a
// change leaves without an eligible pool) would judge it against the
// built-in policy, not the one the agents serve, and pass what sends a
// country's viewers out of their class. A write that puts or deletes the
// policy key goes ahead.
func policyRefused(st *State, ops []op) *routing.FieldError {
	_, why, refused := st.InvalidConfig(routing.PolicyKey)
	if !refused || slices.ContainsFunc(ops, func(o op) bool { return o.rel == routing.PolicyKey }) {
		return nil
	}
	fix := "regionctl apply -f FILE with a policy section (regionctl history --touching policy/residency shows the values regionctl wrote)"
	if st.Epoch > 0 {
		fix += fmt.Sprintf(", or, while etcd still holds epoch %d's revision (not compacted), regionctl rollback %d (the config as epoch %d committed it, undoing the hand edits since)",
			st.Epoch, st.Epoch, st.Epoch)
	}
	return &routing.FieldError{Key: routing.PolicyKey, Msg: fmt.Sprintf("the stored residency policy is refused by the agents (%s), which serve its last good value; "+
		"this write's checks would judge it by the built-in policy instead: replace the policy first, with %s", strings.TrimPrefix(why.Error(), routing.PolicyKey+": "), fix)}
}

// configOps returns the puts and deletes that turn the stored config into
// next, comparing canonical encodings so that formatting alone is no change;
// with prune every stored value that does not decode is deleted, else
// those of deleteInvalid. An op's before is the value etcd holds, byte for
// byte (the audit record's and the diff's before, judged as the agents
// judge it), not regionctl's encoding of it, which may be larger.
func configOps(st *State, next *routing.Config, changed, prune bool, deleteInvalid []string) ([]op, error) {
	if !changed {
		return nil, nil
	}
	cur, err := st.Config.Values()
	if err != nil {
		return nil, fmt.Errorf("encode current config: %w", err)
	}
	want, err := next.Values()
	if err != nil {
		return nil, fmt.Errorf("encode proposed config: %w", err)
	}
	var ops []op
	for rel, after := range want {
		before, ok := cur[rel]
		if raw, bad := st.invalid[rel]; bad {
			before, ok = raw, true
		}
		if ok && bytes.Equal(before, after) {
			continue
		}
		ops = append(ops, op{rel: rel, before: nilIfAbsent(st.storedOr(rel, before), ok), after: after})
	}
	for rel, before := range cur {
		if _, ok := want[rel]; !ok {
			ops = append(ops, op{rel: rel, before: st.storedOr(rel, before)})
		}
	}
	for rel, raw := range st.invalid {
		if _, ok := want[rel]; !ok && (prune || slices.Contains(deleteInvalid, rel)) {
			ops = append(ops, op{rel: rel, before: raw})
		}
	}
	return ops, nil
}

// storedOr returns the bytes etcd holds at config key rel, or enc (its
// encoding) for a state not loaded from etcd.
func (st *State) storedOr(rel string, enc []byte) []byte {
	if raw, ok := st.stored[rel]; ok {
		return raw
	}
	return enc
}

func nilIfAbsent(b []byte, ok bool) []byte {
	if !ok {
		return nil
	}
	return b
}

// withExpiries returns p with each boost's ExpiresAt set for a write at
// now (p itself is left as it is: a re-run plans again).
func withExpiries(p *Plan, now time.Time) *Plan {
	if len(p.PutOverrides) == 0 {
		return p
	}
	cp := *p
	cp.PutOverrides = make([]OverridePut, len(p.PutOverrides))
	for i, put := range p.PutOverrides {
		put.Override.ExpiresAt = expiresAt(now, put.TTL)
		cp.PutOverrides[i] = put
	}
	return &cp
}

// expiresAt is a boost's expires_at: now plus ttl, rounded up to the
// second (RFC 3339 in seconds), so that a boost lasts at least its TTL,
// as its lease (granted in whole seconds, rounded up) does.
func expiresAt(now time.Time, ttl time.Duration) string {
	end := now.Add(ttl)
	if t := end.Truncate(time.Second); t.Before(end) {
		end = t.Add(time.Second)
	}
	return end.UTC().Format(time.RFC3339)
}

// overrideOps returns the writes of the plan's boosts.
func overrideOps(st *State, p *Plan) ([]op, error) {
	var ops []op
	for _, put := range p.PutOverrides {
		after, err := json.Marshal(put.Override)
		if err != nil {
			return nil, fmt.Errorf("encode boost %s: %w", put.ID, err)
		}
		o := op{rel: routing.OverrideKey(put.ID), after: after, ttl: put.TTL, guard: true}
		if cur, ok := st.Overrides[put.ID]; ok {
			o.before, _ = json.Marshal(cur.Override)
			o.modRev, o.oldLease = cur.ModRevision, cur.Lease
		}
		ops = append(ops, o)
	}
	for _, id := range p.DeleteOverrides {
		if bad, ok := st.BadOverrides[id]; ok {
			// A value that does not decode (a hand edit): the key is
			// deleted as it is, its lease left alone (it may hold keys
			// of others: a heartbeat's, an agent's).
			ops = append(ops, op{rel: routing.OverrideKey(id), before: bad.Value, guard: true, modRev: bad.ModRevision})
			continue
		}
		cur, ok := st.Overrides[id]
		if !ok {
			return nil, fmt.Errorf("boost %s: %w (it may have expired; see boost ls)", id, ErrNotFound)
		}
		before, _ := json.Marshal(cur.Override)
		ops = append(ops, op{rel: routing.OverrideKey(id), before: before, guard: true,
			modRev: cur.ModRevision, oldLease: cur.Lease})
	}
	return ops, nil
}

// changes returns the audit changes of ops.
func changes(ops []op) []routing.Change {
	out := make([]routing.Change, len(ops))
	for i, o := range ops {
		c := routing.Change{Key: o.rel, Op: "put", Before: rawJSON(o.before), After: rawJSON(o.after)}
		if o.after == nil {
			c.Op = "delete"
		}
		out[i] = c
	}
	return out
}

// rawJSON returns b as a JSON value: null when absent, a JSON string when b
// is not valid JSON (a corrupt stored value).
func rawJSON(b []byte) json.RawMessage {
	if b == nil {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		var c bytes.Buffer
		if json.Compact(&c, b) == nil {
			return c.Bytes()
		}
	}
	s, _ := json.Marshal(string(b))
	return s
}

// Checked is what Check finds.
type Checked struct {
	// Changes are the keys p writes, relative to <root>/routing/, in order.
	Changes []routing.Change
	// Problems say why a write of p is refused (none: it is not).
	Problems routing.Errors
	// Forced, as Result.Forced: what p with Force does that a write
	// without it refuses.
	Forced string
	// ResidencyChanged, as Result.ResidencyChanged: what p with
	// AllowResidencyChange does that a write without it refuses.
	ResidencyChanged string
}

// Check runs the checks a write of p runs (validation of the whole
// state, live boosts, countries left with no eligible pool unless
// p.Force, codes taken out of their residency class unless
// p.AllowResidencyChange) and writes nothing: the changes p makes and, when a write would
// be refused, why. diff uses it, so that it refuses exactly what apply
// refuses.
func (s *Store) Check(st *State, p *Plan) (Checked, error) {
	ops, eff, err := s.prepare(st, p)
	var re *RefusedError
	switch {
	case errors.As(err, &re):
		return Checked{Changes: re.Changes, Problems: re.Errs}, nil
	case err != nil:
		return Checked{}, err
	}
	return Checked{Changes: changes(ops), Forced: eff.forced, ResidencyChanged: eff.residency}, nil
}

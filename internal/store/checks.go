package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/regiond/regiond/routing"
)

// checkOverrides validates the boosts a plan writes, and refuses a config
// change that would break a live boost that is valid today (one whose
// expires_at has passed at now is not live, whatever its lease).
func checkOverrides(st *State, next *routing.Config, p *Plan, now time.Time) routing.Errors {
	var errs routing.Errors
	touched := map[string]bool{}
	for _, put := range p.PutOverrides {
		touched[put.ID] = true
		errs = append(errs, routing.ValidateOverride(next, put.ID, put.Override)...)
	}
	for _, id := range p.DeleteOverrides {
		touched[id] = true
	}
	if p.Config == nil {
		return errs
	}
	for _, id := range st.OverrideIDs() {
		if touched[id] {
			continue
		}
		ov := st.Overrides[id].Override
		if ov.Expired(now) {
			continue // ended by its expires_at, its lease alive: no agent applies it
		}
		if len(routing.ValidateOverride(st.Config, id, ov)) > 0 {
			continue // already broken: the agent copes; not this write's fault
		}
		broken := routing.ValidateOverride(next, id, ov)
		for _, e := range broken {
			errs = append(errs, &routing.FieldError{Key: e.Key, Field: e.Field,
				Msg: e.Msg + fmt.Sprintf(" (live boost; cancel it first: regionctl boost cancel %s)", id)})
		}
	}
	return errs
}

// lostCountries says which countries (the unknown country too) that have
// an eligible pool now a change leaves with none, and why ("" for none);
// a write refuses such a change unless forced. It counts
// pool status, the boosts live at now, and health as far as a write can
// know it: a pool with health_check and no live health key is unhealthy
// (the agents hold it so once --health-grace has passed), before and
// after alike, so turning on health_check for pools no heartbeat serves
// yet is refused when it would leave countries without a pool.
func lostCountries(st *State, next *routing.Config, p *Plan, now time.Time) string {
	before, err := routing.CompileConfig(st.Config, st.OverrideMap(), routing.CompileOptions{Now: now, Down: checkedWithoutHealth(st, st.Config)})
	if err != nil {
		return ""
	}
	ovs := st.OverrideMap()
	// The plan's boosts are written in one Txn, after every stored one:
	// one revision, newer than all, as every stored key was written at or
	// before the read's revision (the agents apply the newest boost of a
	// route last, so it wins; ties by id, as in the agents).
	written := st.Revision + 1
	for _, id := range p.DeleteOverrides {
		delete(ovs, id)
	}
	for _, put := range p.PutOverrides {
		ovs[put.ID] = routing.StoredOverride{Override: put.Override, ModRevision: written}
	}
	unhealthy := checkedWithoutHealth(st, next)
	after, err := routing.CompileConfig(next, ovs, routing.CompileOptions{Now: now, Down: unhealthy})
	if err != nil {
		return ""
	}
	isUnhealthy := map[string]bool{}
	for _, id := range unhealthy {
		isUnhealthy[id] = true
	}
	var lost []string
	reasons := map[string]bool{}
	var reasonList []string
	for _, cc := range append(append([]string(nil), routing.Countries()...), routing.Unknown) {
		b, a := before.Effective(cc), after.Effective(cc)
		if len(b.Candidates) == 0 || len(a.Candidates) > 0 {
			continue
		}
		lost = append(lost, cc)
		for _, r := range a.Degraded {
			if id, ok := strings.CutPrefix(r, routing.ReasonPoolDown.On("")); ok && isUnhealthy[id] {
				r = routing.ReasonPoolUnhealthy.On(id) + " (health_check, no live health key: start its heartbeats first)"
			}
			if !reasons[r] && routing.ReasonOf(r) != routing.ReasonNoRoute {
				reasons[r] = true
				reasonList = append(reasonList, r)
			}
		}
	}
	if len(lost) == 0 {
		return ""
	}
	return fmt.Sprintf("%s would have no eligible pool (%s)", describeCountries(lost), strings.Join(reasonList, ", "))
}

// checkedWithoutHealth returns the pools of cfg with health_check that
// have no live health key in st: unhealthy for the agents. A health key
// counts whatever its value, as the agents count it (st.Health holds only
// the values that decode).
func checkedWithoutHealth(st *State, cfg *routing.Config) []string {
	live := map[string]bool{} // pools with a live health key
	for _, kv := range st.KVs {
		if k, err := routing.ParseKey(kv.Key); err == nil && k.Kind == routing.KindHealth {
			live[k.ID] = true
		}
	}
	var ids []string
	for id, pool := range cfg.Pools {
		if pool.HealthCheck && !live[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func describeCountries(ccs []string) string {
	switch {
	case len(ccs) == 1:
		return "country " + ccs[0]
	case len(ccs) > 10:
		return fmt.Sprintf("%d countries (%s and %d more)", len(ccs), strings.Join(ccs[:10], ", "), len(ccs)-10)
	}
	return fmt.Sprintf("%d countries (%s)", len(ccs), strings.Join(ccs, ", "))
}

// mayLoseCandidates reports whether some write could make a pool
// ineligible: anything but a change of attrs alone.
func mayLoseCandidates(ops []op) bool {
	for _, o := range ops {
		if o.before == nil || o.after == nil {
			return true
		}
		k, err := routing.ParseKey(o.rel)
		if err != nil || (k.Kind != routing.KindPool && k.Kind != routing.KindRoute) {
			return true
		}
		b, errB := withoutAttrs(o.rel, o.before)
		a, errA := withoutAttrs(o.rel, o.after)
		if errB != nil || errA != nil || !bytes.Equal(a, b) {
			return true
		}
	}
	return false
}

// withoutAttrs returns the canonical encoding of a pool or route without
// its attrs.
func withoutAttrs(rel string, raw []byte) ([]byte, error) {
	v, err := routing.DecodeValue(rel, raw)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case *routing.Pool:
		x.Attrs = nil
	case *routing.Route:
		x.Attrs = nil
	}
	return json.Marshal(v)
}

package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

func (a *app) boostCmd() *cobra.Command {
	var (
		id, ttl        string
		targets, attrs []string
		w              writeOpts
	)
	cmd := &cobra.Command{
		Use:   "boost ROUTE --target POOL=WEIGHT… [--attr k=v…] --ttl 6h",
		Short: "Override a route's targets and/or attrs until a lease ends",
		Long: `boost writes an override of ROUTE under its own lease: it replaces the
route's targets and/or merges attrs until the TTL ends, then reverts by
itself with no command run. It is validated like a route (pools exist,
residency of a country route). See also boost ls, cancel and extend.

The boost's value carries expires_at (now + TTL, RFC 3339): the agents
stop applying it then by their own clocks, even if etcd keeps the lease
longer (each leader election renews every lease to its full TTL). Keep
the clocks of regionctl's and the agents' hosts in sync (NTP).`,
		Example: `  regionctl boost KR --target kr-music=100 --ttl 6h --reason "comeback week"
  regionctl boost PL --attr flag.autoplay_preview=off --ttl 30m
  regionctl boost ls`,
		Args: exactArgs(1, "a route name"),
	}
	f := cmd.Flags()
	f.StringArrayVar(&targets, "target", nil, "POOL=WEIGHT (repeatable, or comma-separated: a=60,b=40; replaces the route's targets)")
	f.StringArrayVar(&attrs, "attr", nil, "attribute KEY=VALUE merged over the route's (repeatable)")
	f.StringVar(&ttl, "ttl", "", "life of the boost (e.g. 6h, 30m)")
	f.StringVar(&id, "id", "", "boost id (default: ROUTE-<time>-<random>)")
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, cmd *cobra.Command, args []string) error {
		if ttl == "" && len(targets) == 0 && len(attrs) == 0 {
			if err := subcommandTypo(cmd, args[0]); err != nil {
				return err // boost list: not a route named "list"
			}
		}
		return a.runBoost(ctx, args[0], id, ttl, targets, attrs, w)
	})
	cmd.AddCommand(a.boostLsCmd(), a.boostCancelCmd(), a.boostExtendCmd())
	return cmd
}

func parseTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, usagef("--ttl is required (e.g. --ttl 6h)")
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil: // not a duration, or past Go's 2562047h
		return 0, usagef("--ttl %q: not a duration from 1s to 2562047h (e.g. 6h, 30m)", s)
	case d < time.Second:
		return 0, usagef("--ttl %q: want a duration of at least 1s (e.g. 6h, 30m)", s)
	}
	return d, nil
}

func (a *app) runBoost(ctx context.Context, route, id, ttlFlag string, targetSpecs, attrSpecs []string, w writeOpts) error {
	ttl, err := parseTTL(ttlFlag)
	if err != nil {
		return err
	}
	targets, err := parseTargets(targetSpecs)
	if err != nil {
		return err
	}
	attrs, err := applyAttrs(nil, attrSpecs, nil)
	if err != nil {
		return err
	}
	if len(targets) == 0 && len(attrs) == 0 {
		return usagef("boost %s: give --target and/or --attr", route)
	}
	if id == "" {
		id = newBoostID(route)
	}
	ov := routing.Override{Route: route, Targets: targets, Attrs: attrs, Reason: w.reason, Author: a.userName()}
	// The end is the written expires_at (the diff's "until"), not a time
	// of its own read before the write.
	w.notes = []string{fmt.Sprintf("boost %s lasts %s: until its expires_at above, or its lease's end if that comes first", id, ttl)}
	var idle string
	w.warning = func() string { return idle }
	clocks := false // checked once, not per retry
	return a.runWrite(ctx, w, func(ctx context.Context, cur *store.State) (*store.Plan, error) {
		if !clocks {
			clocks = true
			a.warnClocks(ctx, ttl)
		}
		idle = idleTargets(cur, route, targets)
		if _, ok := cur.Overrides[id]; ok {
			return nil, refusef(routing.OverrideKey(id), "boost already exists; extend or cancel it")
		}
		if bad, ok := cur.BadOverrides[id]; ok {
			return nil, refusef(routing.OverrideKey(id), "holds a value that does not decode (%v); cancel it first: regionctl boost cancel %s", bad.Err, id)
		}
		if err := unknownRoute(cur, routing.OverrideKey(id), "route", route); err != nil {
			return nil, err
		}
		for i, tg := range targets {
			if err := unknownPool(cur, routing.OverrideKey(id), fmt.Sprintf("targets[%d].pool", i), tg.Pool); err != nil {
				return nil, err
			}
		}
		if others := liveBoostsOf(cur, route, time.Now()); len(others) > 0 {
			effect := "so this one's targets override theirs while it lives, and theirs apply again if it ends first"
			if len(ov.Targets) == 0 {
				effect = "so this one, which sets no targets, leaves theirs in force and merges its attrs over theirs"
			}
			a.warnAttempt("route %s has %d live boost(s) already (%s): the newest boost of a route that sets targets sets its targets, and the attrs of all its boosts merge (the newest winning a key), "+
				"%s; regionctl boost cancel ID ends one", route, len(others), strings.Join(others, ", "), effect)
		}
		return &store.Plan{PutOverrides: []store.OverridePut{{ID: id, Override: ov, TTL: ttl}}}, nil
	})
}

// idleTargets says, when some of a boost's targets are pools that are not
// active in cur (draining or down), which, and what that does (""
// otherwise): the boost is written, but no viewer goes to them while they
// are, and it takes effect if they are undrained before it ends.
func idleTargets(cur *store.State, route string, targets []routing.Target) string {
	var idle []string
	for _, t := range targets {
		if p, ok := cur.Config.Pools[t.Pool]; ok && p.Status != routing.StatusActive {
			idle = append(idle, t.Pool+" ("+p.Status+")")
		}
	}
	if len(idle) == 0 {
		return ""
	}
	return fmt.Sprintf("the boost of %s targets %s: no viewer goes there while that lasts (the route's other candidates serve them, see regionctl resolve %s), and the boost takes effect if it ends before the boost does",
		route, strings.Join(idle, ", "), route)
}

// liveBoostsOf lists the ids of route's boosts in cur that are still live
// at now (their expires_at not passed), sorted.
func liveBoostsOf(cur *store.State, route string, now time.Time) []string {
	var ids []string
	for _, id := range cur.OverrideIDs() { // sorted
		if ov := cur.Overrides[id].Override; ov.Route == route && !ov.Expired(now) {
			ids = append(ids, id)
		}
	}
	return ids
}

// newBoostID returns ROUTE-YYYYMMDD-HHMMSS-xxxx.
func newBoostID(route string) string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%s-%s", strings.TrimPrefix(route, "_"), time.Now().UTC().Format("20060102-150405"), hex.EncodeToString(b[:]))
}

func (a *app) boostLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List boosts with their lease's remaining life and their expires_at",
		Long: `boost ls lists the boost keys: each with the remaining TTL of its lease and
its expires_at, marked (expired) once that has passed (the agents no longer
apply it; an etcd leader election renewed its lease, which keeps the key
until it ends or boost cancel deletes it). -o json gives "expired" too.
A boost that serves no viewer (every target drained, down, unhealthy or of
another residency class for every viewer of its route, who go down the
fallback chain past it) is named in a warning on stderr and marked
"serves_no_viewer" in -o json.`,
		Example: "  regionctl boost ls\n  regionctl boost ls -o json",
		Args:    exactArgs(0, "no arguments"),
	}
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		return a.runBoostLs(ctx)
	})
	return cmd
}

// boostInfo is one boost of boost ls.
type boostInfo struct {
	store.LiveOverride
	ID string `json:"id"`
	// TTLSeconds is the lease's remaining life; null for a key without a
	// lease (a hand edit: only its expires_at, if any, ends it).
	TTLSeconds *int64 `json:"ttl_seconds"`
	// Expired: its expires_at has passed; the agents no longer apply it,
	// though its lease (an election renewed it) keeps the key.
	Expired bool `json:"expired"`
	// ServesNoViewer: it is the boost in force on its route, and none of
	// its targets is eligible for any viewer of that route (drained, down,
	// unhealthy, another residency class), as the agents would find now
	// (regiond_table_boosts_without_eligible_target counts them).
	ServesNoViewer bool `json:"serves_no_viewer"`
}

func (a *app) runBoostLs(ctx context.Context) error {
	cur, err := a.load(ctx)
	if err != nil {
		return err
	}
	ttls, err := a.boostTTLs(ctx, cur)
	if err != nil {
		a.warnBoostTTLs(err) // the boosts are listed all the same: ttl_seconds null, TTL "-"
		ttls = nil
	}
	now := time.Now()
	// As the agents' table would find the boosts now (their health grace
	// windows over, as resolve does).
	tbl, err := a.compileStored(ctx, cur, routing.CompileOptions{Now: now, Start: now.Add(-routing.DefaultHealthGrace)})
	if err != nil {
		return err
	}
	idle := tbl.BoostsWithoutEligibleTarget()
	out := []boostInfo{}
	for _, id := range cur.OverrideIDs() {
		lo := cur.Overrides[id]
		bi := boostInfo{LiveOverride: lo, ID: id, Expired: lo.Override.Expired(now), ServesNoViewer: slices.Contains(idle, id)}
		if bi.ServesNoViewer {
			fmt.Fprintf(a.stderr, "regionctl: warning: boost %s serves no viewer: none of its targets (%s) is eligible for a viewer of route %s (drained, down, unhealthy, or another residency class), who go down the fallback chain past it; regionctl resolve CC names why\n",
				id, targetList(lo.Override.Targets), lo.Override.Route)
		}
		if ttl, ok := ttls[id]; ok {
			secs := int64(ttl / time.Second)
			bi.TTLSeconds = &secs
		}
		out = append(out, bi)
	}
	return a.printer().print(out, func(w io.Writer) { printBoosts(w, cur.Overrides, ttls) })
}

// boostTTLs reads the remaining life of each boost's lease (one request
// per boost with a lease; a.load dialed a.st), by boost id.
func (a *app) boostTTLs(ctx context.Context, cur *store.State) (map[string]time.Duration, error) {
	ttls := map[string]time.Duration{}
	for _, id := range cur.OverrideIDs() {
		if lease := cur.Overrides[id].Lease; lease != 0 {
			ttl, err := a.st.TTL(ctx, lease)
			if err != nil {
				return nil, err
			}
			ttls[id] = ttl
		}
	}
	return ttls, nil
}

// warnBoostTTLs says that the boosts' leases could not be read (etcd's
// refusal, or a connection lost after the boosts were read): they are
// shown without their remaining lives, as get health shows its keys.
func (a *app) warnBoostTTLs(err error) {
	fmt.Fprintf(a.stderr, "regionctl: warning: the boosts' remaining lives are not shown: %v\n", err)
}

// ttlText is a lease's remaining life as the TTL columns show it:
// "ended" once none is left (etcd answers a lease that has ended, or
// that was revoked, with no life), else the duration.
func ttlText(d time.Duration) string {
	if d <= 0 {
		return "ended"
	}
	return d.String()
}

// printBoosts prints the boost table; ttls may be nil (not read).
func printBoosts(w io.Writer, boosts map[string]store.LiveOverride, ttls map[string]time.Duration) {
	row(w, "BOOST", "ROUTE", "TARGETS", "ATTRS", "TTL", "EXPIRES", "REASON", "AUTHOR")
	now := time.Now()
	for _, id := range sortedKeys(boosts) {
		o := boosts[id].Override
		ttl := "-"
		if d, ok := ttls[id]; ok {
			ttl = ttlText(d)
		} else if ttls != nil && boosts[id].Lease == 0 {
			ttl = "no lease"
		}
		expires := orDash(o.ExpiresAt)
		if o.Expired(now) {
			// Its lease outlived it (a leader election renewed it):
			// the agents no longer apply it.
			expires += " (expired)"
		}
		row(w, id, o.Route, targetList(o.Targets), kvList(o.Attrs), ttl, expires, orDash(o.Reason), orDash(o.Author))
	}
}

func (a *app) boostCancelCmd() *cobra.Command {
	var w writeOpts
	cmd := &cobra.Command{
		Use:     "cancel ID",
		Short:   "End a boost now",
		Example: `  regionctl boost cancel KR-20260101-120000-a3f9 --reason "comeback week over"`,
		Args:    exactArgs(1, "a boost id"),
	}
	addWriteFlags(cmd, &w)
	addIgnoreNotFoundFlag(cmd, &w.ignoreNotFound)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		return a.runWrite(ctx, w, a.orIgnoreAbsent(w.ignoreNotFound, func(_ context.Context, cur *store.State) (*store.Plan, error) {
			_, bad := cur.BadOverrides[args[0]]
			if _, ok := cur.Overrides[args[0]]; !ok && !bad {
				return nil, noSuchBoost(cur, "cancel", args[0])
			}
			return &store.Plan{DeleteOverrides: []string{args[0]}}, nil
		}))
	})
	return cmd
}

func (a *app) boostExtendCmd() *cobra.Command {
	var (
		ttlFlag string
		w       writeOpts
	)
	cmd := &cobra.Command{
		Use:     "extend ID --ttl D",
		Short:   "Give a boost a new remaining life of D from now",
		Example: `  regionctl boost extend KR-20260101-120000-a3f9 --ttl 2h --reason "trend continues"`,
		Args:    exactArgs(1, "a boost id"),
	}
	cmd.Flags().StringVar(&ttlFlag, "ttl", "", "new remaining life (e.g. 2h)")
	addWriteFlags(cmd, &w)
	cmd.RunE = a.verb(func(ctx context.Context, _ *cobra.Command, args []string) error {
		ttl, err := parseTTL(ttlFlag)
		if err != nil {
			return err
		}
		id := args[0]
		clocks := false // checked once, not per retry
		w.notes = []string{fmt.Sprintf("boost %s now lasts %s: until its new expires_at above, or its lease's end if that comes first", id, ttl)}
		var old string // the expires_at the committing attempt read
		w.changesWarning = func(chg []routing.Change) string { return shortened(id, old, ttlFlag, chg) }
		return a.runWrite(ctx, w, func(ctx context.Context, cur *store.State) (*store.Plan, error) {
			if !clocks {
				clocks = true
				a.warnClocks(ctx, ttl)
			}
			lo, ok := cur.Overrides[id]
			if bad, isBad := cur.BadOverrides[id]; isBad {
				return nil, refusef(routing.OverrideKey(id), "holds a value that does not decode (%v); cancel it: regionctl boost cancel %s", bad.Err, id)
			}
			if !ok {
				return nil, noSuchBoost(cur, "extend", id)
			}
			old = lo.Override.ExpiresAt
			return &store.Plan{PutOverrides: []store.OverridePut{{ID: id, Override: lo.Override, TTL: ttl}}}, nil
		})
	})
	return cmd
}

// shortened says, when boost id's expires_at written (in chg) is before
// old, the one it had, that the extend shortens it, naming both ("" when
// it does not): --ttl is a new remaining life from now, which may be
// shorter than the life left.
func shortened(id, old, ttl string, chg []routing.Change) string {
	was := (&routing.Override{ExpiresAt: old}).Expiry()
	for _, c := range chg {
		var now routing.Override
		if c.Key != routing.OverrideKey(id) || json.Unmarshal(c.After, &now) != nil {
			continue
		}
		if end := now.Expiry(); !was.IsZero() && !end.IsZero() && end.Before(was) {
			return fmt.Sprintf("boost %s now ends earlier than it would have: expires_at %s, was %s (%s sooner); --ttl %s is its new remaining life from now, not time added (give a longer --ttl to lengthen it)",
				id, now.ExpiresAt, old, was.Sub(end), ttl)
		}
	}
	return ""
}

// noSuchBoost refuses boost verb (cancel, extend) of id, which names no
// boost in cur: when id is a route with live boosts (boost cancel KR), it
// names their ids.
func noSuchBoost(cur *store.State, verb, id string) error {
	if ids := liveBoostsOf(cur, id, time.Now()); len(ids) > 0 {
		return refusef(routing.OverrideKey(id), "no such live boost: %s is a route, and %s takes a boost id; its live boost(s): %s (regionctl boost %s ID)",
			id, verb, strings.Join(ids, ", "), verb)
	}
	return absentf(routing.OverrideKey(id), "boost "+id, "no such live boost (it may have expired; see boost ls)")
}

// clockSample is how many status keys a boost reads for its clock check.
const clockSample = 100

// warnClocks warns, before a boost of ttl is written, of agents whose
// clock is ahead of this host's, from the status keys of up to
// clockSample agents: an expires_at this host sets may have passed by
// theirs. It runs in a write's build, once the store is dialed; a read
// that fails says nothing (the write reports its own errors).
func (a *app) warnClocks(ctx context.Context, ttl time.Duration) {
	if a.st == nil {
		return
	}
	agents, err := a.st.AgentSample(ctx, clockSample)
	if err != nil {
		return
	}
	if w := clockWarning(store.ClocksAhead(agents, time.Now()), len(agents), ttl); w != "" {
		fmt.Fprintf(a.stderr, "regionctl: warning: %s\n", w)
	}
}

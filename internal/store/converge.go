package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/backoff"
)

// Delays between two rounds of WaitConverged (a relist after its watch
// ended, or a read that got no answer).
const (
	convergeRetryMin = 50 * time.Millisecond
	convergeRetryMax = time.Second
)

// WaitConverged returns once every live agent's status key says revision
// rev or later and no skipped keys, and at least one agent's does: with no
// live agent, nothing confirms the write, and the wait ends on ctx. An
// agent whose key disappears before it confirmed rev is waited for until
// its key is back: stopped, or cut off from etcd (its lease ran out) while
// it serves the old table on, nothing tells which; when ctx ends first it
// is named in the error's Vanished. It learns the agents' progress from one watch on <root>/agents/
// and one Get (see round), and returns on the event that completes the
// set. It relists only when that watch ends (no leader, a closed stream);
// a read that gets no answer is retried until ctx ends.
//
// Every failure is a *NotConvergedError: when ctx ends first it names the
// laggards, and its Err says what failed when a read could not be made
// (etcd unreachable, permission denied).
func (s *Store) WaitConverged(ctx context.Context, rev int64) (Convergence, error) {
	return s.WaitConvergedExpecting(ctx, rev, 0)
}

// WaitConvergedExpecting is WaitConverged that also waits until at least
// expect live agents have confirmed rev (0: any number, at least one):
// the fleet's size, so that an agent whose status key had expired before
// the wait began (stopped, or cut off from etcd and serving its last table,
// which its node's front doors read) is not taken for one that never
// existed. Fewer at the deadline is a *NotConvergedError with Expected set.
func (s *Store) WaitConvergedExpecting(ctx context.Context, rev int64, expect int) (Convergence, error) {
	w := &convergeWait{s: s, rev: rev, start: time.Now(), agents: map[string]AgentInfo{}, behind: map[string]bool{},
		vanished: map[string]AgentInfo{}, lost: map[string]AgentInfo{}, skews: map[string]time.Duration{}, expect: expect}
	b := backoff.New(convergeRetryMin, convergeRetryMax)
	for {
		done, err := w.round(ctx)
		switch {
		case done:
			return w.convergence(), nil
		case ctx.Err() != nil:
			return w.convergence(), w.failed(w.lastErr)
		case !w.retryable(err):
			return w.convergence(), w.failed(err)
		}
		w.lastErr = err
		s.log.Info("wait converged: retrying", "revision", rev, "err", err)
		if b.Wait(ctx) != nil {
			return w.convergence(), w.failed(w.lastErr)
		}
	}
}

// MaxClockSkew is how far an agent's clock may differ from regionctl's
// before WaitConverged reports it: boosts end at their expires_at by the
// agents' clocks, and the status key's synced_at has whole seconds.
const MaxClockSkew = 5 * time.Second

// Convergence is what a WaitConverged saw.
type Convergence struct {
	// Agents is how many live agents confirmed the revision.
	Agents int
	// Skews are the agents whose clocks differ from this host's by more
	// than MaxClockSkew, sorted by node: the synced_at an agent reported
	// for applying the write, against the wait's span by this host's
	// clock (it applied the write after the wait began, before now).
	Skews []ClockSkew
}

// ClockSkew is one agent's clock against this host's.
type ClockSkew struct {
	// Node is the agent's node name (its status key's node).
	Node string
	// Ahead is how far the agent's clock is ahead (negative: behind).
	Ahead time.Duration
}

// convergeWait is one WaitConverged: the agents as last seen.
type convergeWait struct {
	s      *Store
	rev    int64
	start  time.Time
	agents map[string]AgentInfo
	behind map[string]bool // the keys of agents before rev or with skipped keys
	// vanished are the agents, by key, whose key was deleted while they
	// were behind, as last seen; one whose key is put again is judged anew.
	vanished map[string]AgentInfo
	// lost are the nodes, by status key, lost as of the last listing
	// (Fleet.Lost) and not confirmed since, as their record said.
	lost    map[string]AgentInfo
	listed  bool  // agents holds a listing
	lastErr error // the error that ended the previous round
	// skews are the clock differences past MaxClockSkew of the agents
	// at rev, by key.
	skews map[string]time.Duration
	// epoch and epochRev are the epoch key's value and mod revision as of
	// epochReadRev, the round's listing.
	epoch, epochRev, epochReadRev int64
	// expect is how many live agents must confirm rev (0: any, at least
	// one).
	expect int
}

// convergence returns what the wait saw.
func (w *convergeWait) convergence() Convergence {
	c := Convergence{Agents: len(w.agents) - len(w.behind)}
	for key, d := range w.skews {
		if a, ok := w.agents[key]; ok {
			c.Skews = append(c.Skews, ClockSkew{Node: a.Node, Ahead: d})
		}
	}
	sort.Slice(c.Skews, func(i, j int) bool { return c.Skews[i].Node < c.Skews[j].Node })
	return c
}

// listedHook is a context key for tests: a func() run once a round has
// listed the agents, before it follows the watch.
type listedHook struct{}

// errWatchEnded marks a round ended by its watch: relist.
var errWatchEnded = errors.New("watch ended")

// round opens a watch on the agents' keys, lists them at R once etcd
// confirmed the watch, and follows the watch's events after R until the
// agents are all at w.rev (true), the watch ends or ctx ends. The watch
// starts from "now" rather than from R+1: one that starts at a past
// revision is served by etcd's unsynced-watcher loop, every 100 ms, while
// one from now is synced and sees every later event at once; listing after
// its creation leaves no gap between the two. Behind etcd's grpc-proxy
// this holds as long as the list stays linearizable (the proxy's cache
// answers only serializable reads, possibly from before the watch's
// start) and the watch starts from now (for a watch from a revision the
// proxy makes up its Created answer).
func (w *convergeWait) round(ctx context.Context) (bool, error) {
	prefix := w.s.ks.AgentsPrefix()
	wch, cancel, err := w.watch(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	kvs, listRev, err := w.s.getRange(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), 0)
	if err != nil {
		return false, err
	}
	// The epoch as of the listing: an agent that has applied its last put
	// and reports another epoch follows another history (AgentInfo.checkEpoch).
	if w.epoch, w.epochRev, err = w.s.epochAt(ctx, listRev); err != nil {
		return false, err
	}
	w.epochReadRev = listRev
	// A laggard of the last listing whose key is gone from this one
	// vanished while the watch was down (a relist follows the very
	// trouble that lets leases end: no leader, a lost connection).
	listed := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		listed[string(kv.Key)] = true
	}
	for key := range w.behind {
		if !listed[key] {
			w.vanished[key] = w.agents[key]
		}
	}
	clear(w.agents)
	clear(w.behind)
	w.listed = true
	live := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		live[strings.TrimPrefix(string(kv.Key), prefix)] = true
	}
	// Nodes whose status key ended before this listing, their record
	// left (one the role may not read is not known: a role from before
	// node records).
	lost, _, err := w.s.lostNodes(ctx, listRev, live, w.rev)
	if err != nil {
		return false, err
	}
	clear(w.lost)
	for _, a := range lost {
		if key := w.s.ks.Agent(a.Node); w.vanished[key].Node == "" && !a.Converged(0) {
			w.lost[key] = a
		}
	}
	for _, kv := range kvs {
		w.put(string(kv.Key), kv.Value, listRev)
	}
	if hook, ok := ctx.Value(listedHook{}).(func()); ok {
		hook()
	}
	if w.converged() {
		return true, nil
	}
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return false, w.watchErr(err)
		}
		for _, ev := range wr.Events {
			switch {
			case ev.Kv.ModRevision <= listRev: // in the listing already
			case ev.Type == clientv3.EventTypeDelete:
				key := string(ev.Kv.Key)
				if w.behind[key] {
					w.vanished[key] = w.agents[key]
				}
				delete(w.agents, key)
				delete(w.behind, key)
			default:
				w.put(string(ev.Kv.Key), ev.Kv.Value, wr.Header.Revision)
			}
		}
		if w.converged() {
			return true, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return false, fmt.Errorf("watch %s: %w: channel closed", prefix, errWatchEnded)
}

// watch opens the watch of round and waits, at most a request timeout,
// for etcd to confirm it (the client blocks in Watch while it has no
// connection).
func (w *convergeWait) watch(ctx context.Context) (clientv3.WatchChan, context.CancelFunc, error) {
	prefix := w.s.ks.AgentsPrefix()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	t := time.AfterFunc(w.s.opts.RequestTimeout, cancel)
	wch := w.s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	wr, ok := <-wch
	var err error
	switch {
	case !t.Stop():
		err = &UnreachableError{Endpoints: w.s.opts.Endpoints,
			Err: fmt.Errorf("watch %s: not created within %s (through an etcd grpc-proxy with authentication on, etcd refuses a watch the proxy's first watcher may not make, and the proxy never says so: give regionctl the members' endpoints, not a proxy's)",
				prefix, w.s.opts.RequestTimeout)}
	case ctx.Err() != nil:
		err = ctx.Err()
	case !ok:
		err = fmt.Errorf("watch %s: %w: closed before it was created", prefix, errWatchEnded)
	case wr.Err() != nil:
		err = w.watchErr(wr.Err())
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return wch, cancel, nil
}

// watchErr is the error of a watch that ended with err: a relist may get
// past it, unless etcd refused the watch (a *PermissionError).
func (w *convergeWait) watchErr(err error) error {
	prefix := w.s.ks.AgentsPrefix()
	if isPermissionDenied(err) {
		return w.s.permErr("watch "+prefix, err, w.s.roles.ReadNeed(prefix))
	}
	return fmt.Errorf("watch %s: %w: %w", prefix, errWatchEnded, err)
}

// put records an agent's status key, read at etcd revision readRev. The
// status of an agent that applied the write was put since the wait began
// (at the commit), with the synced_at of applying it: between the wait's
// start and now by this host's clock, unless the agent's clock differs.
func (w *convergeWait) put(key string, value []byte, readRev int64) {
	a := agentInfo(key, strings.TrimPrefix(key, w.s.ks.AgentsPrefix()), value, w.rev, readRev)
	a.checkEpoch(w.epoch, w.epochRev, w.epochReadRev)
	w.agents[key] = a
	delete(w.vanished, key)
	delete(w.lost, key)
	if !a.Converged(0) {
		w.behind[key] = true
		return
	}
	delete(w.behind, key)
	delete(w.skews, key)
	at, err := time.Parse(time.RFC3339Nano, a.SyncedAt)
	if err != nil {
		return
	}
	// synced_at has whole seconds: up to 1 s before the agent's clock.
	if d := time.Until(at); d > MaxClockSkew {
		w.skews[key] = d
	} else if d := at.Sub(w.start); d < -MaxClockSkew-time.Second {
		w.skews[key] = d
	}
}

// converged reports whether some agent was seen and every agent seen is
// at rev or later and serves no refused value, and none vanished behind.
// With none, nothing confirmed the write: the wait goes on (an agent may
// start meanwhile).
func (w *convergeWait) converged() bool {
	return len(w.behind) == 0 && len(w.vanished) == 0 && len(w.lost) == 0 && len(w.agents) > 0 && len(w.agents) >= w.expect
}

// retryable tells the errors that another round may get past: a watch
// that ended, a read that got no answer.
func (w *convergeWait) retryable(err error) bool {
	var ue *UnreachableError
	return errors.Is(err, errWatchEnded) || errors.As(err, &ue) || isUnreachable(err)
}

// failed returns the *NotConvergedError of the wait, with cause.
func (w *convergeWait) failed(cause error) error {
	e := &NotConvergedError{Revision: w.rev, Waited: time.Since(w.start), Err: cause, Unknown: !w.listed}
	if w.listed && w.expect > 0 {
		e.Expected, e.Confirmed = w.expect, len(w.agents)-len(w.behind)
	}
	if w.listed && len(w.agents) == 0 {
		e.NoAgents = w.s.ks.AgentsPrefix()
	}
	for key := range w.behind {
		e.Lagging = append(e.Lagging, w.agents[key])
	}
	sort.Slice(e.Lagging, func(i, j int) bool { return e.Lagging[i].Node < e.Lagging[j].Node })
	for _, a := range w.vanished {
		e.Vanished = append(e.Vanished, a)
	}
	sort.Slice(e.Vanished, func(i, j int) bool { return e.Vanished[i].Node < e.Vanished[j].Node })
	for _, a := range w.lost {
		e.Lost = append(e.Lost, a)
	}
	sort.Slice(e.Lost, func(i, j int) bool { return e.Lost[i].Node < e.Lost[j].Node })
	return e
}

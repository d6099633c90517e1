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
// rev or later and no skipped keys (an agent whose key disappears is dead
// and no longer waited for), and at least one agent's does: with no live
// agent, nothing confirms the write, and the wait ends on ctx. It learns the agents' progress from one watch on <root>/agents/
// and one Get (see round), and returns on the event that completes the
// set. It relists only when that watch ends (no leader, a closed stream);
// a read that gets no answer is retried until ctx ends.
//
// Every failure is a *NotConvergedError: when ctx ends first it names the
// laggards, and its Err says what failed when a read could not be made
// (etcd unreachable, permission denied).
func (s *Store) WaitConverged(ctx context.Context, rev int64) error {
	w := &convergeWait{s: s, rev: rev, start: time.Now(), agents: map[string]AgentInfo{}, behind: map[string]bool{}}
	b := backoff.New(convergeRetryMin, convergeRetryMax)
	for {
		done, err := w.round(ctx)
		switch {
		case done:
			return nil
		case ctx.Err() != nil:
			return w.failed(w.lastErr)
		case !w.retryable(err):
			return w.failed(err)
		}
		w.lastErr = err
		s.log.Info("wait converged: retrying", "revision", rev, "err", err)
		if b.Wait(ctx) != nil {
			return w.failed(w.lastErr)
		}
	}
}

// convergeWait is one WaitConverged: the agents as last seen.
type convergeWait struct {
	s       *Store
	rev     int64
	start   time.Time
	agents  map[string]AgentInfo
	behind  map[string]bool // the keys of agents before rev or with skipped keys
	listed  bool            // agents holds a listing
	lastErr error           // the error that ended the previous round
}

// errWatchEnded marks a round ended by its watch: relist.
var errWatchEnded = errors.New("watch ended")

// round opens a watch on the agents' keys, lists them at R once etcd
// confirmed the watch, and follows the watch's events after R until the
// agents are all at w.rev (true), the watch ends or ctx ends. The watch
// starts from "now" rather than from R+1: one that starts at a past
// revision is served by etcd's unsynced-watcher loop, every 100 ms, while
// one from now is synced and sees every later event at once; listing after
// its creation leaves no gap between the two.
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
	clear(w.agents)
	clear(w.behind)
	w.listed = true
	for _, kv := range kvs {
		w.put(string(kv.Key), kv.Value, listRev)
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
				delete(w.agents, string(ev.Kv.Key))
				delete(w.behind, string(ev.Kv.Key))
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
			Err: fmt.Errorf("watch %s: not created within %s", prefix, w.s.opts.RequestTimeout)}
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

// put records an agent's status key, read at etcd revision readRev.
func (w *convergeWait) put(key string, value []byte, readRev int64) {
	a := agentInfo(key, strings.TrimPrefix(key, w.s.ks.AgentsPrefix()), value, w.rev, readRev)
	w.agents[key] = a
	if !a.Converged(0) {
		w.behind[key] = true
	} else {
		delete(w.behind, key)
	}
}

// converged reports whether some agent was seen and every agent seen is
// at rev or later and serves no refused value. With none, nothing
// confirmed the write: the wait goes on (an agent may start meanwhile).
func (w *convergeWait) converged() bool { return len(w.behind) == 0 && len(w.agents) > 0 }

// retryable tells the errors that another round may get past: a watch
// that ended, a read that got no answer.
func (w *convergeWait) retryable(err error) bool {
	var ue *UnreachableError
	return errors.Is(err, errWatchEnded) || errors.As(err, &ue) || isUnreachable(err)
}

// failed returns the *NotConvergedError of the wait, with cause.
func (w *convergeWait) failed(cause error) error {
	e := &NotConvergedError{Revision: w.rev, Waited: time.Since(w.start), Err: cause, Unknown: !w.listed}
	if w.listed && len(w.agents) == 0 {
		e.NoAgents = w.s.ks.AgentsPrefix()
	}
	for key := range w.behind {
		e.Lagging = append(e.Lagging, w.agents[key])
	}
	sort.Slice(e.Lagging, func(i, j int) bool { return e.Lagging[i].Node < e.Lagging[j].Node })
	return e
}

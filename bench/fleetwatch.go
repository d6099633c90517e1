package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// fanObs is one observer (a floor watcher or an agent) seeing revision
// rev at a moment.
type fanObs struct {
	slot int
	rev  int64
	at   time.Time
}

// floorWatchers are plain clientv3 watchers of the routing prefix in the
// bench, one client (one connection) each: the fan-out floor.
type floorWatchers struct {
	clients []*clientv3.Client
	hops    []string
	proxied []bool
	C       chan fanObs
	mu      sync.Mutex
	err     error
}

// startFloorWatchers opens one client and one watch per endpoint and
// waits until every watch is created.
func startFloorWatchers(ctx context.Context, endpoints, hops []string, proxied []bool, prefix string) (*floorWatchers, error) {
	w := &floorWatchers{hops: hops, proxied: proxied, C: make(chan fanObs, 1<<16)}
	for i, ep := range endpoints {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			w.close()
			return nil, fmt.Errorf("floor watcher %d at %s: %w", i, ep, err)
		}
		w.clients = append(w.clients, cli)
		wch := cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		first, ok := <-wch
		if !ok || !first.Created {
			w.close()
			return nil, fmt.Errorf("floor watcher %d at %s not created: %v", i, ep, first.Err())
		}
		go w.run(i, wch)
	}
	return w, nil
}

func (w *floorWatchers) run(slot int, wch clientv3.WatchChan) {
	for resp := range wch {
		now := time.Now()
		if err := resp.Err(); err != nil {
			w.fail(fmt.Errorf("floor watcher %d (via %s): %w", slot, w.hops[slot], err))
			continue
		}
		var rev int64
		for _, ev := range resp.Events {
			rev = max(rev, ev.Kv.ModRevision)
		}
		if rev > 0 {
			w.C <- fanObs{slot: slot, rev: rev, at: now}
		}
	}
}

func (w *floorWatchers) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// failed returns the first watch error, if any.
func (w *floorWatchers) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *floorWatchers) close() {
	for _, c := range w.clients {
		c.Close()
	}
}

// drain discards the observations queued on ch.
func drain(ch chan fanObs) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// collect reads ch until each of n slots has seen revision rev, and returns
// the moment each first did. It fails after timeout, naming how many slots
// still miss it.
func collect(ctx context.Context, ch chan fanObs, n int, rev int64, timeout time.Duration, what string) ([]time.Time, error) {
	seen := make([]time.Time, n)
	left := n
	t := time.NewTimer(timeout)
	defer t.Stop()
	for left > 0 {
		select {
		case o := <-ch:
			if o.rev >= rev && seen[o.slot].IsZero() {
				seen[o.slot] = o.at
				left--
			}
		case <-t.C:
			return seen, fmt.Errorf("%d of %d %s did not see revision %d within %v", left, n, what, rev, timeout)
		case <-ctx.Done():
			return seen, ctx.Err()
		}
	}
	return seen, nil
}

// statusTracker follows the agents' status keys (<root>/agents/<node>)
// with one watch in the bench: what `regionctl status` and
// --wait-converged read.
type statusTracker struct {
	mu      sync.Mutex
	nodes   map[string][]statusObs // the node's recent puts, oldest first
	events  int                    // puts and deletes seen
	changed chan struct{}          // closed and replaced on every event
	err     error
}

type statusObs struct {
	rev int64 // the table revision the agent reported
	at  time.Time
}

// startStatusTracker reads the agents' keys and watches them from there.
func startStatusTracker(ctx context.Context, cli *clientv3.Client, prefix string) (*statusTracker, error) {
	s := &statusTracker{nodes: map[string][]statusObs{}, changed: make(chan struct{})}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the agents' status keys: %w", err)
	}
	now := time.Now()
	for _, kv := range resp.Kvs {
		rev, _ := parseRevision(kv.Value)
		s.nodes[strings.TrimPrefix(string(kv.Key), prefix)] = []statusObs{{rev: rev, at: now}}
	}
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go s.run(wch, prefix)
	return s, nil
}

func (s *statusTracker) run(wch clientv3.WatchChan, prefix string) {
	for resp := range wch {
		now := time.Now()
		s.mu.Lock()
		if err := resp.Err(); err != nil && s.err == nil {
			s.err = fmt.Errorf("watch of the agents' status keys: %w", err)
		}
		for _, ev := range resp.Events {
			s.events++
			node := strings.TrimPrefix(string(ev.Kv.Key), prefix)
			if ev.Type == clientv3.EventTypeDelete {
				delete(s.nodes, node)
				continue
			}
			rev, _ := parseRevision(ev.Kv.Value)
			h := append(s.nodes[node], statusObs{rev: rev, at: now})
			if len(h) > 32 {
				h = h[len(h)-32:]
			}
			s.nodes[node] = h
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// eventCount returns how many status puts and deletes were seen so far.
func (s *statusTracker) eventCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events
}

// waitAll waits until exactly n agents have a status key and each reported
// revision rev or later, and returns when the last of them first did.
func (s *statusTracker) waitAll(ctx context.Context, n int, rev int64, timeout time.Duration) (time.Time, error) {
	return s.wait(ctx, timeout, func() (time.Time, bool) {
		if len(s.nodes) != n {
			return time.Time{}, false
		}
		var last time.Time
		for _, h := range s.nodes {
			i := 0
			for i < len(h) && h[i].rev < rev {
				i++
			}
			if i == len(h) {
				return time.Time{}, false
			}
			if h[i].at.After(last) {
				last = h[i].at
			}
		}
		return last, true
	}, fmt.Sprintf("%d status keys at revision %d", n, rev))
}

// waitCount waits until exactly n agents have a status key.
func (s *statusTracker) waitCount(ctx context.Context, n int, timeout time.Duration) error {
	_, err := s.wait(ctx, timeout, func() (time.Time, bool) { return time.Time{}, len(s.nodes) == n },
		fmt.Sprintf("exactly %d status keys", n))
	return err
}

func (s *statusTracker) wait(ctx context.Context, timeout time.Duration, cond func() (time.Time, bool), what string) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		at, ok := cond()
		ch, err, have := s.changed, s.err, len(s.nodes)
		s.mu.Unlock()
		if ok {
			return at, nil
		}
		if err != nil {
			return time.Time{}, err
		}
		select {
		case <-ch:
		case <-t.C:
			return time.Time{}, fmt.Errorf("no %s within %v (%d keys)", what, timeout, have)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

package faultsuite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// recEvent is one event of the routing prefix, as the recorder saw it.
type recEvent struct {
	rev     int64
	key     string // relative to the routing prefix
	value   []byte
	deleted bool
}

// recorder is the suite's reference: an independent watch of the routing
// prefix from the initial list on, which keeps every event, so that the
// state at any revision since can be rebuilt (etcd's own history is
// compacted every 200 ms). The compactor never compacts past the
// recorder's revision, so its watch always resumes.
type recorder struct {
	prefix    string
	clusterID uint64

	mu       sync.Mutex
	initial  map[string]routing.KV
	startRev int64
	events   []recEvent
	lastRev  int64 // revision of the last event
	heard    int64 // newest header revision heard: every event up to it is recorded
	dups     int   // events dropped as replays
	err      error
	changed  chan struct{}
}

// startRecorder lists the prefix and watches it until the test ends.
func startRecorder(t *testing.T, cli *clientv3.Client, prefix string) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("recorder: list %s: %v", prefix, err)
	}
	r := &recorder{prefix: prefix, initial: map[string]routing.KV{}, startRev: resp.Header.Revision,
		lastRev: resp.Header.Revision, heard: resp.Header.Revision, clusterID: resp.Header.ClusterId, changed: make(chan struct{})}
	for _, kv := range resp.Kvs {
		k := string(kv.Key[len(prefix):])
		r.initial[k] = routing.KV{Key: k, Value: kv.Value, ModRevision: kv.ModRevision}
	}
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx, cli) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// run watches from the last recorded revision + 1, again after every
// error (a killed member, a partition: WithRequireLeader ends the watch).
func (r *recorder) run(ctx context.Context, cli *clientv3.Client) {
	for ctx.Err() == nil && r.Err() == nil {
		r.watchOnce(ctx, cli)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// watchOnce watches from the last heard revision + 1 until the watch ends,
// asking for a progress notification every 100 ms so that Heard follows
// the cluster's revision between changes of the prefix.
func (r *recorder) watchOnce(ctx context.Context, cli *clientv3.Client) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	r.mu.Lock()
	from := r.heard + 1
	r.mu.Unlock()
	wch := cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			rctx, rcancel := context.WithTimeout(wctx, time.Second)
			cli.RequestProgress(rctx)
			rcancel()
		case wr, ok := <-wch:
			if !ok {
				return
			}
			if err := wr.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) || wr.CompactRevision > 0 {
					r.fail(fmt.Errorf("recorder watch compacted at %d (from %d): the compactor passed the recorder", wr.CompactRevision, from))
				}
				return
			}
			r.add(wr)
		}
	}
}

func (r *recorder) add(wr clientv3.WatchResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range wr.Events {
		rev := ev.Kv.ModRevision
		if rev <= r.heard {
			r.dups++ // every event up to heard is recorded: a replay
			continue
		}
		if rev < r.lastRev {
			r.err = cmp.Or(r.err, fmt.Errorf("recorder: event at revision %d after one at %d", rev, r.lastRev))
		}
		e := recEvent{rev: rev, key: string(ev.Kv.Key[len(r.prefix):]), deleted: ev.Type == clientv3.EventTypeDelete}
		if !e.deleted {
			e.value = append([]byte(nil), ev.Kv.Value...)
		}
		r.events = append(r.events, e)
		r.lastRev = rev
	}
	// An event response's header may be ahead of events still to come (a
	// watch catching up sends history in batches, each with the current
	// revision): only a progress notification vouches for its header.
	r.heard = max(r.heard, r.lastRev)
	if wr.IsProgressNotify() {
		r.heard = max(r.heard, wr.Header.Revision)
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// Err returns the recorder's failure, if any.
func (r *recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// dupCount returns how many replayed events were dropped.
func (r *recorder) dupCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dups
}

// Heard returns the revision up to which every event is recorded.
func (r *recorder) Heard() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heard
}

// Events returns how many events were recorded.
func (r *recorder) Events() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// WaitHeard waits until the recorder has heard revision rev.
func (r *recorder) WaitHeard(ctx context.Context, rev int64) error {
	for {
		r.mu.Lock()
		heard, ch, err := r.heard, r.changed, r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
		if heard >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("recorder: waiting for revision %d (heard %d): %w", rev, heard, ctx.Err())
		}
	}
}

// StateAt returns the routing prefix's keys at revision rev, which must be
// at or after the initial list and already heard.
func (r *recorder) StateAt(rev int64) ([]routing.KV, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev < r.startRev || rev > r.heard {
		return nil, fmt.Errorf("recorder: revision %d outside the recorded span %d..%d", rev, r.startRev, r.heard)
	}
	state := make(map[string]routing.KV, len(r.initial))
	for k, kv := range r.initial {
		state[k] = kv
	}
	for _, e := range r.events {
		if e.rev > rev {
			break
		}
		if e.deleted {
			delete(state, e.key)
		} else {
			state[e.key] = routing.KV{Key: e.key, Value: e.value, ModRevision: e.rev}
		}
	}
	kvs := make([]routing.KV, 0, len(state))
	for _, kv := range state {
		kvs = append(kvs, kv)
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].Key < kvs[j].Key })
	return kvs, nil
}

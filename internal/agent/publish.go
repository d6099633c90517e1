package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/regiond/regiond/internal/backoff"
	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// publisher keeps <root>/agents/<node> equal to the agent's status, bound
// to a session lease, written at most once per second.
type publisher struct {
	cli     *clientv3.Client
	key     string
	node    string
	version string
	ttl     time.Duration
	mirror  *watch.Mirror
	log     *slog.Logger
}

func (p *publisher) status() routing.AgentStatus {
	st := p.mirror.Status()
	s := routing.AgentStatus{Node: p.node, Revision: st.Revision, Epoch: st.Epoch, Connected: st.Connected, Version: p.version}
	if !st.SyncedAt.IsZero() {
		s.SyncedAt = st.SyncedAt.UTC().Format(time.RFC3339)
	}
	return s
}

// run publishes until ctx is done, then revokes the lease so the key goes.
func (p *publisher) run(ctx context.Context) {
	bo := backoff.Default()
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(p.cli, concurrency.WithTTL(int(p.ttl/time.Second)), concurrency.WithContext(ctx))
		if err != nil {
			p.log.Warn("agent status: no lease; retrying", "err", err)
			if bo.Wait(ctx) != nil {
				return
			}
			continue
		}
		bo.Reset()
		p.publish(ctx, sess)
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		p.cli.Revoke(rctx, sess.Lease()) // key goes at once on shutdown
		cancel()
		sess.Orphan()
	}
}

// statusRefresh is how often a status that only moved with progress
// notifications (revision, synced_at) is re-put: every agent re-putting on
// each notification would bump the revision for all the others, a fleet-wide
// feedback loop of writes.
const statusRefresh = time.Minute

// publish writes the status under one session until it ends or ctx is done:
// at once (at most once a second) when the epoch, the connection or the
// content of the table changed, otherwise every statusRefresh.
func (p *publisher) publish(ctx context.Context, sess *concurrency.Session) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last routing.AgentStatus
	var lastChange int64
	var lastAt time.Time
	written := false
	for {
		st, change := p.status(), p.mirror.Status().ChangeRevision
		significant := !written || st.Epoch != last.Epoch || st.Connected != last.Connected || change != lastChange
		due := significant || (st != last && time.Since(lastAt) >= statusRefresh)
		if due && time.Since(lastAt) >= time.Second {
			b, _ := json.Marshal(st)
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := p.cli.Put(pctx, p.key, string(b), clientv3.WithLease(sess.Lease()))
			cancel()
			lastAt = time.Now()
			if err == nil {
				last, lastChange, written = st, change, true
			} else if ctx.Err() == nil {
				p.log.Warn("agent status: put failed", "key", p.key, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			p.log.Warn("agent status: lease lost; starting a new session")
			return
		case <-p.mirror.Changed():
			// Let the change settle first: the status put (an etcd write)
			// then stays off the path that serves and writes the change.
			select {
			case <-ctx.Done():
				return
			case <-time.After(statusSettle):
			}
		case <-tick.C:
		}
	}
}

// statusSettle is how long the status waits after a table change.
const statusSettle = 50 * time.Millisecond

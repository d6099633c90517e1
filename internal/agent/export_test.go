package agent

import (
	"time"

	"github.com/regiond/regiond/internal/backoff"
)

// SetStatusClock makes the agent's status publisher tick on tick and read
// the time from now; call it before Run.
func SetStatusClock(a *Agent, tick <-chan time.Time, now func() time.Time) {
	a.statusClock.newTicker = func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }
	a.statusClock.now = now
}

// SetStatusObserver makes the agent's status publisher call f in its
// goroutine at each of its waits, with the wait's length or time left
// (statusClock.observe lists them); f may hold the publisher there. Call
// it before Run.
func SetStatusObserver(a *Agent, f func(what string, d time.Duration)) { a.statusClock.observe = f }

// SetBeforeStatusPut makes the agent's status publisher call f before each
// put, with the instant it decided on the put, on the clock that spaces
// puts for changes (statusSpacing); call it before Run.
func SetBeforeStatusPut(a *Agent, f func(at time.Time)) { a.beforeStatusPut = f }

// StatusPutPending reports whether a change waits for the status
// publisher's next put.
func StatusPutPending(a *Agent) bool {
	p := a.pub.Load()
	return p != nil && len(p.kick) > 0
}

// SetSnapshotRefresh makes the agent's snapshot writer rewrite the file at
// least every d; call it before Run.
func SetSnapshotRefresh(a *Agent, d time.Duration) { a.snapshotRefresh = d }

// SetStatusQuietSpacing makes the agent's status publisher put changes
// that did not move the epoch at least d apart; call it before Run.
func SetStatusQuietSpacing(a *Agent, d time.Duration) { a.statusQuietSpacing = d }

// SetNodeRecordRetry makes the agent's status publisher try its node
// record again d after etcd refused it (statusRefresh otherwise); call it
// before Run.
func SetNodeRecordRetry(a *Agent, d time.Duration) { a.recordRetry = d }

// SetStatusRetry makes the agent's status publisher wait from initial up
// to max between failed lease grants (unless etcd answers the mirror
// again); call it before Run.
func SetStatusRetry(a *Agent, initial, max time.Duration) { a.statusRetry = backoff.New(initial, max) }

// StatusSpacing is statusSpacing, and StatusQuietSpacing
// statusQuietSpacing, for tests.
const (
	StatusSpacing      = statusSpacing
	StatusQuietSpacing = statusQuietSpacing
)

// SnapshotSettleMax is snapshotSettleMax: how long a status put for a
// change waits at most for the snapshot writer.
const SnapshotSettleMax = snapshotSettleMax

// EtcdUser is a's etcd user, as its status page names it.
func EtcdUser(a *Agent) string { return a.etcdUser() }

// SetSnapshotCopyEvery sets how often a's snapshot copy is refreshed.
func SetSnapshotCopyEvery(a *Agent, d time.Duration) { a.copyEvery = d }

// FailAPIListener closes the agent's TCP listener under its API server, as
// a failure would: Run returns that server's error.
func FailAPIListener(a *Agent) error { return a.tcpLn.Listener.Close() }

// StatusClientConnected reports whether the status publisher's client (the
// status key's: --status-endpoints' when set) has a ready connection; false
// before the publisher starts.
func StatusClientConnected(a *Agent) bool {
	p := a.pub.Load()
	return p != nil && connected(p.cli)
}

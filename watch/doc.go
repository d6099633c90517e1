// Package watch mirrors the routing prefix of etcd into an immutable
// routing.Table held in an atomic pointer, with one watch.
//
// The mirror lists the prefix at revision R (paged), watches from R+1 with
// WithRequireLeader, WithProgressNotify and WithCreatedNotify, applies each
// watch response as one batch, and drops events at or below the applied
// revision. Every change compiles a new table (last good value per key) and
// swaps it in; readers never lock.
//
// A Go router can embed it in-process (Example is a whole program):
//
//	m, err := watch.New(watch.Config{Client: cli, Prefix: "/regiond/v1/routing/"})
//	if err != nil { … }
//	go func() { done <- m.Run(ctx) }()
//	if err := m.WaitReady(ctx); err != nil { … }
//	d, err := m.Table().Resolve(r.Header.Get("CF-IPCountry"), r.URL.Query().Get("key"), time.Now())
//
// The contract of an embedding: every method of a Mirror is safe from any
// goroutine, but Run runs once at a time (a second returns an error).
// Call Table for each request and never keep the table: a kept table
// serves its old state. Table is nil before the first sync, and Resolve on
// it returns routing.ErrNoTable (routing.ErrNoRoute is a decision: a
// residency rule or drained pools, never to be answered past). Nothing a
// table returns may be modified (routing.Table). One Mirror per
// Registerer: give each of several its own label
// (prometheus.WrapRegistererWith). Config.NewBackoff is for this module's
// tests (its type is internal): leave it nil. Refused values are logged
// (a warning naming the key and why) as the metrics count them.
//
// # Relist or reopen
//
// Besides the first list and the retries of a failed one, only these
// relist (list again and replace the state; metric
// regiond_watch_resyncs_total{reason}): a compaction past the applied
// revision (at once, unless within a second of the list before it: then,
// as every other relist, after the backoff, so that a history compacted
// as fast as it is listed is not listed in a loop), an event out of order
// or at or below a progress notification's revision, etcd's revision
// below the applied one (a restored cluster), an answer from another
// cluster than the list's, and
// another history at the applied revision: a watch opened again after one
// ended, or in place of a silent one, is kept only once a keys-only read
// of the prefix at the applied revision finds the state's key count and
// newest keys (a cluster restored from an older backup and written past
// that revision since); and a watch that cannot catch up from the applied
// revision (below: Expired tokens behind the proxy).
//
// Everything else reopens: a new watch from applied+1, no list, and history
// replays whatever the old watch missed (regiond_watch_reopens_total
// {reason}): a closed channel (also one whose final error was lost), a
// watch error, "no leader" (the next stream goes to the next endpoint:
// clientv3 round-robins them), a lost connection, a silent watch that a
// probe finds stuck or cannot check. A compaction found while reopening
// relists. Reopens are immediate; only attempts that keep failing back off
// (after one immediate retry, or two per other endpoint: 800 ms → 30 s with
// jitter; a watch that lasted under a second counts as a failure). A
// creation refused or not answered within RequestTimeout is counted in
// regiond_watch_create_failures_total{reason}; one refused to the client's
// user is permission-denied, logged as an error. One refused for a login
// token the member does not know ("invalid auth token") is an error that
// the next watch ends: with etcd's simple tokens, clientv3 logs in before
// each watch stream it opens, and a member that has not yet applied that
// login (it went to another member) refuses the token at once (etcd issue
// 18437), as does a member restarted since it. The next watch logs in
// again; the refusal is logged at INFO the first time since a watch was
// last created, at WARN when it repeats (TestUnknownLoginToken).
//
// # What detects what
//
//   - Connected is true exactly while a watch whose creation was answered
//     follows etcd: it is set when the creation is answered (by etcd, or by
//     the grpc-proxy joining the watch to one it has), never by a list, and
//     cleared when that watch ends and no successor is created.
//   - A watch ended by etcd, the proxy or clientv3 (error, cancel, closed
//     channel, compaction, no leader) is seen on its channel, at once.
//   - A connection that is down: every ProgressInterval the mirror checks
//     the client's gRPC connection; when no endpoint is connected (the
//     proxy or member went away, or gRPC keepalive, DialKeepAliveTime, found
//     the connection dead) the watch is dropped and reopened once a
//     connection is back. clientv3 alone would keep the channel open and
//     resume it silently.
//   - A partitioned member: WithRequireLeader makes etcd refuse or end the
//     watch ("no leader") and fail the probe's read at once.
//   - A silent watch: every ProgressInterval the mirror sends a progress
//     request on the watch's stream. Etcd answers it directly once its
//     revision is past the watch's start; that answer advances the revision
//     of an idle table and SyncedAt. etcd's grpc-proxy (v3.7.3) drops
//     progress requests ("not supported request type by gRPC proxy"); once
//     a probe shows etcd past the start revision for a whole silence period,
//     the mirror stops sending them until a progress notification arrives.
//     After three intervals without any answer, a probe: one linearizable
//     Range of the prefix, keys only, WithMinModRev(applied+1), which the
//     proxy forwards and etcd answers from its in-memory index. No key
//     newer than the applied revision and as many keys as the state means
//     etcd's prefix equals the state: the table is current at etcd's
//     revision, which it takes (and SyncedAt moves), and the watch is kept.
//     A key newer than the applied revision or another count means the
//     watch missed something, and a failed probe means etcd could not
//     confirm: a new watch is created from applied+1 before the old one is
//     cancelled (make before break), so Connected stays true across a
//     healthy reopen. If that creation is not answered within
//     RequestTimeout, the mirror is disconnected and retries.
//
// # SyncedAt
//
// Status.SyncedAt is when the table was last confirmed current against
// etcd: by a list, by applied events, by a progress notification, or by a
// probe that found the prefix unchanged. Directly against etcd, progress
// requests answered every ProgressInterval keep it within an interval of
// now whenever anything in the cluster is written (on a fully idle cluster,
// the probes do, every three intervals). Behind the grpc-proxy, progress
// requests are dropped: the probes keep it within three intervals, and
// etcd's own progress notifications, which the proxy forwards to watchers
// that asked for them (WithProgressNotify; proxy watcher.go and
// watch_broadcast.go), every ~10 minutes (--watch-progress-notify-interval)
// keep it within that even without probes. Where only the revision moves
// (a notification, a probe, a list that found the same state), SyncedAt
// is set before the table's revision, so a Status showing the later
// revision also shows the later SyncedAt (a CI run read the two between
// the stores once). Where the state changed, it is set once the table
// holding the change is served, also when a progress notification came
// behind the change's events in one drain.
//
// # Dead broadcasts behind the proxy
//
// The proxy serves all its watchers of one key range from one watch of its
// own on etcd (a broadcast). When that watch ends (its member went away
// and the history it needed to resume was compacted), the proxy tells its
// watchers of the compaction but keeps the broadcast as long as any
// watcher is left in it, and joins new watchers of the same range to it:
// created, then silent for good (every agent of a fleet relisting at once
// races into it). A probe finding the prefix ahead of such a watch
// therefore also switches the watch to the other of two ranges that hold
// the same keys, [prefix, end) and [prefix+"\x00", end), which the proxy
// serves from another broadcast (TestProxyDeadBroadcast). The bare prefix,
// the one key between them, is no key of the state: lists, probes and
// watches skip it.
//
// # Expired tokens behind the proxy
//
// With authentication on, the proxy opens all its upstream watches on one
// gRPC stream carrying the token of the watcher that opened it, and etcd
// checks each new upstream watch against that token: once it has expired
// (--auth-token-ttl after its last use; the watcher itself uses it for
// nothing more), every new one is refused, and the proxy never says so
// (etcd issue 19296). A watch from at or past the revision of a broadcast
// the proxy has is joined to it and needs none; one from an applied
// revision behind it (a mirror cut off or paused while changes were made)
// needs one. So the second creation in a row not answered on a
// connection up all along (one alone is as likely a loaded etcd, which a
// relist would load more) is followed by a probe: changes past the
// applied revision relist (ReasonUncreated), and the next watch starts at
// etcd's revision; none, and it starts there at once. The count starts
// over after the probe, and at a creation that fails otherwise. The broadcast it is joined to may itself
// be a refused one (it counts a response, so the proxy joins watchers to
// it, and keeps it while any is left): a watch opened since one was found
// behind or not created that delivers nothing and is found behind relists
// too (ReasonBehind), and until a watch delivers, silent ones are probed
// at the next progress tick (TestProxyExpiredTokenStream).
//
// One limit of the proxy: it does not honour WithRequireLeader for the
// watches it forwards (v3.7.3 reads the metadata from the outgoing context of
// the server stream), and its own upstream watches do not require a
// leader. Behind a proxy whose upstream member is cut off from the
// majority, the probes fail (the linearizable read needs a leader), so the
// mirror keeps replacing its watch and SyncedAt stops; the table keeps
// serving, and /readyz reports it once it is older than --max-stale.
package watch

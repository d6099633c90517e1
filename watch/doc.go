// Package watch mirrors the routing prefix of etcd into an immutable
// routing.Table held in an atomic pointer, with one watch.
//
// The mirror lists the prefix at revision R (paged), watches from R+1 with
// WithRequireLeader and progress requests, applies each watch response as
// one batch, drops events at or below the applied revision, and relists and
// replaces its state on compaction, on a channel that closes, on a watch
// that falls silent, or on a revision that goes backwards. A watch refused
// or ended with "no leader" is reopened from the applied revision first, so
// clientv3 moves it to another endpoint. A silent watch on an idle cluster
// is kept when a linearizable read shows etcd's revision unchanged (etcd
// answers no progress request while a watch's start revision is in the
// future). Failures back off with capped jitter (800 ms → 30 s). Every change compiles a new table
// (last good value per key) and swaps it in; readers never lock.
//
// A Go router can embed it in-process:
//
//	m, err := watch.New(watch.Config{Client: cli, Prefix: "/regiond/v1/routing/"})
//	if err != nil { … }
//	go m.Run(ctx)
//	if err := m.WaitReady(ctx); err != nil { … }
//	d, err := m.Table().Resolve(r.Header.Get("CF-IPCountry"), r.URL.Query().Get("key"), time.Now())
package watch

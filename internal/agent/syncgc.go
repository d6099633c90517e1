package agent

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
)

// syncGCPercent is the GOGC the agent runs with until its first table is
// served, unless GOGC is set in its environment: the first list holds
// etcd's whole response beside the table compiled from it, and collecting
// twice as often then lowers the process's peak memory, at the cost of a
// slower first sync (bench/README has the figures). Later changes are
// small and run with the usual setting. An agent that never syncs (etcd
// away since its start) keeps the lower setting while it serves its
// snapshot.
const syncGCPercent = 50

var syncGC struct {
	sync.Mutex
	n    int // agents of this process still syncing
	prev int // the setting to restore when the last of them is done
}

// lowerGCUntil runs with syncGCPercent until ready returns. Agents of one
// process (tests) share the setting: the first lowers it, the last
// restores it.
func lowerGCUntil(ctx context.Context, ready func(context.Context) error) {
	if os.Getenv("GOGC") != "" {
		return
	}
	syncGC.Lock()
	if syncGC.n == 0 {
		syncGC.prev = debug.SetGCPercent(syncGCPercent)
	}
	syncGC.n++
	syncGC.Unlock()
	defer func() {
		syncGC.Lock()
		defer syncGC.Unlock()
		if syncGC.n--; syncGC.n == 0 {
			debug.SetGCPercent(syncGC.prev)
		}
	}()
	ready(ctx)
}

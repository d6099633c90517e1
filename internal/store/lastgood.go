package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/regiond/regiond/internal/lastgood"
	"github.com/regiond/regiond/routing"
)

// maxLastGoodKeys bounds LastGood's walks, as the agents' mirror bounds
// its own.
const maxLastGoodKeys = 100

// LastGood reads, for each key of st whose stored value is refused (a hand
// edit the agents skip, serving the value before it), that last good value
// from etcd's history, as the agents' mirror does after a relist
// (lastgood.Walk). Compiled with them (routing.CompileOptions.Earlier), st
// decides as the agents do. notes says, for each refused key, which value
// the decision uses. A read that fails is a note too, and ends the walks:
// the decision goes on without the values not read, as the agents' does.
func (s *Store) LastGood(ctx context.Context, st *State) (earlier map[string]routing.KV, notes []string) {
	why := make(map[string]string, len(st.Skipped))
	for _, sk := range st.Skipped {
		why[sk.Key] = strings.TrimPrefix(sk.Error, sk.Key+": ")
	}
	looked := 0
	var failed error // the first read that failed ends the walks, as the agents' mirror's
	for _, kv := range st.KVs {
		if _, skipped := why[kv.Key]; !skipped || !lastgood.Refused(kv) {
			continue
		}
		if looked == maxLastGoodKeys || failed != nil {
			notes = append(notes, fmt.Sprintf("%s: refused (%s); not looked up (over %d refused keys, or a read failed): decided as absent", kv.Key, why[kv.Key], maxLastGoodKeys))
			continue
		}
		looked++
		e, out, err := lastgood.Walk(ctx, s.cli, s.ks.RoutingKey(kv.Key), kv, s.opts.RequestTimeout)
		head := fmt.Sprintf("%s: refused (%s);", kv.Key, why[kv.Key])
		switch out {
		case lastgood.Found:
			if earlier == nil {
				earlier = map[string]routing.KV{}
			}
			earlier[kv.Key] = e
			notes = append(notes, fmt.Sprintf("%s decided with its last good value, of revision %d, as the agents decide", head, e.ModRevision))
		case lastgood.None:
			notes = append(notes, fmt.Sprintf("%s it has no earlier good value, so it is decided as absent, as the agents decide", head))
		case lastgood.Exhausted:
			notes = append(notes, fmt.Sprintf("%s none of its last %d versions is good: decided as absent (an agent that followed each write may still serve an older one)", head, lastgood.MaxSteps))
		case lastgood.Compacted:
			notes = append(notes, fmt.Sprintf("%s its last good value is compacted out of etcd's history: decided as absent, while the agents that saw it written serve that value", head))
		case lastgood.Failed:
			failed = err
			notes = append(notes, fmt.Sprintf("%s its last good value could not be read (%v): decided as absent (the agents that saw it written serve it)", head, err))
		}
	}
	return earlier, notes
}

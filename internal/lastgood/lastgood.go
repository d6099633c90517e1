// Package lastgood reads a refused key's last good value from etcd's
// history: the newest value of the key that decodes, written before its
// current one to the same incarnation of the key (since its last create).
// An agent that followed every event kept serving that value; the agents'
// mirror reads it after a relist or a restart, and regionctl before it
// decides as the agents do (resolve, export kv), so all of them serve the
// same.
package lastgood

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// MaxSteps bounds the earlier versions read per key.
const MaxSteps = 16

// Outcome says how a walk ended.
type Outcome int

// The outcomes of Walk.
const (
	// Found: Walk returned the last good value.
	Found Outcome = iota
	// None: the incarnation has no earlier value, or none of its
	// earlier values decodes.
	None
	// Exhausted: none of the MaxSteps versions read decodes; older ones
	// were not read.
	Exhausted
	// Compacted: the history to read is compacted away.
	Compacted
	// Failed: a read failed, or got no answer within its timeout (the
	// error is then a context.DeadlineExceeded).
	Failed
)

// Walk reads kv's key (abs, its full name) back through etcd's history
// from the write before kv, within kv's incarnation, to the first value
// that decodes, each read bounded by timeout. kv is relative to the
// routing prefix, as routing.KV keys are; the value returned is too.
func Walk(ctx context.Context, cli clientv3.KV, abs string, kv routing.KV, timeout time.Duration) (routing.KV, Outcome, error) {
	if kv.Version <= 1 {
		return routing.KV{}, None, nil // the incarnation's first value
	}
	at := kv.ModRevision - 1
	for range MaxSteps {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := cli.Get(rctx, abs, clientv3.WithRev(at))
		if err != nil && rctx.Err() == context.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err) // no answer within timeout
		}
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			return routing.KV{}, Compacted, nil
		case err != nil:
			return routing.KV{}, Failed, fmt.Errorf("read %s at revision %d: %w", abs, at, err)
		case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != kv.CreateRevision:
			return routing.KV{}, None, nil
		}
		y := resp.Kvs[0]
		e := routing.KV{Key: kv.Key, Value: y.Value, ModRevision: y.ModRevision, CreateRevision: y.CreateRevision, Version: y.Version}
		if _, err := routing.DecodeValue(e.Key, e.Value); err == nil {
			return e, Found, nil
		}
		if y.Version <= 1 {
			return routing.KV{}, None, nil
		}
		at = y.ModRevision - 1
	}
	return routing.KV{}, Exhausted, nil
}

// Refused reports whether kv is a key whose refused value may have a last
// good one: not a health key (health values are never decoded), in the
// key grammar, and refused for its own value (not, as an override whose
// route is missing, for another key's).
func Refused(kv routing.KV) bool {
	k, err := routing.ParseKey(kv.Key)
	if err != nil || k.Kind == routing.KindHealth {
		return false
	}
	_, err = routing.DecodeValue(kv.Key, kv.Value)
	return err != nil
}

package faultsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regiond/regiond/routing"
)

// refs compiles and caches the reference table at each revision, from the
// recorder's history.
type refs struct {
	rec *recorder
	mu  sync.Mutex
	at  map[int64]*routing.Table
}

// table returns the reference at rev: a fresh compile (no previous table,
// so no last good value) of the state at rev, waiting (bounded) until the
// recorder has heard rev.
func (r *refs) table(ctx context.Context, rev int64, stale bool) (*routing.Table, error) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.rec.WaitHeard(wctx, rev); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.at[rev]; ok && !stale {
		return t, nil
	}
	kvs, err := r.rec.StateAt(rev)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	t := routing.Compile(rev, kvs, nil, routing.CompileOptions{Now: now, Start: now, Grace: time.Hour,
		ClusterID: r.rec.clusterID, Stale: stale})
	if !stale {
		r.at[rev] = t
	}
	return t, nil
}

// checker asks agents about decisions and tables while the suite runs and
// compares every answer with the reference at the answer's revision.
type checker struct {
	refs *refs

	resolves, noRoutes, tables, restarts atomic.Int64
	maxLag                               atomic.Int64 // revisions behind the recorder, at a sample

	mu   sync.Mutex
	errs []string
}

func (c *checker) failf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) < 20 {
		c.errs = append(c.errs, fmt.Sprintf(format, args...))
	}
}

// Errs returns the failures found so far.
func (c *checker) Errs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.errs)
}

// watchAgent checks one agent until ctx ends: every few milliseconds a
// decision (and every 20th time the whole table) must equal the
// reference, and the revision must never go backwards.
func (c *checker) watchAgent(ctx context.Context, a *agentProc, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	gen, last := 0, int64(0)
	for i := 0; ctx.Err() == nil; i++ {
		up, g := a.Running()
		if !up {
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		if g != gen {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := a.waitUp(wctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					c.failf("%s incarnation %d: %v", a.name, g, err)
				}
				return
			}
			gen, last = g, a.Floor()
			c.restarts.Add(1)
		}
		rev, err := c.checkOnce(ctx, a, rng, i%20 == 0)
		if err != nil {
			if up2, g2 := a.Running(); up2 && g2 == gen && ctx.Err() == nil {
				c.failf("%s: %v", a.name, err)
			}
			continue
		}
		if rev < last {
			c.failf("%s incarnation %d: revision went back from %d to %d", a.name, gen, last, rev)
		}
		last = max(last, rev)
		c.maxLag.Store(max(c.maxLag.Load(), c.refs.rec.Heard()-rev))
		sleep(ctx, time.Duration(10+rng.IntN(20))*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// checkOnce asks a for one decision, or its whole table, and compares the
// answer with the reference; it returns the answer's revision.
func (c *checker) checkOnce(ctx context.Context, a *agentProc, rng *rand.Rand, table bool) (int64, error) {
	if table {
		return c.checkTable(ctx, a)
	}
	country := checkCountries[rng.IntN(len(checkCountries))]
	key := fmt.Sprintf("viewer-%d", rng.IntN(5000))
	code, body, err := a.get(ctx, "/v1/resolve?country="+url.QueryEscape(country)+"&key="+key)
	if err != nil {
		return 0, fmt.Errorf("resolve %q: %w", country, err)
	}
	if noTable(code, body) {
		return 0, nil
	}
	if rev, ok := noPools(code, body); ok {
		// A table without pools answers no_table, naming its revision:
		// the reference there must have none either.
		ref, err := c.refs.table(ctx, rev, false)
		if err != nil {
			return rev, fmt.Errorf("reference at %d: %w", rev, err)
		}
		if n := ref.NumPools(); n > 0 {
			return rev, fmt.Errorf("resolve %q at %d: 503 %s, the reference has %d pools", country, rev, body, n)
		}
		return rev, nil
	}
	c.resolves.Add(1)
	var d routing.Decision
	if err := json.Unmarshal(body, &d); err != nil {
		return 0, fmt.Errorf("resolve %q: %d %s: %v", country, code, body, err)
	}
	if code != http.StatusOK && code != http.StatusServiceUnavailable {
		return d.Revision, fmt.Errorf("resolve %q: status %d: %s", country, code, body)
	}
	ref, err := c.refs.table(ctx, d.Revision, false)
	if err != nil {
		return d.Revision, fmt.Errorf("reference at %d: %w", d.Revision, err)
	}
	want, werr := ref.Resolve(country, key, time.Now())
	switch {
	case code == http.StatusServiceUnavailable:
		c.noRoutes.Add(1)
		if werr == nil {
			return d.Revision, fmt.Errorf("resolve %q at %d: 503 %s, the reference serves %s", country, d.Revision, body, want.Pool)
		}
	case werr != nil:
		return d.Revision, fmt.Errorf("resolve %q at %d: 200 %s, the reference says NoRoute %v", country, d.Revision, d.Pool, want.Degraded)
	case d.Pool != want.Pool && !randomPick(ref, country, key, d.Pool):
		return d.Revision, fmt.Errorf("resolve %q key %s at %d: %s via %s, the reference %s via %s", country, key, d.Revision, d.Pool, d.Route, want.Pool, want.Route)
	}
	return d.Revision, nil
}

// noTable reports whether an answer is the 503 of an agent that has no
// table yet (started without a snapshot, not yet synced): a valid answer.
func noTable(code int, body []byte) bool {
	return code == http.StatusServiceUnavailable && bytes.Contains(body, []byte("no routing table loaded yet"))
}

// noPools reports whether an answer is the 503 no_table of an agent whose
// table has no pools, and that table's revision.
func noPools(code int, body []byte) (int64, bool) {
	var e struct {
		Code     string `json:"code"`
		Revision int64  `json:"revision"`
	}
	if code != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Code != "no_table" || e.Revision == 0 {
		return 0, false
	}
	return e.Revision, true
}

// randomPick reports whether pool is one the reference could pick at
// random for country (a route with affinity random).
func randomPick(ref *routing.Table, country, key, pool string) bool {
	ex := ref.Explain(country, key, time.Now())
	for _, r := range ex.Routes {
		if !r.Chosen {
			continue
		}
		if rt, ok := ref.Route(r.Route); !ok || rt.Affinity != "random" {
			return false
		}
		for _, p := range r.Pools {
			if p.Pool == pool && p.Eligible {
				return true
			}
		}
	}
	return false
}

// checkTable compares a's whole table JSON with the reference rendered at
// the same written_at, synced_at and staleness: byte for byte.
func (c *checker) checkTable(ctx context.Context, a *agentProc) (int64, error) {
	code, body, err := a.get(ctx, "/v1/table")
	if err == nil && noTable(code, body) {
		return 0, nil
	}
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("table: %d %v", code, err)
	}
	var hdr struct {
		Revision  int64  `json:"revision"`
		WrittenAt string `json:"written_at"`
		SyncedAt  string `json:"synced_at"`
		Stale     bool   `json:"stale"`
	}
	if err := json.Unmarshal(body, &hdr); err != nil {
		return 0, fmt.Errorf("table: %v", err)
	}
	c.tables.Add(1)
	return hdr.Revision, c.compareTable(ctx, a.name, body, hdr.Revision, hdr.WrittenAt, hdr.SyncedAt, hdr.Stale)
}

// compareTable compares a table JSON with the reference at rev.
func (c *checker) compareTable(ctx context.Context, name string, body []byte, rev int64, writtenAt, syncedAt string, stale bool) error {
	at, err := time.Parse(time.RFC3339Nano, writtenAt)
	if err != nil {
		return fmt.Errorf("table at %d: written_at %q: %v", rev, writtenAt, err)
	}
	var synced time.Time
	if syncedAt != "" {
		if synced, err = time.Parse(time.RFC3339Nano, syncedAt); err != nil {
			return fmt.Errorf("table at %d: synced_at %q: %v", rev, syncedAt, err)
		}
	}
	ref, err := c.refs.table(ctx, rev, stale)
	if err != nil {
		return fmt.Errorf("reference at %d: %w", rev, err)
	}
	want, err := ref.JSONWith(nil, routing.JSONHeader{WrittenAt: at, SyncedAt: synced})
	if err != nil {
		return err
	}
	if !bytes.Equal(body, want) {
		return fmt.Errorf("table at revision %d differs from a fresh compile of etcd's state there:\n%s", rev, firstDiff(body, want))
	}
	return nil
}

// firstDiff shows where two JSON documents first differ.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-150)
	return fmt.Sprintf("agent:     …%s…\nreference: …%s…", got[lo:min(len(got), i+150)], want[lo:min(len(want), i+150)])
}

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// TestConcurrentWriters runs 8 writers × 100 read-modify-write updates of
// the same pool. Writers 0-3 rely on --retry; writers 4-7 run without it
// and re-run themselves on exit 3. Every update must land exactly once, in
// order, with one audit record per epoch whose "before" is the previous
// record's "after".
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	const writers, updates = 8, 40 // 321 commits, each contended by 7 other writers
	e := newEnv(t)
	// A small fleet: the test is about the write path under contention,
	// not about config size (the example fleet makes each attempt ~10×
	// dearer under -race).
	e.must(ExitOK, "apply", "-f", writeFile(t, "base.yaml", baseConfig), "--reason", "seed", "--allow-residency-change") // class eu narrower than the built-in one
	var conflicts, retried atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.writer(w, updates, w < writers/2, &conflicts, &retried)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d conflicts (exit 3) re-run by writers without --retry", conflicts.Load())
	if conflicts.Load() == 0 {
		t.Log("note: no writer without --retry met a conflict this run")
	}
	const commits = 1 + writers*updates // the seed, then every update
	if got := e.get(e.ks.Epoch()); got != strconv.Itoa(commits) {
		t.Fatalf("epoch = %s, want %d (one per committed write)", got, commits)
	}
	e.checkAuditChain(commits, writers, updates)
}

// writer sets attr w<id> of pool eu-central to 1..n, one write each.
func (e *tenv) writer(id, n int, useRetry bool, conflicts, _ *atomic.Int64) error {
	for i := 1; i <= n; i++ {
		args := []string{"pool", "set", "eu-central", "--attr", fmt.Sprintf("w%d=%d", id, i), "--reason", "load"}
		if useRetry {
			args = append(args, "--retry", "1000")
		}
		for {
			r := e.run(args...)
			if r.code == ExitOK {
				break
			}
			if r.code != ExitConflict || useRetry {
				return fmt.Errorf("writer %d update %d: %s", id, i, r)
			}
			conflicts.Add(1)
			time.Sleep(time.Duration(5+rand.IntN(45)) * time.Millisecond) // an operator re-running
		}
	}
	return nil
}

// checkAuditChain asserts one audit record per epoch 1..commits, chained
// before→after on pools/eu-central, with each writer's values in order.
func (e *tenv) checkAuditChain(commits, writers, updates int) {
	t := e.t
	resp, err := testClient.Get(context.Background(), e.ks.AuditPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != commits {
		t.Fatalf("%d audit records, want %d", len(resp.Kvs), commits)
	}
	var prevAfter json.RawMessage
	next := make([]int, writers) // next expected value of each writer
	for i, kv := range resp.Kvs {
		var rec routing.Audit
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			t.Fatal(err)
		}
		epoch := int64(i + 1)
		if key := e.ks.Audit(epoch); string(kv.Key) != key || rec.Epoch != epoch {
			t.Fatalf("audit record %d: key %s epoch %d, want key %s", i, kv.Key, rec.Epoch, key)
		}
		for _, c := range rec.Changes {
			if c.Key != routing.PoolKey("eu-central") {
				continue
			}
			if prevAfter != nil {
				if string(c.Before) != string(prevAfter) {
					t.Fatalf("epoch %d: before %s, but epoch %d wrote %s: an update was lost", epoch, c.Before, epoch-1, prevAfter)
				}
				checkWriterStep(t, epoch, c, next)
			}
			prevAfter = c.After
		}
	}
	var final routing.Pool
	if err := json.Unmarshal([]byte(e.get(e.ks.RoutingKey(routing.PoolKey("eu-central")))), &final); err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		if got := final.Attrs[fmt.Sprintf("w%d", w)]; got != strconv.Itoa(updates) {
			t.Errorf("final attr w%d = %q, want %d", w, got, updates)
		}
	}
}

// checkWriterStep asserts that the one attr a record changes is the next
// value of its writer.
func checkWriterStep(t testing.TB, epoch int64, c routing.Change, next []int) {
	t.Helper()
	var before, after routing.Pool
	_ = json.Unmarshal(c.Before, &before)
	_ = json.Unmarshal(c.After, &after)
	changed := 0
	for w := range next {
		k := fmt.Sprintf("w%d", w)
		if before.Attrs[k] == after.Attrs[k] {
			continue
		}
		changed++
		if want := strconv.Itoa(next[w] + 1); after.Attrs[k] != want {
			t.Fatalf("epoch %d: %s = %s, want %s (updates out of order or lost)", epoch, k, after.Attrs[k], want)
		}
		next[w]++
	}
	if changed != 1 {
		t.Fatalf("epoch %d changed %d writer attrs, want 1", epoch, changed)
	}
}

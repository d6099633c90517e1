package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/routing"
)

// LatencyRun is one run of the isolated-put measurements.
type LatencyRun struct {
	// Floor is put → a plain clientv3 watch on the key receives the event,
	// measured on the same puts as File.
	Floor Dist `json:"floor"`
	// File is put → the snapshot file (seen through inotify, then read)
	// holds the put's revision.
	File Dist `json:"file"`
	// FileMinusFloor is, per put, File − Floor.
	FileMinusFloor Dist `json:"file_minus_floor"`
	// FileEvent is put → the rename was signalled (inotify), before the
	// bench read the file: when the new file became visible at its path.
	FileEvent Dist `json:"file_event"`
	// Resolve is put → /v1/resolve (polled back to back over one
	// keep-alive connection) returns the decision of the new value at a
	// revision past the previous put.
	Resolve Dist `json:"resolve"`
	// FloorResolvePhase is the floor measured on the same puts as Resolve,
	// i.e. with the poller loading the CPUs.
	FloorResolvePhase Dist `json:"floor_resolve_phase"`
	// ResolveMinusFloor is, per put, Resolve − the floor of the same put.
	ResolveMinusFloor Dist `json:"resolve_minus_floor"`
	// Blocking is put → a blocking query (/v1/resolve?min_revision=N,
	// sent before the put) answers with the decision of the new value: no
	// polling load on the CPUs.
	Blocking Dist `json:"blocking"`
	// FloorBlockingPhase is the floor measured on the same puts as
	// Blocking.
	FloorBlockingPhase Dist `json:"floor_blocking_phase"`
	// BlockingMinusFloor is, per put, Blocking − that floor.
	BlockingMinusFloor Dist `json:"blocking_minus_floor"`
	// Ack is the put's own round trip.
	Ack Dist `json:"ack"`
	// PollsPerPut is the median number of /v1/resolve requests per put.
	PollsPerPut float64 `json:"polls_per_put"`
	// Anomalies counts decisions seen at a revision below the put's.
	Anomalies int `json:"anomalies"`
	// ForeignCPUPct is the share of all CPUs used by processes other than
	// the bench, etcd and regiond during the run (-1: unknown).
	ForeignCPUPct float64 `json:"foreign_cpu_pct"`
}

// latencyEnv is what the isolated-put and burst phases share.
type latencyEnv struct {
	opts     options
	cfg      *routing.Config
	cli      *clientv3.Client
	ag       *agentProc
	fw       *fileWatcher
	prefix   string // <root>/routing/
	route    string // the route the isolated puts flip
	variants [2][]byte
	flipKey  string
	flipPool [2]string
	next     int // index of the variant the next put writes
	lastRev  int64
	floorCh  chan fileObs
	// epoch, when not zero, is the epoch key's value: each put then moves
	// it in the same Txn, as each of regionctl's writes does (the fleet
	// phase's changes, which agents report at once as they do a write);
	// zero: plain puts.
	epoch int64

	burstRoutes   []string
	burstVariants map[string][2][]byte
	burstNext     map[string]int
}

// startFloorWatch opens a plain clientv3 watch on the flipped key.
func (e *latencyEnv) startFloorWatch(ctx context.Context) error {
	e.floorCh = make(chan fileObs, 1<<14)
	wch := e.cli.Watch(clientv3.WithRequireLeader(ctx), e.prefix+"routes/"+e.route, clientv3.WithCreatedNotify())
	first, ok := <-wch
	if !ok || !first.Created {
		return fmt.Errorf("floor watch not created: %v", first.Err())
	}
	go func() {
		for resp := range wch {
			now := time.Now()
			for _, ev := range resp.Events {
				e.floorCh <- fileObs{rev: ev.Kv.ModRevision, at: now, n: 1}
			}
		}
	}()
	return nil
}

// waitObs returns the first observation on ch at or past rev.
func waitObs(ctx context.Context, ch <-chan fileObs, rev int64, timeout time.Duration, what string) (fileObs, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case o := <-ch:
			if o.rev >= rev {
				return o, nil
			}
		case <-t.C:
			return fileObs{}, fmt.Errorf("%s did not show revision %d within %v", what, rev, timeout)
		case <-ctx.Done():
			return fileObs{}, ctx.Err()
		}
	}
}

// pace sleeps until the next put is due: gap after the previous put
// started, and at least 12 ms after it became visible everywhere (so the
// snapshot writer sees every put as an isolated change, not a burst).
func (e *latencyEnv) pace(ctx context.Context, prevStart, prevDone time.Time) error {
	gap := e.opts.gapMin
	if e.opts.gapMax > e.opts.gapMin {
		gap += rand.N(e.opts.gapMax - e.opts.gapMin)
	}
	due := prevStart.Add(gap)
	if d := prevDone.Add(12 * time.Millisecond); d.After(due) {
		due = d
	}
	select {
	case <-time.After(time.Until(due)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// put writes the next variant of the flipped route and returns when the
// put started, when it was acked, and its revision.
func (e *latencyEnv) put(ctx context.Context) (time.Time, time.Time, int64, error) {
	v := e.variants[e.next]
	t0 := time.Now()
	var rev int64
	if e.epoch == 0 {
		resp, err := e.cli.Put(ctx, e.prefix+"routes/"+e.route, string(v))
		if err != nil {
			return t0, time.Now(), 0, err
		}
		rev = resp.Header.Revision
	} else {
		resp, err := e.cli.Txn(ctx).Then(clientv3.OpPut(e.prefix+"routes/"+e.route, string(v)),
			clientv3.OpPut(e.prefix+"epoch", strconv.FormatInt(e.epoch+1, 10))).Commit()
		if err != nil {
			return t0, time.Now(), 0, err
		}
		e.epoch++
		rev = resp.Header.Revision
	}
	ack := time.Now()
	e.next ^= 1
	e.lastRev = rev
	return t0, ack, rev, nil
}

// runFilePhase: n isolated puts, each timed to the plain watch (floor) and
// to the snapshot file.
func (e *latencyEnv) runFilePhase(ctx context.Context, n int, out *LatencyRun) error {
	var floor, file, delta, ack, event []time.Duration
	var prevStart, prevDone time.Time
	for i := 0; i < n; i++ {
		if err := e.pace(ctx, prevStart, prevDone); err != nil {
			return err
		}
		t0, acked, rev, err := e.put(ctx)
		if err != nil {
			return err
		}
		fo, err := waitObs(ctx, e.floorCh, rev, 5*time.Second, "the plain watch")
		if err != nil {
			return err
		}
		floor = append(floor, fo.at.Sub(t0))
		if !e.opts.noSnapshot {
			so, err := waitObs(ctx, e.fw.C, rev, 5*time.Second, "the snapshot file")
			if err != nil {
				return fmt.Errorf("%w\n%s", err, e.ag.logTail())
			}
			file = append(file, so.at.Sub(t0))
			if !so.event.IsZero() {
				event = append(event, so.event.Sub(t0))
			}
			delta = append(delta, so.at.Sub(fo.at))
		}
		ack = append(ack, acked.Sub(t0))

		prevStart, prevDone = t0, time.Now()
	}
	out.Floor, out.File, out.FileMinusFloor = dist(floor), dist(file), dist(delta)
	if len(event) > 0 {
		out.FileEvent = dist(event)
	}
	out.Ack = dist(ack)
	return nil
}

type pollJob struct {
	want  string
	after int64
	// block: first ask with a blocking query for a revision past after.
	block bool
}

type pollResult struct {
	at    time.Time
	rev   int64
	polls int
	err   error
}

// poller answers each job by polling /v1/resolve back to back until the
// decision is the wanted pool at a revision past job.after.
func (e *latencyEnv) poller(ctx context.Context, jobs <-chan pollJob, results chan<- pollResult) {
	path := "/v1/resolve?country=" + url.QueryEscape(e.route) + "&key=" + url.QueryEscape(e.flipKey)
	get := e.ag.get
	if !e.opts.pollNetHTTP {
		raw := newRawGetter(strings.TrimPrefix(e.ag.base, "http://"), path)
		defer raw.Close()
		get = func(string) (int, []byte, error) { return raw.get() }
	}
	var d struct {
		Pool     string `json:"pool"`
		Revision int64  `json:"revision"`
	}
	var blocking *rawGetter
	defer func() {
		if blocking != nil {
			blocking.Close()
		}
	}()
	for job := range jobs {
		deadline := time.Now().Add(5 * time.Second)
		polls := 0
		if job.block {
			bpath := fmt.Sprintf("%s&min_revision=%d&wait=5s", path, job.after+1)
			if blocking == nil {
				blocking = newRawGetter(strings.TrimPrefix(e.ag.base, "http://"), bpath)
			}
			blocking.setPath(bpath)
			code, body, err := blocking.get()
			polls++
			if err == nil && code == 200 {
				if pool, rev, found := decisionFields(body); found && string(pool) == job.want && rev > job.after {
					results <- pollResult{at: time.Now(), rev: rev, polls: polls}
					continue
				}
			}
		}
		for {
			code, body, err := get(path)
			polls++
			ok := false
			if err == nil && code == 200 {
				if e.opts.pollNetHTTP {
					ok = json.Unmarshal(body, &d) == nil && d.Pool == job.want && d.Revision > job.after
				} else if pool, rev, found := decisionFields(body); found {
					ok = string(pool) == job.want && rev > job.after
					d.Revision = rev
				}
			}
			if ok {
				results <- pollResult{at: time.Now(), rev: d.Revision, polls: polls}
				break
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				results <- pollResult{err: fmt.Errorf("/v1/resolve did not show pool %s after revision %d within 5s (last: HTTP %d %v %s)",
					job.want, job.after, code, err, body)}
				break
			}
			if e.opts.pollInterval > 0 {
				time.Sleep(e.opts.pollInterval)
			}
		}
	}
}

// runResolvePhase: n isolated puts, each timed to the plain watch and to
// /v1/resolve returning the new decision.
func (e *latencyEnv) runResolvePhase(ctx context.Context, n int, out *LatencyRun) error {
	return e.runQueryPhase(ctx, n, false, &out.Resolve, &out.FloorResolvePhase, &out.ResolveMinusFloor, &out.PollsPerPut, &out.Anomalies)
}

// runBlockingPhase: n isolated puts, each timed to the plain watch and to
// a blocking /v1/resolve query (sent before the put) answering with the
// new decision.
func (e *latencyEnv) runBlockingPhase(ctx context.Context, n int, out *LatencyRun) error {
	var polls float64
	return e.runQueryPhase(ctx, n, true, &out.Blocking, &out.FloorBlockingPhase, &out.BlockingMinusFloor, &polls, &out.Anomalies)
}

func (e *latencyEnv) runQueryPhase(ctx context.Context, n int, block bool, resolveD, floorD, deltaD *Dist, pollsPerPut *float64, anomalies *int) error {
	jobs, results := make(chan pollJob), make(chan pollResult, 1)
	defer close(jobs)
	go e.poller(ctx, jobs, results)
	var floor, resolve, delta []time.Duration
	var polls []float64
	var prevStart, prevDone time.Time
	for i := 0; i < n; i++ {
		if err := e.pace(ctx, prevStart, prevDone); err != nil {
			return err
		}
		jobs <- pollJob{want: e.flipPool[e.next], after: e.lastRev, block: block}
		if block {
			time.Sleep(time.Millisecond) // the query reaches the agent before the put does
		}
		t0, _, rev, err := e.put(ctx)
		if err != nil {
			return err
		}
		fo, err := waitObs(ctx, e.floorCh, rev, 5*time.Second, "the plain watch")
		if err != nil {
			return err
		}
		r := <-results
		if r.err != nil {
			return fmt.Errorf("%w\n%s", r.err, e.ag.logTail())
		}
		if r.rev < rev {
			*anomalies++
		}
		floor = append(floor, fo.at.Sub(t0))
		resolve = append(resolve, r.at.Sub(t0))
		delta = append(delta, r.at.Sub(fo.at))
		polls = append(polls, float64(r.polls))
		prevStart, prevDone = t0, time.Now()
	}
	*resolveD, *floorD, *deltaD = dist(resolve), dist(floor), dist(delta)
	*pollsPerPut = median(polls)
	return nil
}

func (e *latencyEnv) exampleCfg() *routing.Config { return e.cfg }

// nextVariant returns the index of the variant that changes the route's
// current value in etcd.
func (e *latencyEnv) nextVariant(ctx context.Context, route string, v [2][]byte) (int, error) {
	resp, err := e.cli.Get(ctx, e.prefix+"routes/"+route)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == string(v[0]) {
		return 1, nil
	}
	return 0, nil
}

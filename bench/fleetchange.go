package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Timeouts of one change of the fleet phase. A change that reaches no
// agent within fleetRoundTimeout fails the phase: something is broken, not
// slow (an agent disconnected behind the proxy waits out ~13 s today).
const (
	fleetQueryWait    = 30 * time.Second
	fleetRoundTimeout = 60 * time.Second
	fleetWarmups      = 3
)

// querier keeps one blocking /v1/resolve query waiting at one agent for
// each change, over one keep-alive connection.
type querier struct {
	slot int
	path string // /v1/resolve?country=…&key=…
	g    *rawGetter
	jobs chan pollJob
}

func newQueriers(agents []*fleetAgent, route, key string) []*querier {
	path := "/v1/resolve?country=" + url.QueryEscape(route) + "&key=" + url.QueryEscape(key)
	qs := make([]*querier, len(agents))
	for i, a := range agents {
		g := newRawGetter(strings.TrimPrefix(a.base, "http://"), path)
		g.timeout = fleetQueryWait + 5*time.Second
		qs[i] = &querier{slot: i, path: path, g: g, jobs: make(chan pollJob, 1)}
	}
	return qs
}

// run answers each job: blocking queries for a revision past job.after
// until the decision is job.want there, then the moment it answered goes
// to out. A table that moved without the change (a progress notification)
// is waited past with the next query.
func (q *querier) run(ctx context.Context, out chan<- fanObs, fail func(error)) {
	defer q.g.Close()
	for job := range q.jobs {
		after := job.after
		deadline := time.Now().Add(fleetRoundTimeout)
		for {
			q.g.setPath(fmt.Sprintf("%s&min_revision=%d&wait=%v", q.path, after+1, fleetQueryWait))
			code, body, err := q.g.get()
			now := time.Now()
			if err == nil && code == 200 {
				pool, rev, found := decisionFields(body)
				if found && string(pool) == job.want && rev > job.after {
					out <- fanObs{slot: q.slot, rev: rev, at: now}
					break
				}
				if found && rev > after {
					after = rev
				}
			}
			if ctx.Err() != nil {
				return
			}
			if time.Now().After(deadline) {
				fail(fmt.Errorf("agent %d: /v1/resolve did not show pool %s past revision %d within %v (last: HTTP %d %v %.200s)",
					q.slot, job.want, job.after, fleetRoundTimeout, code, err, body))
				break
			}
			if err != nil || code != 200 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}

// changeSample is one isolated change, from just before its Put.
type changeSample struct {
	agents, agentsProxied, agentsDirect time.Duration // the last agent (of each group) serving it
	floor, floorProxied, floorDirect    time.Duration // the last floor watcher (of each group) having it
	agentEach, floorEach                []time.Duration
	status                              time.Duration // the last status key reporting it; -1: not within the wait
}

// changeRunner runs the isolated changes of the fleet phase.
type changeRunner struct {
	*latencyEnv
	o        options
	agents   []*fleetAgent
	cluster  *etcdCluster
	floor    *floorWatchers
	status   *statusTracker
	queriers []*querier
	agentC   chan fanObs
	failMu   sync.Mutex
	failErr  error
}

func (r *changeRunner) fail(err error) {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	if r.failErr == nil {
		r.failErr = err
	}
}

func (r *changeRunner) failed() error {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	if r.failErr != nil {
		return r.failErr
	}
	return r.floor.failed()
}

// start starts one querier goroutine per agent; stop ends them.
func (r *changeRunner) start(ctx context.Context) {
	r.agentC = make(chan fanObs, 1<<16)
	r.queriers = newQueriers(r.agents, r.route, r.flipKey)
	for _, q := range r.queriers {
		go q.run(ctx, r.agentC, r.fail)
	}
}

func (r *changeRunner) stop() {
	for _, q := range r.queriers {
		close(q.jobs)
	}
}

// runChanges makes fleetWarmups unmeasured changes (the first also checks
// that the queries are waiting at every agent when the Put is sent), then
// n measured ones.
func (r *changeRunner) runChanges(ctx context.Context, n int, out *FleetChange) ([]changeSample, error) {
	var samples []changeSample
	for i := -fleetWarmups; i < n; i++ {
		s, err := r.change(ctx, i == -fleetWarmups, out)
		if err != nil {
			return samples, fmt.Errorf("fleet change %d: %w", i+fleetWarmups+1, err)
		}
		if i >= 0 {
			samples = append(samples, s)
		}
		if (i+1)%50 == 0 && i >= 0 {
			logf(r.o, "fleet: %d/%d changes; last: all %d agents %.1f ms, floor %.1f ms", i+1, n, len(r.agents), ms(s.agents), ms(s.floor))
		}
		if (i+1)%10 == 0 {
			if err := firstErr(agentsAlive(r.agents), r.cluster.alive()); err != nil {
				return samples, err
			}
		}
		gap := r.o.fleetGap + rand.N(r.o.fleetGap+1)
		select {
		case <-time.After(gap):
		case <-ctx.Done():
			return samples, ctx.Err()
		}
	}
	return samples, nil
}

// change makes one isolated change and times it at every agent and every
// floor watcher, then waits for the agents' status keys to report it.
func (r *changeRunner) change(ctx context.Context, checkLead bool, out *FleetChange) (changeSample, error) {
	var s changeSample
	drain(r.floor.C)
	drain(r.agentC)
	want, after := r.flipPool[r.next], r.lastRev
	for _, q := range r.queriers {
		q.jobs <- pollJob{want: want, after: after}
	}
	if err := sleepCtx(ctx, r.o.fleetLead); err != nil {
		return s, err
	}
	if checkLead {
		waiting, err := r.countWaiting(ctx)
		if err != nil {
			return s, err
		}
		out.QueriesWaitingAtPut = waiting
		if waiting < len(r.agents) {
			logf(r.o, "fleet: only %d of %d blocking queries were waiting %v after being sent; raise -fleet-lead", waiting, len(r.agents), r.o.fleetLead)
		}
	}
	t0, _, rev, err := r.put(ctx)
	if err != nil {
		return s, err
	}
	floorSeen, err := collect(ctx, r.floor.C, len(r.floor.clients), rev, fleetRoundTimeout, "floor watchers")
	if err != nil {
		return s, firstErr(r.floor.failed(), err)
	}
	agentSeen, err := collect(ctx, r.agentC, len(r.agents), rev, fleetRoundTimeout+5*time.Second, "agents")
	if err != nil {
		return s, firstErr(r.failed(), err)
	}
	s.floor, s.floorProxied, s.floorDirect, s.floorEach = lastOf(t0, floorSeen, r.floor.proxied)
	proxied := make([]bool, len(r.agents))
	for i, a := range r.agents {
		proxied[i] = a.viaProxy
	}
	s.agents, s.agentsProxied, s.agentsDirect, s.agentEach = lastOf(t0, agentSeen, proxied)
	s.status = -1
	if at, err := r.status.waitAll(ctx, len(r.agents), rev, r.o.fleetStatusWait); err == nil {
		s.status = at.Sub(t0)
	} else if ctx.Err() != nil {
		return s, ctx.Err()
	}
	return s, nil
}

// lastOf returns, from t0, the latest of seen, the latest of the proxied
// and of the direct ones, and every one.
func lastOf(t0 time.Time, seen []time.Time, proxied []bool) (all, viaProxy, direct time.Duration, each []time.Duration) {
	for i, at := range seen {
		d := at.Sub(t0)
		each = append(each, d)
		all = max(all, d)
		if proxied[i] {
			viaProxy = max(viaProxy, d)
		} else {
			direct = max(direct, d)
		}
	}
	return all, viaProxy, direct, each
}

// countWaiting returns how many agents have a blocking query waiting.
func (r *changeRunner) countWaiting(ctx context.Context) (int, error) {
	ss, err := scrapeAgents(ctx, r.agents, "regiond_api_blocking_queries_waiting")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range ss {
		if sumOf(s, "regiond_api_blocking_queries_waiting") >= 1 {
			n++
		}
	}
	return n, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"
)

// fleetAgent is one agent process of the fleet phase.
type fleetAgent struct {
	*agentProc
	idx  int
	node string
	// viaProxy: the agent's only endpoint is the grpc-proxy; otherwise it
	// is one member (hop names which: "m1", "m2", …).
	viaProxy bool
	hop      string
	opts     agentOpts
}

// fleetTopology assigns agent i its endpoint: viaProxy of the n agents,
// spread evenly over the indexes, go through the proxy; the others
// alternate over members 1…n-1. Member 0 is the proxy's upstream and serves no agent directly, so
// its counters are the proxy's forwarded requests and members 1…n-1's are
// the direct agents' own.
func fleetTopology(c *etcdCluster, n, viaProxy int) (endpoints, hops []string, proxied []bool) {
	direct := 0
	for i := 0; i < n; i++ {
		if i*viaProxy/n != (i+1)*viaProxy/n {
			endpoints, hops, proxied = append(endpoints, "http://"+c.proxyAddr), append(hops, "proxy"), append(proxied, true)
			continue
		}
		m := 1 + direct%(len(c.members)-1)
		direct++
		endpoints = append(endpoints, c.members[m].clientURL)
		hops, proxied = append(hops, c.names[m]), append(proxied, false)
	}
	return endpoints, hops, proxied
}

// startFleetAgents starts n agents, batch at a time, each ready (its table
// at revision rev or later, /readyz 200) before the next batch starts.
func startFleetAgents(ctx context.Context, o options, base agentOpts, c *etcdCluster, work, shm string, rev int64) ([]*fleetAgent, error) {
	endpoints, hops, proxied := fleetTopology(c, o.fleetAgents, o.fleetViaProxy)
	var agents []*fleetAgent
	for start := 0; start < o.fleetAgents; start += o.fleetBatch {
		end := min(start+o.fleetBatch, o.fleetAgents)
		batch := make([]*fleetAgent, end-start)
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for i := start; i < end; i++ {
			ao := base
			ao.node = fmt.Sprintf("fleet-%03d", i)
			ao.endpoint = endpoints[i]
			ao.dir = filepath.Join(work, "fleet", ao.node)
			ao.snapshot = filepath.Join(shm, "fleet", ao.node, "table.json")
			ao.cpuprofile = ""
			a := &fleetAgent{idx: i, node: ao.node, viaProxy: proxied[i], hop: hops[i], opts: ao}
			batch[i-start] = a
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				errs[k] = a.start(ctx, rev)
			}(i - start)
		}
		wg.Wait()
		for i, a := range batch {
			if a.agentProc != nil {
				agents = append(agents, a)
			}
			if errs[i] != nil {
				return agents, fmt.Errorf("fleet agent %s (via %s): %w", a.node, a.hop, errs[i])
			}
		}
		logf(o, "fleet: %d/%d agents serving revision %d", len(agents), o.fleetAgents, rev)
	}
	return agents, nil
}

// start starts the agent and waits until it is ready at rev. An agent that
// exits at once (its port taken meanwhile) is started again on another.
func (a *fleetAgent) start(ctx context.Context, rev int64) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if a.agentProc, err = startAgent(a.opts); err != nil {
			return err
		}
		if err = a.waitReady(ctx, rev); err == nil || !a.exited() || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (a *fleetAgent) waitReady(ctx context.Context, rev int64) error {
	var st struct {
		Revision  int64 `json:"revision"`
		Connected bool  `json:"connected"`
	}
	return a.waitFor(ctx, fmt.Sprintf("ready at revision %d", rev), 60*time.Second, 20*time.Millisecond, func() bool {
		code, b, err := a.get("/v1/status")
		if err != nil || code != 200 || json.Unmarshal(b, &st) != nil || st.Revision < rev || !st.Connected {
			return false
		}
		code, _, err = a.get("/readyz")
		return err == nil && code == 200
	})
}

// stopAgents stops the agents in parallel (SIGTERM, then SIGKILL after
// grace): each revokes its status lease on the way out.
func stopAgents(agents []*fleetAgent, grace time.Duration) {
	var wg sync.WaitGroup
	for _, a := range agents {
		if a == nil || a.agentProc == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.stop(grace)
		}()
	}
	wg.Wait()
}

// agentsAlive returns an error naming the first agent that exited.
func agentsAlive(agents []*fleetAgent) error {
	for _, a := range agents {
		if a.exited() {
			return fmt.Errorf("fleet agent %s (via %s) exited: %v\n%s", a.node, a.hop, a.err, a.logTail())
		}
	}
	return nil
}

// agentPids returns the agents' process ids.
func agentPids(agents []*fleetAgent) []int {
	out := make([]int, len(agents))
	for i, a := range agents {
		out[i] = a.pid()
	}
	return out
}

// scrapeAgents fetches /metrics of every agent, 8 at a time, and returns
// the samples whose names start with one of prefixes.
func scrapeAgents(ctx context.Context, agents []*fleetAgent, prefixes ...string) ([][]series, error) {
	out := make([][]series, len(agents))
	errs := make([]error, len(agents))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			b, err := scrape(ctx, a.base+"/metrics")
			if err != nil {
				errs[i] = fmt.Errorf("agent %s: %w", a.node, err)
				return
			}
			out[i] = parseProm(b, prefixes...)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

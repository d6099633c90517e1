package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// grpcCounters are gRPC server counters of one etcd endpoint (a member or
// the proxy), by "service/method".
type grpcCounters struct {
	received map[string]float64 // grpc_server_msg_received_total: messages from clients
	started  map[string]float64 // grpc_server_started_total: RPCs (a stream once)
}

// etcdCounters are the counters of every member (by name) and of the
// proxy ("proxy"), read at one moment.
type etcdCounters struct {
	at   time.Time
	hops map[string]grpcCounters
}

func readEtcdCounters(ctx context.Context, c *etcdCluster) (etcdCounters, error) {
	out := etcdCounters{at: time.Now(), hops: map[string]grpcCounters{}}
	urls := map[string]string{"proxy": c.proxyMetrics}
	for i, m := range c.members {
		urls[c.names[i]] = m.clientURL + "/metrics"
	}
	for hop, u := range urls {
		b, err := scrape(ctx, u)
		if err != nil {
			return out, fmt.Errorf("metrics of %s: %w", hop, err)
		}
		ss := parseProm(b, "grpc_server_")
		gc := grpcCounters{received: map[string]float64{}, started: map[string]float64{}}
		for _, s := range ss {
			m := s.labels["grpc_service"] + "/" + s.labels["grpc_method"]
			switch s.name {
			case "grpc_server_msg_received_total":
				gc.received[m] += s.value
			case "grpc_server_started_total":
				gc.started[m] += s.value
			}
		}
		out.hops[hop] = gc
	}
	return out, nil
}

// hopRate is, per hop and method, how many messages (and RPCs) per second
// arrived between two readings.
type hopRate map[string]map[string][2]float64

func ratesBetween(a, b etcdCounters) hopRate {
	sec := b.at.Sub(a.at).Seconds()
	out := hopRate{}
	for hop, gb := range b.hops {
		ga := a.hops[hop]
		m := map[string][2]float64{}
		for k, v := range gb.received {
			m[k] = [2]float64{(v - ga.received[k]) / sec, m[k][1]}
		}
		for k, v := range gb.started {
			m[k] = [2]float64{m[k][0], (v - ga.started[k]) / sec}
		}
		out[hop] = m
	}
	return out
}

// total sums the rates of hops (index 0: messages, 1: RPCs started).
func (r hopRate) total(hops ...string) [2]float64 {
	var t [2]float64
	for _, h := range hops {
		for _, v := range r[h] {
			t[0] += v[0]
			t[1] += v[1]
		}
	}
	return t
}

// minus returns r − bg, method by method.
func (r hopRate) minus(bg hopRate) hopRate {
	out := hopRate{}
	for hop, m := range r {
		o := map[string][2]float64{}
		for k, v := range m {
			b := bg[hop][k]
			o[k] = [2]float64{v[0] - b[0], v[1] - b[1]}
		}
		out[hop] = o
	}
	return out
}

// idleSpan measures the idle fleet for o.fleetIdle: relists, connected
// samples and etcd requests.
func idleSpan(ctx context.Context, o options, fl *fleet) (*FleetIdle, error) {
	agents, c := fl.agents, fl.cluster
	res := &FleetIdle{SampleSeconds: o.fleetSample.Seconds(), Relists: map[string]float64{}}
	before, err := scrapeAgents(ctx, agents, "regiond_watch_resyncs_total")
	if err != nil {
		return nil, err
	}
	c0, err := readEtcdCounters(ctx, c)
	if err != nil {
		return nil, err
	}
	pids := append(agentPids(agents), c.pids()...)
	cpu0, ev0 := sampleCPU(pids...), fl.status.eventCount()
	logf(o, "fleet: idle for %v, sampling regiond_watch_connected every %v ...", o.fleetIdle, o.fleetSample)
	if err := sampleConnected(ctx, o, fl, time.Now().Add(o.fleetIdle), res); err != nil {
		return nil, err
	}
	c1, err := readEtcdCounters(ctx, c)
	if err != nil {
		return nil, err
	}
	res.ForeignCPUPct = foreignPct(cpu0, sampleCPU(pids...))
	res.StatusPuts = fl.status.eventCount() - ev0
	after, err := scrapeAgents(ctx, agents, "regiond_watch_resyncs_total")
	if err != nil {
		return nil, err
	}
	res.Seconds = c1.at.Sub(c0.at).Seconds()
	for i := range agents {
		a, b := sumBy(before[i], "regiond_watch_resyncs_total", "reason"), sumBy(after[i], "regiond_watch_resyncs_total", "reason")
		n := 0.0
		for reason, v := range b {
			if d := v - a[reason]; d > 0 {
				res.Relists[reason] += d
				n += d
			}
		}
		res.RelistsTotal += n
		if n > 0 {
			res.AgentsRelisted++
		}
	}
	res.Requests = requestFigures(ratesBetween(c0, c1), fl.bg, c, agents)
	return res, nil
}

// sampleConnected reads regiond_watch_connected of every agent every
// -fleet-sample until end, and counts the samples that are not 1.
func sampleConnected(ctx context.Context, o options, fl *fleet, end time.Time, res *FleetIdle) error {
	disconnected := map[int]bool{}
	for time.Now().Before(end) {
		if err := sleepCtx(ctx, min(o.fleetSample, time.Until(end))); err != nil {
			return err
		}
		if err := firstErr(agentsAlive(fl.agents), fl.cluster.alive()); err != nil {
			return err
		}
		ss, err := scrapeAgents(ctx, fl.agents, "regiond_watch_connected")
		if err != nil {
			return err
		}
		for i, s := range ss {
			res.ConnectedSamples++
			if sumOf(s, "regiond_watch_connected") != 1 {
				res.DisconnectedSamples++
				disconnected[i] = true
			}
		}
	}
	res.AgentsDisconnected = len(disconnected)
	return nil
}

// requestFigures turns the idle span's rates, less the background measured
// before any agent ran, into requests per second per agent.
func requestFigures(idle, bg hopRate, c *etcdCluster, agents []*fleetAgent) FleetRequests {
	net := idle.minus(bg)
	direct := c.names[1:]
	proxied := 0
	for _, a := range agents {
		if a.viaProxy {
			proxied++
		}
	}
	n := float64(len(agents))
	d, p, up := net.total(direct...), net.total("proxy"), net.total(c.names[0])
	fr := FleetRequests{
		FirstHopPerAgentPerSec:   (d[0] + p[0]) / n,
		FirstHopRPCsPerAgentPerS: (d[1] + p[1]) / n,
		ClusterPerAgentPerSec:    net.total(c.names...)[0] / n,
		ProxyUpstreamPerSec:      up[0],
		BackgroundPerSec:         bg.total(append([]string{"proxy"}, c.names...)...)[0],
	}
	if k := len(agents) - proxied; k > 0 {
		fr.DirectPerAgentPerSec = d[0] / float64(k)
	}
	if proxied > 0 {
		fr.ProxiedPerAgentPerSec = p[0] / float64(proxied)
	}
	add := func(hop string, hops ...string) {
		byMethod := map[string][2]float64{}
		for _, h := range hops {
			for m, v := range net[h] {
				byMethod[m] = [2]float64{byMethod[m][0] + v[0], byMethod[m][1] + v[1]}
			}
		}
		for m, v := range byMethod {
			if v[0] >= 0.0005*n || v[1] >= 0.0005*n {
				fr.ByMethod = append(fr.ByMethod, MethodRate{Hop: hop, Method: m, MsgsPerAgentPerSec: v[0] / n, RPCsPerAgentPerSec: v[1] / n})
			}
		}
	}
	hops := []string{"direct agents at " + strings.Join(direct, "+"), "proxied agents at the proxy", "proxy upstream at " + c.names[0]}
	add(hops[0], direct...)
	add(hops[1], "proxy")
	add(hops[2], c.names[0])
	order := map[string]int{hops[0]: 0, hops[1]: 1, hops[2]: 2}
	sort.Slice(fr.ByMethod, func(i, j int) bool {
		a, b := fr.ByMethod[i], fr.ByMethod[j]
		if a.Hop != b.Hop {
			return order[a.Hop] < order[b.Hop]
		}
		return a.MsgsPerAgentPerSec > b.MsgsPerAgentPerSec
	})
	return fr
}

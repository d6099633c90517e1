package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/routing"
)

// fleetEpoch is the epoch the fleet phase loads its config at.
const fleetEpoch = 1

// fleetFlags registers the flags of the fleet phase.
func fleetFlags(o *options) {
	flag.IntVar(&o.fleetAgents, "fleet-agents", 100, "fleet: agent processes")
	flag.IntVar(&o.fleetViaProxy, "fleet-via-proxy", -1, "fleet: how many of the agents (and of the floor's watchers) go through the grpc-proxy (-1: half)")
	flag.IntVar(&o.fleetBatch, "fleet-batch", 10, "fleet: agents started at once, each batch ready before the next")
	flag.IntVar(&o.fleetChanges, "fleet-changes", 200, "fleet: isolated changes timed to every agent and to the floor (0: skip)")
	flag.DurationVar(&o.fleetGap, "fleet-gap", 50*time.Millisecond,
		"fleet: pause after a change's status keys all report it, plus up to as much again at random")
	flag.DurationVar(&o.fleetLead, "fleet-lead", 50*time.Millisecond, "fleet: time between sending the blocking queries and the Put")
	flag.DurationVar(&o.fleetStatusWait, "fleet-status-wait", 5*time.Second,
		"fleet: after a change, wait up to this long for every status key to report it before the next change")
	flag.DurationVar(&o.fleetIdle, "fleet-idle", 10*time.Minute, "fleet: idle span for relists, connected samples and idle etcd requests (0: skip)")
	flag.DurationVar(&o.fleetSample, "fleet-sample", 5*time.Second, "fleet: interval of the regiond_watch_connected samples")
	flag.DurationVar(&o.fleetBackground, "fleet-background", 20*time.Second,
		"fleet: span over which the etcd counters' background (no agent running) is measured")
	flag.IntVar(&o.fleetConvergeAgents, "fleet-converge-agents", -1, "fleet: agents kept for the --wait-converged writes, the others stopped (-1: half)")
	flag.IntVar(&o.fleetConvergeWrites, "fleet-converge-writes", 50, "fleet: regionctl --wait-converged writes, back to back (0: skip)")
	flag.DurationVar(&o.fleetConvergeWait, "fleet-converge-wait", 30*time.Second, "fleet: regionctl's --wait-converged timeout")
}

func (o *options) validateFleet() error {
	if o.fleetViaProxy < 0 {
		o.fleetViaProxy = o.fleetAgents / 2
	}
	if o.fleetConvergeAgents < 0 {
		o.fleetConvergeAgents = max(1, o.fleetAgents/2)
	}
	switch {
	case o.fleetAgents < 1:
		return errors.New("-fleet-agents: at least 1")
	case o.fleetViaProxy > o.fleetAgents:
		return errors.New("-fleet-via-proxy: more than -fleet-agents")
	case o.fleetViaProxy < o.fleetAgents && o.fleetAgents-o.fleetViaProxy < 1:
		return errors.New("-fleet-via-proxy: no direct agent")
	case o.fleetConvergeWrites > 0 && (o.fleetConvergeAgents < 1 || o.fleetConvergeAgents > o.fleetAgents):
		return errors.New("-fleet-converge-agents: between 1 and -fleet-agents")
	case o.fleetBatch < 1:
		return errors.New("-fleet-batch: at least 1")
	}
	return nil
}

// fleetRoot is the key root of the fleet phase.
const fleetRoot = "/regiond/v1"

// fleet is what the fleet phase runs: the cluster with its proxy, the
// bench's client and watchers, and the agents.
type fleet struct {
	cluster *etcdCluster
	cli     *clientv3.Client
	status  *statusTracker
	floor   *floorWatchers
	agents  []*fleetAgent
	bg      hopRate // the etcd counters' rates before any agent ran
	rev     int64   // the revision of the loaded example
	// startSeconds is how long starting the agents took.
	startSeconds float64
}

// close stops the agents (they revoke their status leases), then the
// bench's clients, then the proxy and the members. Safe on a partly
// started fleet.
func (fl *fleet) close() {
	stopAgents(fl.agents, 10*time.Second)
	if fl.floor != nil {
		fl.floor.close()
	}
	if fl.cli != nil {
		fl.cli.Close()
	}
	fl.cluster.stop()
}

// startFleet starts the cluster and its proxy, loads the example, opens the
// bench's watches, measures the background and starts the agents. The
// caller closes the fleet, also when startFleet fails.
func startFleet(ctx context.Context, o options, cfg *routing.Config, work, shm, etcdBin, agentBin string) (*fleet, error) {
	fl := &fleet{}
	var err error
	if fl.cluster, err = startCluster(ctx, etcdBin, filepath.Join(work, "fleet-etcd"), 3); err != nil {
		return fl, err
	}
	c := fl.cluster
	logf(o, "fleet: 3 etcd members at %v; grpc-proxy at %s in front of %s", c.memberURLs(), c.proxyAddr, c.names[0])
	if fl.cli, err = clientv3.New(clientv3.Config{Endpoints: c.memberURLs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		return fl, err
	}
	vals, err := configValues(cfg, fleetEpoch)
	if err != nil {
		return fl, err
	}
	if fl.rev, err = putAll(ctx, fl.cli, fleetRoot+"/routing/", vals); err != nil {
		return fl, err
	}
	if fl.status, err = startStatusTracker(ctx, fl.cli, fleetRoot+"/agents/"); err != nil {
		return fl, err
	}
	endpoints, hops, proxied := fleetTopology(c, o.fleetAgents, o.fleetViaProxy)
	if fl.floor, err = startFloorWatchers(ctx, endpoints, hops, proxied, fleetRoot+"/routing/"); err != nil {
		return fl, err
	}
	if fl.bg, err = measureBackground(ctx, o, c); err != nil {
		return fl, err
	}
	base := agentOpts{bin: agentBin, prefix: fleetRoot, env: o.agentEnv}
	started := time.Now()
	if fl.agents, err = startFleetAgents(ctx, o, base, c, work, shm, fl.rev); err != nil {
		return fl, err
	}
	fl.startSeconds = time.Since(started).Seconds()
	if _, err := fl.status.waitAll(ctx, len(fl.agents), fl.rev, 30*time.Second); err != nil {
		return fl, fmt.Errorf("fleet: status keys after the start: %w", err)
	}
	return fl, nil
}

// runFleet runs the fleet phase: a 3-member cluster and its grpc-proxy,
// the agents, then the isolated changes, the idle span and the
// --wait-converged writes. Every process it starts is stopped when it
// returns, whatever the outcome.
func runFleet(ctx context.Context, o options, rep *Report, root, work, shm, etcdBin, agentBin string) error {
	ctlBin := filepath.Join(work, "bin", "regionctl")
	logf(o, "fleet: building ./cmd/regionctl ...")
	if err := goBuild(ctx, root, ctlBin, "./cmd/regionctl"); err != nil {
		return err
	}
	cfg, err := loadExample(filepath.Join(root, o.example))
	if err != nil {
		return err
	}
	fl, err := startFleet(ctx, o, cfg, work, shm, etcdBin, agentBin)
	defer fl.close()
	if err != nil {
		return err
	}
	f := &FleetReport{Agents: o.fleetAgents, ViaProxy: o.fleetViaProxy, Members: len(fl.cluster.members),
		StartSeconds: fl.startSeconds,
		Topology: fmt.Sprintf("the grpc-proxy's only upstream is %s; direct agents and watchers alternate over %v (one endpoint each); the bench's client and regionctl use every member",
			fl.cluster.names[0], fl.cluster.names[1:])}
	rep.Fleet = f
	// The changes move the epoch, as regionctl's writes do: agents put
	// their status keys at once for those (for other changes at most once
	// a second), and the status figure is what --wait-converged waits for.
	e := &latencyEnv{opts: o, cli: fl.cli, prefix: fleetRoot + "/routing/", route: "PL", cfg: cfg, lastRev: fl.rev, epoch: fleetEpoch}
	if err := e.prepareFlip(ctx); err != nil {
		return err
	}
	if o.fleetChanges > 0 {
		if err := fleetChanges(ctx, o, f, e, fl); err != nil {
			return err
		}
	}
	if o.fleetIdle > 0 {
		if err := sleepCtx(ctx, 3*time.Second); err != nil {
			return err
		}
		if f.Idle, err = idleSpan(ctx, o, fl); err != nil {
			return err
		}
	}
	if o.fleetConvergeWrites > 0 {
		if err := fleetConverge(ctx, o, f, e, ctlBin, fl); err != nil {
			return err
		}
	}
	f.Targets = f.targets()
	return nil
}

// prepareFlip picks the two variants of the flipped route, the sticky key
// that tells them apart, and which one changes the stored value.
func (e *latencyEnv) prepareFlip(ctx context.Context) error {
	var err error
	if e.variants, err = routeVariants(e.cfg, e.route, "eu-central", "eu-west"); err != nil {
		return err
	}
	if e.flipKey, e.flipPool, err = flipKey(e.cfg, e.route, e.variants); err != nil {
		return err
	}
	e.next, err = e.nextVariant(ctx, e.route, e.variants)
	return err
}

// measureBackground reads the etcd counters over -fleet-background with
// the bench's watchers open and no agent running.
func measureBackground(ctx context.Context, o options, c *etcdCluster) (hopRate, error) {
	logf(o, "fleet: measuring the etcd counters' background for %v (no agent running) ...", o.fleetBackground)
	a, err := readEtcdCounters(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, o.fleetBackground); err != nil {
		return nil, err
	}
	b, err := readEtcdCounters(ctx, c)
	if err != nil {
		return nil, err
	}
	return ratesBetween(a, b), nil
}

func fleetChanges(ctx context.Context, o options, f *FleetReport, e *latencyEnv, fl *fleet) error {
	agents, c, floor, status := fl.agents, fl.cluster, fl.floor, fl.status
	pids := append(agentPids(agents), c.pids()...)
	waitQuiet(ctx, o, pids...)
	r := &changeRunner{latencyEnv: e, o: o, agents: agents, cluster: c, floor: floor, status: status}
	r.start(ctx)
	defer r.stop()
	c0 := sampleCPU(pids...)
	fc := &FleetChange{}
	logf(o, "fleet: %d isolated changes, each timed to %d agents and %d plain watchers ...", o.fleetChanges, len(agents), len(floor.clients))
	samples, err := r.runChanges(ctx, o.fleetChanges, fc)
	if err != nil && (ctx.Err() != nil || len(samples) == 0) {
		return err
	}
	f.Change = summarizeChange(samples, o.fleetLead, fc.QueriesWaitingAtPut)
	if err != nil {
		// Keep what was measured: the report says where it stopped.
		f.Change.Error = err.Error()
		logf(o, "fleet: changes stopped after %d: %v", len(samples), err)
	}
	f.Change.ForeignCPUPct = foreignPct(c0, sampleCPU(pids...))
	logf(o, "fleet: change → all %d agents p50 %.2f ms, p99 %.2f ms; floor p50 %.2f ms, p99 %.2f ms (×%.2f)", len(agents),
		f.Change.All.P50, f.Change.All.P99, f.Change.Floor.P50, f.Change.Floor.P99, f.Change.RatioP50)
	return nil
}

// fleetConverge stops all but -fleet-converge-agents agents, then times
// regionctl writes with --wait-converged back to back.
func fleetConverge(ctx context.Context, o options, f *FleetReport, e *latencyEnv, ctlBin string, fl *fleet) error {
	agents, c, cli, status := fl.agents, fl.cluster, fl.cli, fl.status
	keep := agents[:o.fleetConvergeAgents]
	stopAgents(agents[o.fleetConvergeAgents:], 10*time.Second)
	if err := status.waitCount(ctx, len(keep), 30*time.Second); err != nil {
		return fmt.Errorf("fleet: status keys of the stopped agents: %w", err)
	}
	r := &convergeRunner{o: o, bin: ctlBin, endpoints: c.memberURLs(), root: fleetRoot, route: e.route,
		pools: [2]string{"eu-central", "eu-west"}, next: e.next, agents: len(keep), status: status}
	if err := r.watchEpoch(ctx, cli); err != nil {
		return err
	}
	pids := append(agentPids(keep), c.pids()...)
	waitQuiet(ctx, o, pids...)
	c0 := sampleCPU(pids...)
	logf(o, "fleet: %d regionctl --wait-converged writes back to back, %d agents ...", o.fleetConvergeWrites, len(keep))
	samples, err := r.run(ctx, o.fleetConvergeWrites)
	if err != nil && (ctx.Err() != nil || len(samples) == 0) {
		return err
	}
	f.Converge = summarizeConverge(samples, len(keep))
	if err != nil {
		f.Converge.Error = err.Error()
		logf(o, "fleet: regionctl writes stopped after %d: %v", len(samples), err)
	}
	f.Converge.ForeignCPUPct = foreignPct(c0, sampleCPU(pids...))
	endpoints, _, _ := fleetTopology(c, o.fleetAgents, o.fleetViaProxy)
	logf(o, "fleet: echo floor: %d plain watchers on the kept agents' endpoints, %d triggers ...", len(keep), o.fleetConvergeWrites)
	echo, err := echoFloor(ctx, o, cli, endpoints[:len(keep)], o.fleetConvergeWrites)
	if err != nil {
		logf(o, "fleet: echo floor stopped after %d: %v", len(echo), err)
	}
	f.Converge.EchoFloor = dist(echo)
	if f.Converge.EchoFloor.P50 > 0 {
		f.Converge.StatusRatioP50 = f.Converge.CommitToStatus.P50 / f.Converge.EchoFloor.P50
	}
	logf(o, "fleet: --wait-converged commit → exit p50 %.1f ms, p99 %.1f ms", f.Converge.CommitToExit.P50, f.Converge.CommitToExit.P99)
	return nil
}

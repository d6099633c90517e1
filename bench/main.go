// Command bench is regiond's latency and throughput harness. It builds a
// real etcd and the regiond binary, runs them as processes on loopback, and
// reports in one run: the raw etcd put→watch floor; put→/v1/resolve and
// put→snapshot-file visibility; a burst of puts (last ack → file, and file
// rewrites); and the initial sync of a large store (time, peak RSS). The
// fleet phase (-phases fleet, not in the default) runs 100 agents on a
// 3-member cluster, half of them through etcd's grpc-proxy.
//
//	go run ./bench                  # from the module root; see bench/README.md
//	go run ./bench -json            # machine-readable
//	go run ./bench -phases fleet    # ~20 minutes
//
// It is a harness, not a test: nothing here asserts timings.
package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/regiond/regiond/routing"
)

type options struct {
	puts, burst, burstWorkers, syncKeys, syncPools, runs int
	gapMin, gapMax, pollInterval, waitQuiet              time.Duration
	json, keep, noSnapshot, pollNetHTTP                  bool
	phases                                               map[string]bool
	cpuprofile, workDir, example, etcdBin, agentBin      string
	jsonFile                                             string
	agentEnv                                             string

	fleetAgents, fleetViaProxy, fleetBatch, fleetChanges         int
	fleetConvergeAgents, fleetConvergeWrites                     int
	fleetGap, fleetLead, fleetStatusWait, fleetIdle, fleetSample time.Duration
	fleetBackground, fleetConvergeWait                           time.Duration
}

// knownPhases are the values -phases accepts.
var knownPhases = map[string]bool{"latency": true, "burst": true, "sync": true, "fleet": true, "front": true}

func parseFlags() options {
	var o options
	var phases string
	flag.IntVar(&o.puts, "puts", 500, "isolated puts per latency measurement (file phase and resolve phase each)")
	flag.DurationVar(&o.gapMin, "gap-min", 15*time.Millisecond, "least time between isolated puts")
	flag.DurationVar(&o.gapMax, "gap-max", 20*time.Millisecond, "most time between isolated puts (uniformly random in between)")
	flag.DurationVar(&o.pollInterval, "poll-interval", 0, "pause between /v1/resolve polls (0: back to back)")
	flag.BoolVar(&o.pollNetHTTP, "poll-nethttp", false,
		"poll /v1/resolve with net/http's client and encoding/json instead of the bench's allocation-free HTTP/1.1 getter (several times more CPU per poll)")
	flag.IntVar(&o.burst, "burst", 2000, "puts in the burst")
	flag.IntVar(&o.burstWorkers, "burst-workers", 16, "concurrent putters in the burst (one route each)")
	flag.IntVar(&o.syncKeys, "sync-keys", 10000, "keys in the initial-sync store")
	flag.IntVar(&o.syncPools, "sync-pools", 200, "generated pools (with health checks) in the initial-sync store")
	flag.DurationVar(&o.waitQuiet, "wait-quiet", 30*time.Second,
		"before each run, wait up to this long for other processes to use < 10% of the CPUs (0: don't wait)")
	flag.IntVar(&o.runs, "runs", 3, "repetitions of every measurement; the report shows medians")
	flag.StringVar(&phases, "phases", "latency,burst,sync",
		"which measurements to run, comma-separated: latency, burst, sync (the default, ~3 minutes), and fleet "+
			"(-fleet-agents agents on a 3-member cluster, half through etcd's grpc-proxy: 20–45 minutes with the default -fleet-idle 10m, "+
			"so not in the default; quick: -phases fleet -fleet-idle 2m), and front (the PHP front door under php-fpm + nginx with wrk, ~2 minutes; no etcd)")
	fleetFlags(&o)
	frontFlags()
	flag.BoolVar(&o.json, "json", false, "print the report as JSON")
	flag.StringVar(&o.jsonFile, "json-file", "", "also write the report as JSON to this file")
	flag.BoolVar(&o.noSnapshot, "no-snapshot", false,
		"diagnostic: run the agent without a snapshot file (--snapshot=\"\") and measure only put → /v1/resolve")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (logs, etcd data, snapshots)")
	flag.StringVar(&o.workDir, "work-dir", "", "work directory (default: a new temp directory); etcd's data lives here")
	flag.StringVar(&o.example, "example", "examples/routing.yaml", "the fleet loaded for the latency and burst phases")
	flag.StringVar(&o.etcdBin, "etcd", "", "use this etcd binary instead of building go.etcd.io/etcd/server/v3")
	flag.StringVar(&o.agentEnv, "agent-env", "", `extra environment for the regiond processes, "K=V K=V" (e.g. "GOGC=50 GOMAXPROCS=1"), for experiments`)
	flag.StringVar(&o.agentBin, "regiond", "", "use this regiond binary instead of building ./cmd/regiond (e.g. a release, or an experiment)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", os.Getenv("REGIOND_BENCH_CPUPROFILE"),
		"write CPU profiles of the agents to FILE.latency, FILE.sync-N (runs bench/profagent, the agent with pprof, instead of cmd/regiond); default $REGIOND_BENCH_CPUPROFILE")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./bench [flags]   (from the module root)\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	o.phases = map[string]bool{}
	for _, p := range strings.Split(phases, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if !knownPhases[p] {
				fmt.Fprintf(os.Stderr, "bench: -phases: unknown phase %q (want latency, burst, sync, fleet or front)\n", p)
				os.Exit(2)
			}
			o.phases[p] = true
		}
	}
	if o.phases["fleet"] {
		if err := o.validateFleet(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
	}
	return o
}

func main() {
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.phases["front"] {
		// The PHP front door under php-fpm + nginx: no etcd, no agent.
		if err := runFront(ctx, o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		delete(o.phases, "front")
		if len(o.phases) == 0 {
			return
		}
	}
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if o.jsonFile != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.jsonFile, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	if o.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
		return
	}
	printReport(os.Stdout, rep)
}

func logf(o options, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// moduleRoot finds the directory of go.mod from the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run the bench from inside the regiond module (go run ./bench)")
	}
	return filepath.Dir(mod), nil
}

func run(ctx context.Context, o options) (rep *Report, err error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	work := o.workDir
	if work == "" {
		if work, err = os.MkdirTemp("", "regiond-bench-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, err
	}
	// Snapshots on tmpfs, as in production (/dev/shm/regiond/table.json).
	shm := filepath.Join(work, "shm")
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if shm, err = os.MkdirTemp("/dev/shm", "regiond-bench-"); err != nil {
			return nil, err
		}
	}
	defer func() {
		if o.keep || err != nil {
			fmt.Fprintf(os.Stderr, "bench: work directory kept: %s (snapshots: %s)\n", work, shm)
			return
		}
		os.RemoveAll(work)
		os.RemoveAll(shm)
	}()

	rep = &Report{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Runs: o.runs, Puts: o.puts,
		GapMS: [2]float64{ms(o.gapMin), ms(o.gapMax)}, SnapshotDir: shm, EtcdDataDir: work}

	bin := filepath.Join(work, "bin")
	etcdBin := o.etcdBin
	if etcdBin == "" {
		etcdBin = filepath.Join(bin, "etcd")
		logf(o, "building etcd (go.etcd.io/etcd/server/v3) ...")
		if err := goBuild(ctx, root, etcdBin, "go.etcd.io/etcd/server/v3"); err != nil {
			return nil, err
		}
	}
	agentPkg := "./cmd/regiond"
	if o.cpuprofile != "" {
		agentPkg = "./bench/profagent"
		if o.cpuprofile, err = filepath.Abs(o.cpuprofile); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(o.cpuprofile), 0o755); err != nil {
			return nil, err
		}
	}
	agentBin := o.agentBin
	if agentBin == "" {
		agentBin = filepath.Join(bin, "regiond")
		// The production build: without `regiond dev`'s embedded etcd.
		logf(o, "building %s -tags nodev ...", agentPkg)
		if err := goBuild(ctx, root, agentBin, agentPkg, "-tags", "nodev"); err != nil {
			return nil, err
		}
		rep.Agent = buildRevision(root, agentBin)
	} else {
		rep.Agent = agentBin
	}
	if v, err := exec.Command(etcdBin, "--version").Output(); err == nil {
		rep.EtcdVersion = strings.TrimPrefix(strings.SplitN(string(v), "\n", 2)[0], "etcd Version: ")
	}

	if o.phases["latency"] || o.phases["burst"] || o.phases["sync"] {
		if err := runSingle(ctx, o, rep, root, work, shm, etcdBin, agentBin); err != nil {
			return nil, err
		}
	}
	if o.phases["fleet"] {
		if err := runFleet(ctx, o, rep, root, work, shm, etcdBin, agentBin); err != nil {
			return nil, err
		}
	}
	rep.summarize()
	return rep, nil
}

// runSingle runs the phases on one etcd and one agent (latency, burst,
// sync); the etcd is stopped when it returns.
func runSingle(ctx context.Context, o options, rep *Report, root, work, shm, etcdBin, agentBin string) error {
	etcd, err := startEtcd(ctx, etcdBin, filepath.Join(work, "etcd"), filepath.Join(work, "etcd.log"))
	if err != nil {
		return err
	}
	defer etcd.stop(10 * time.Second)
	logf(o, "etcd %s serving at %s (data in %s)", rep.EtcdVersion, etcd.clientURL, work)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.clientURL}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()

	cfg, err := loadExample(filepath.Join(root, o.example))
	if err != nil {
		return err
	}
	base := agentOpts{bin: agentBin, endpoint: etcd.clientURL, cpuprofile: o.cpuprofile, env: o.agentEnv}

	if o.noSnapshot {
		delete(o.phases, "burst")
	}
	if o.phases["latency"] || o.phases["burst"] {
		if err := runLatencyAndBurst(ctx, o, rep, cli, cfg, base, work, shm, etcd); err != nil {
			return err
		}
	}
	if o.phases["sync"] {
		if err := runSyncPhase(ctx, o, rep, cli, cfg, base, work, shm, etcd.pid()); err != nil {
			return err
		}
	}
	return nil
}

func runLatencyAndBurst(ctx context.Context, o options, rep *Report, cli *clientv3.Client, cfg *routing.Config,
	base agentOpts, work, shm string, etcd *etcdProc) error {
	const root = "/regiond/v1"
	prefix := root + "/routing/"
	vals, err := configValues(cfg, 1)
	if err != nil {
		return err
	}
	rev, err := putAll(ctx, cli, prefix, vals)
	if err != nil {
		return err
	}
	ao := base
	ao.prefix, ao.node, ao.dir = root, "bench", filepath.Join(work, "agent")
	ao.snapshot = filepath.Join(shm, "agent", "table.json")
	ao.noSnapshot = o.noSnapshot
	if ao.cpuprofile != "" {
		ao.cpuprofile += ".latency"
	}
	fw, err := watchFile(ao.snapshot)
	if err != nil {
		return err
	}
	defer fw.Close()
	rep.FileWatch = fw.Kind
	ag, err := startAgent(ao)
	if err != nil {
		return err
	}
	defer ag.stop(10 * time.Second)
	if err := ag.waitFor(ctx, "the loaded revision", 30*time.Second, time.Millisecond, func() bool {
		if o.noSnapshot {
			code, b, err := ag.get("/v1/table")
			r, perr := parseRevision(b)
			return err == nil && code == 200 && perr == nil && r >= rev
		}
		r, err := readRevision(ao.snapshot)
		return err == nil && r >= rev
	}); err != nil {
		return err
	}
	logf(o, "regiond (pid %d) synced %d keys at revision %d; API %s, snapshot %s", ag.pid(), len(vals), rev, ag.base, ao.snapshot)
	if hwm, err := procStatus(ag.pid(), "VmHWM"); err == nil {
		rep.ExampleRSSMiB = float64(hwm) / (1 << 20)
	}
	if file, err := procStatus(ag.pid(), "RssFile"); err == nil {
		rep.ExampleFileMiB = float64(file) / (1 << 20)
	}

	e := &latencyEnv{opts: o, cli: cli, ag: ag, fw: fw, prefix: prefix, route: "PL", cfg: cfg, lastRev: rev}
	if e.variants, err = routeVariants(cfg, e.route, "eu-central", "eu-west"); err != nil {
		return err
	}
	if e.flipKey, e.flipPool, err = flipKey(cfg, e.route, e.variants); err != nil {
		return err
	}
	if e.next, err = e.nextVariant(ctx, e.route, e.variants); err != nil {
		return err
	}
	if err := e.startFloorWatch(ctx); err != nil {
		return err
	}
	var countries []string
	for name := range cfg.Routes {
		if routing.IsCountry(name) {
			countries = append(countries, name)
		}
	}
	sort.Strings(countries)
	if o.phases["burst"] {
		if err := e.setupBurst(ctx, o.burstWorkers, countries); err != nil {
			return err
		}
	}
	for i := 0; i < o.runs; i++ {
		waitQuiet(ctx, o, etcd.pid(), ag.pid())
		if o.phases["latency"] {
			var lr LatencyRun
			c0 := sampleCPU(etcd.pid(), ag.pid())
			logf(o, "run %d/%d: %d isolated puts → plain watch + snapshot file ...", i+1, o.runs, o.puts)
			if err := e.runFilePhase(ctx, o.puts, &lr); err != nil {
				return err
			}
			logf(o, "run %d/%d: %d isolated puts → plain watch + /v1/resolve ...", i+1, o.runs, o.puts)
			if err := e.runResolvePhase(ctx, o.puts, &lr); err != nil {
				return err
			}
			logf(o, "run %d/%d: %d isolated puts → plain watch + blocking /v1/resolve query ...", i+1, o.runs, o.puts)
			if err := e.runBlockingPhase(ctx, o.puts, &lr); err != nil {
				return err
			}
			lr.ForeignCPUPct = foreignPct(c0, sampleCPU(etcd.pid(), ag.pid()))
			logf(o, "run %d/%d: floor p50 %.3f ms, file p50 %.3f ms, resolve p50 %.3f ms polled, %.3f ms blocking (other processes: %.0f%% CPU)", i+1, o.runs,
				lr.Floor.P50, lr.File.P50, lr.Resolve.P50, lr.Blocking.P50, lr.ForeignCPUPct)
			p50, _ := ag.metric(`regiond_watch_apply_seconds{quantile="0.5"}`)
			p99, _ := ag.metric(`regiond_watch_apply_seconds{quantile="0.99"}`)
			logf(o, "run %d/%d: inside the agent, watch response → table swapped: p50 %.3f ms, p99 %.3f ms", i+1, o.runs, p50*1e3, p99*1e3)
			rep.LatencyRuns = append(rep.LatencyRuns, lr)
		}
		if o.phases["burst"] {
			time.Sleep(100 * time.Millisecond)
			c0 := sampleCPU(etcd.pid(), ag.pid())
			br, err := e.runBurst(ctx, o.burst)
			if err != nil {
				return err
			}
			br.ForeignCPUPct = foreignPct(c0, sampleCPU(etcd.pid(), ag.pid()))
			logf(o, "run %d/%d: burst of %d puts in %.0f ms; last ack → file %.2f ms; %d rewrites (other processes: %.0f%% CPU)", i+1, o.runs,
				br.Puts, br.DurationMS, br.LastAckToFileMS, br.Rewrites, br.ForeignCPUPct)
			rep.BurstRuns = append(rep.BurstRuns, br)
			time.Sleep(100 * time.Millisecond)
		}
	}
	if o.noSnapshot {
		return nil
	}
	// The file must catch up with the last put and decode as a table.
	if err := ag.waitFor(ctx, "snapshot file at the last put's revision", 5*time.Second, time.Millisecond, func() bool {
		r, err := readRevision(ao.snapshot)
		return err == nil && r >= e.lastRev
	}); err != nil {
		return err
	}
	b, err := os.ReadFile(ao.snapshot)
	if err != nil {
		return err
	}
	t, _, err := routing.LoadTableJSON(b)
	if err != nil {
		return fmt.Errorf("the snapshot file does not load: %w", err)
	}
	rep.FileBytes = len(b)
	if t.Revision() < e.lastRev {
		return fmt.Errorf("the snapshot file is at revision %d, below the last put %d", t.Revision(), e.lastRev)
	}
	return nil
}

func runSyncPhase(ctx context.Context, o options, rep *Report, cli *clientv3.Client, cfg *routing.Config,
	base agentOpts, work, shm string, etcdPid int) error {
	const root = "/regiond-sync/v1"
	vals, err := syncDataset(cfg, o.syncKeys, o.syncPools)
	if err != nil {
		return err
	}
	logf(o, "loading %d keys under %s/routing/ ...", len(vals), root)
	rev, err := putAll(ctx, cli, root+"/routing/", vals)
	if err != nil {
		return err
	}
	base.prefix = root
	for i := 0; i < o.runs; i++ {
		waitQuiet(ctx, o, etcdPid)
		c0 := sampleCPU(etcdPid)
		sr, err := runSync(ctx, cli, syncAgentOpts(base, work, shm, i+1), len(vals), rev)
		if err != nil {
			return err
		}
		sr.ForeignCPUPct = foreignPct(c0, sampleCPU(etcdPid))
		logf(o, "sync run %d/%d: list %.1f ms, start → ready %.1f ms, peak RSS %.1f MiB (other processes: %.0f%% CPU)", i+1, o.runs,
			sr.ListMS, sr.StartToReadyMS, sr.PeakRSSMiB, sr.ForeignCPUPct)
		rep.SyncRuns = append(rep.SyncRuns, sr)
	}
	return nil
}

// waitQuiet waits, up to -wait-quiet, for a second in which processes other
// than the bench, etcd and regiond use less than 10% of the CPUs: the
// figures are meaningless on a machine busy with something else.
func waitQuiet(ctx context.Context, o options, pids ...int) {
	if o.waitQuiet <= 0 {
		return
	}
	deadline := time.Now().Add(o.waitQuiet)
	last := -1.0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		a := sampleCPU(pids...)
		time.Sleep(time.Second)
		if last = foreignPct(a, sampleCPU(pids...)); last < 10 {
			return
		}
	}
	if last >= 0 {
		logf(o, "other processes still use %.0f%% of the CPUs after waiting %v; measuring anyway (see foreign_cpu_pct)", last, o.waitQuiet)
	}
}

// buildRevision returns the commit a binary was built from, with "+dirty"
// when tracked files outside bench/ had uncommitted changes: from the
// binary's build info, else from git.
func buildRevision(root, bin string) string {
	if bi, err := buildinfo.ReadFile(bin); err == nil {
		rev, dirty := "", ""
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				rev = s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
		if rev != "" {
			return rev + dirty
		}
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench").Output(); err == nil && len(st) > 0 {
		rev += "+dirty"
	}
	return rev
}

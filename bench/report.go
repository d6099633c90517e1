package main

import (
	"fmt"
	"io"
)

// Report is the bench's output; the top-level figures are medians over
// the runs, whose details follow.
type Report struct {
	// CPUs is the machine's logical CPUs (runtime.NumCPU).
	CPUs int `json:"cpus"`
	// GoVersion is the Go version the bench was built with.
	GoVersion string `json:"go_version"`
	// Agent names the regiond build measured: its VCS revision, with
	// "+dirty" when the work tree had uncommitted changes.
	Agent string `json:"agent_build"`
	// ExampleRSSMiB is the agent's VmHWM once synced with the example
	// fleet, before the latency runs: its baseline footprint.
	ExampleRSSMiB float64 `json:"example_fleet_peak_rss_mib"`
	// ExampleFileMiB is the part of it that is pages of the executable
	// (RssFile).
	ExampleFileMiB float64 `json:"example_fleet_rss_file_mib"`
	// EtcdVersion is what the etcd binary's --version says.
	EtcdVersion string `json:"etcd_version"`
	// EtcdDataDir is the work directory, which holds etcd's data (its
	// WAL fsyncs go to that disk).
	EtcdDataDir string `json:"etcd_data_dir"`
	// SnapshotDir is the directory of the agents' snapshot files (under
	// /dev/shm when there is one).
	SnapshotDir string `json:"snapshot_dir"`
	// FileWatch is how the bench sees the file replaced: "inotify", or
	// "poll-100us" where there is none.
	FileWatch string `json:"file_watch"`
	// FileBytes is the size of the example fleet's snapshot file after
	// the latency and burst runs; 0 with -no-snapshot.
	FileBytes int `json:"file_bytes"`
	// Runs is the number of runs of every measurement (-runs).
	Runs int `json:"runs"`
	// Puts is the number of isolated puts per phase per run (-puts).
	Puts int `json:"puts_per_phase"`
	// GapMS is the least and the most time between isolated puts, in ms
	// (-gap-min, -gap-max).
	GapMS [2]float64 `json:"gap_ms"`
	// ForeignCPU is the median and the largest share of all CPUs used by
	// other processes during a run: above ~10% the figures are noise.
	ForeignCPU [2]float64 `json:"foreign_cpu_pct_median_max"`

	// Floor is LatencyRun.Floor, each percentile the median over the
	// runs (N their sum); so are the Dists below, each of its namesake.
	Floor Dist `json:"floor"`
	// File is LatencyRun.File over the runs.
	File Dist `json:"file"`
	// FileMinusFloor is LatencyRun.FileMinusFloor over the runs.
	FileMinusFloor Dist `json:"file_minus_floor_paired"`
	// FileEvent is LatencyRun.FileEvent over the runs.
	FileEvent Dist `json:"file_event"`
	// Resolve is LatencyRun.Resolve over the runs.
	Resolve Dist `json:"resolve"`
	// FloorResolvePhase is LatencyRun.FloorResolvePhase over the runs.
	FloorResolvePhase Dist `json:"floor_resolve_phase"`
	// ResolveMinusFloor is LatencyRun.ResolveMinusFloor over the runs.
	ResolveMinusFloor Dist `json:"resolve_minus_floor_paired"`
	// Blocking is LatencyRun.Blocking over the runs.
	Blocking Dist `json:"blocking"`
	// FloorBlocking is LatencyRun.FloorBlockingPhase over the runs.
	FloorBlocking Dist `json:"floor_blocking_phase"`
	// BlockingMinus is LatencyRun.BlockingMinusFloor over the runs.
	BlockingMinus Dist `json:"blocking_minus_floor_paired"`
	// Ack is LatencyRun.Ack over the runs.
	Ack Dist `json:"put_ack"`
	// PollsPerPut is the median over the runs of LatencyRun.PollsPerPut.
	PollsPerPut float64 `json:"polls_per_put"`
	// Anomalies is LatencyRun.Anomalies summed over the runs.
	Anomalies int `json:"anomalies"`

	// Burst is the burst phase, its measured figures the medians over
	// the runs; nil when it did not run.
	Burst *BurstRun `json:"burst,omitempty"`
	// Sync is the initial-sync phase, its timings and memory the medians
	// over the runs; nil when it did not run.
	Sync *SyncRun `json:"sync,omitempty"`
	// Fleet is the fleet phase (-phases fleet); its targets are in
	// Targets, named "fleet: …".
	Fleet *FleetReport `json:"fleet,omitempty"`

	// Targets are the goals checked against the medians, fleet's too.
	Targets []Target `json:"targets"`

	// LatencyRuns are the latency phase's runs, in order.
	LatencyRuns []LatencyRun `json:"latency_runs,omitempty"`
	// BurstRuns are the burst phase's runs, in order.
	BurstRuns []BurstRun `json:"burst_runs,omitempty"`
	// SyncRuns are the initial-sync phase's runs, in order.
	SyncRuns []SyncRun `json:"sync_runs,omitempty"`
}

// Target is one goal of issue 3, checked against the medians.
type Target struct {
	// Name says what is measured ("burst: last ack → file").
	Name string `json:"name"`
	// Value is the figure, from the medians, in Unit.
	Value float64 `json:"value"`
	// Limit is the most Value may be, in Unit.
	Limit float64 `json:"limit"`
	// Unit is Value's and Limit's unit ("ms", "×", "MiB"; empty for a
	// count).
	Unit string `json:"unit"`
	// Met reports whether the target was met: Value ≤ Limit.
	Met bool `json:"met"`
	// PerRun is the same figure in each run: how far the machine's noise
	// moves it.
	PerRun []float64 `json:"per_run,omitempty"`
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	return median(v)
}

func (r *Report) summarize() {
	var foreign []float64
	for _, x := range r.LatencyRuns {
		foreign = append(foreign, x.ForeignCPUPct)
	}
	for _, x := range r.BurstRuns {
		foreign = append(foreign, x.ForeignCPUPct)
	}
	for _, x := range r.SyncRuns {
		foreign = append(foreign, x.ForeignCPUPct)
	}
	if f := r.Fleet; f != nil {
		if f.Change != nil {
			foreign = append(foreign, f.Change.ForeignCPUPct)
		}
		if f.Idle != nil {
			foreign = append(foreign, f.Idle.ForeignCPUPct)
		}
		if f.Converge != nil {
			foreign = append(foreign, f.Converge.ForeignCPUPct)
		}
	}
	if len(foreign) > 0 {
		r.ForeignCPU = [2]float64{median(foreign), foreign[0]}
		for _, f := range foreign {
			r.ForeignCPU[1] = max(r.ForeignCPU[1], f)
		}
	}
	if lr := r.LatencyRuns; len(lr) > 0 {
		pick := func(f func(LatencyRun) Dist) Dist {
			ds := make([]Dist, len(lr))
			for i, x := range lr {
				ds[i] = f(x)
			}
			return medianDist(ds)
		}
		r.Floor = pick(func(x LatencyRun) Dist { return x.Floor })
		r.File = pick(func(x LatencyRun) Dist { return x.File })
		r.FileMinusFloor = pick(func(x LatencyRun) Dist { return x.FileMinusFloor })
		r.FileEvent = pick(func(x LatencyRun) Dist { return x.FileEvent })
		r.Resolve = pick(func(x LatencyRun) Dist { return x.Resolve })
		r.FloorResolvePhase = pick(func(x LatencyRun) Dist { return x.FloorResolvePhase })
		r.ResolveMinusFloor = pick(func(x LatencyRun) Dist { return x.ResolveMinusFloor })
		r.Blocking = pick(func(x LatencyRun) Dist { return x.Blocking })
		r.FloorBlocking = pick(func(x LatencyRun) Dist { return x.FloorBlockingPhase })
		r.BlockingMinus = pick(func(x LatencyRun) Dist { return x.BlockingMinusFloor })
		r.Ack = pick(func(x LatencyRun) Dist { return x.Ack })
		r.PollsPerPut = medianOf(lr, func(x LatencyRun) float64 { return x.PollsPerPut })
		for _, x := range lr {
			r.Anomalies += x.Anomalies
		}
		// p50 − floor p50 and p99 / floor p99 of a figure, over the
		// medians and in each run.
		p50Gap := func(name string, f func(LatencyRun) Dist) Target {
			m := pick(f)
			t := Target{Name: name + " p50 − floor p50", Value: m.P50 - r.Floor.P50, Limit: 0.3, Unit: "ms"}
			for _, x := range lr {
				t.PerRun = append(t.PerRun, f(x).P50-x.Floor.P50)
			}
			t.Met = t.Value <= t.Limit
			return t
		}
		p99Ratio := func(name string, f func(LatencyRun) Dist) Target {
			m := pick(f)
			t := Target{Name: name + " p99 / floor p99", Value: m.P99 / r.Floor.P99, Limit: 1.3, Unit: "×"}
			for _, x := range lr {
				t.PerRun = append(t.PerRun, f(x).P99/x.Floor.P99)
			}
			t.Met = t.Value <= t.Limit
			return t
		}
		blocking := func(x LatencyRun) Dist { return x.Blocking }
		polled := func(x LatencyRun) Dist { return x.Resolve }
		r.Targets = append(r.Targets,
			p50Gap("put→/v1/resolve (blocking)", blocking), p99Ratio("put→/v1/resolve (blocking)", blocking),
			p50Gap("put→/v1/resolve (polled)", polled), p99Ratio("put→/v1/resolve (polled)", polled))
		if r.File.N > 0 {
			file := func(x LatencyRun) Dist { return x.File }
			r.Targets = append(r.Targets, p50Gap("put→file (inotify + read)", file), p99Ratio("put→file (inotify + read)", file))
		}
		if r.FileEvent.N > 0 {
			event := func(x LatencyRun) Dist { return x.FileEvent }
			r.Targets = append(r.Targets, p50Gap("put→file renamed (signalled)", event), p99Ratio("put→file renamed (signalled)", event))
		}
	}
	if br := r.BurstRuns; len(br) > 0 {
		m := BurstRun{Puts: br[0].Puts, Workers: br[0].Workers,
			DurationMS:       medianOf(br, func(x BurstRun) float64 { return x.DurationMS }),
			PutsPerSec:       medianOf(br, func(x BurstRun) float64 { return x.PutsPerSec }),
			LastAckToFileMS:  medianOf(br, func(x BurstRun) float64 { return x.LastAckToFileMS }),
			LastAckToTableMS: medianOf(br, func(x BurstRun) float64 { return x.LastAckToTableMS }),
			Rewrites:         int(medianOf(br, func(x BurstRun) float64 { return float64(x.Rewrites) })),
			RewritesMetric:   int(medianOf(br, func(x BurstRun) float64 { return float64(x.RewritesMetric) })),
			TableSwaps:       int(medianOf(br, func(x BurstRun) float64 { return float64(x.TableSwaps) })),
		}
		r.Burst = &m
		r.Targets = append(r.Targets,
			Target{Name: "burst: last ack → file", Value: m.LastAckToFileMS, Limit: 10, Unit: "ms", Met: m.LastAckToFileMS <= 10},
			Target{Name: "burst: file rewrites", Value: float64(max(m.Rewrites, m.RewritesMetric)), Limit: 20, Unit: "", Met: max(m.Rewrites, m.RewritesMetric) <= 20})
	}
	if sr := r.SyncRuns; len(sr) > 0 {
		m := SyncRun{Keys: sr[0].Keys,
			ListMS:         medianOf(sr, func(x SyncRun) float64 { return x.ListMS }),
			GetMS:          medianOf(sr, func(x SyncRun) float64 { return x.GetMS }),
			StartToReadyMS: medianOf(sr, func(x SyncRun) float64 { return x.StartToReadyMS }),
			StartToFileMS:  medianOf(sr, func(x SyncRun) float64 { return x.StartToFileMS }),
			PeakRSSMiB:     medianOf(sr, func(x SyncRun) float64 { return x.PeakRSSMiB }),
			RSSMiB:         medianOf(sr, func(x SyncRun) float64 { return x.RSSMiB }),
			AnonMiB:        medianOf(sr, func(x SyncRun) float64 { return x.AnonMiB }),
			FileMiB:        medianOf(sr, func(x SyncRun) float64 { return x.FileMiB }),
			FileBytes:      sr[0].FileBytes,
		}
		r.Sync = &m
		r.Targets = append(r.Targets,
			Target{Name: fmt.Sprintf("sync of %d keys (list+compile+swap)", m.Keys), Value: m.ListMS, Limit: 60, Unit: "ms", Met: m.ListMS <= 60},
			Target{Name: "sync: peak RSS", Value: m.PeakRSSMiB, Limit: 30, Unit: "MiB", Met: m.PeakRSSMiB <= 30})
	}
	if r.Fleet != nil {
		r.Targets = append(r.Targets, r.Fleet.Targets...)
	}
}

func mark(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}

func printReport(w io.Writer, r *Report) {
	runs := fmt.Sprintf("median of %d run(s)", r.Runs)
	if len(r.LatencyRuns)+len(r.BurstRuns)+len(r.SyncRuns) == 0 {
		runs = "fleet phase only"
	}
	fmt.Fprintf(w, "regiond bench: regiond %s; %d CPUs, %s, etcd %s (real processes, data on %s), snapshots in %s %s; %s\n",
		r.Agent, r.CPUs, r.GoVersion, r.EtcdVersion, r.EtcdDataDir, r.SnapshotDir, paren(r.FileWatch), runs)
	fmt.Fprintf(w, "other processes used %.0f%% of the CPUs during a run (median; max %.0f%%)", r.ForeignCPU[0], r.ForeignCPU[1])
	if r.ForeignCPU[1] >= 10 {
		fmt.Fprintf(w, ": the machine was busy, figures are inflated")
	}
	fmt.Fprintln(w)
	if len(r.LatencyRuns) > 0 {
		fmt.Fprintf(w, "\nisolated puts (%d per phase per run, %.0f–%.0f ms apart)     p50      p90      p99      max  (ms)\n",
			r.Puts, r.GapMS[0], r.GapMS[1])
		row := func(name string, d Dist) {
			fmt.Fprintf(w, "  %-52s %8.3f %8.3f %8.3f %8.3f\n", name, d.P50, d.P90, d.P99, d.Max)
		}
		row("put ack (round trip of the Put)", r.Ack)
		row("etcd floor: put → plain clientv3 watch", r.Floor)
		row("regiond: put → snapshot file (inotify + read)", r.File)
		row("  per put: file − floor of the same put", r.FileMinusFloor)
		if r.FileEvent.N > 0 {
			row("  put → rename signalled (inotify), before the read", r.FileEvent)
		}
		row("regiond: put → blocking /v1/resolve?min_revision answers", r.Blocking)
		row("  floor on the same puts", r.FloorBlocking)
		row("  per put: blocking − floor of the same put", r.BlockingMinus)
		row("regiond: put → /v1/resolve polled back to back shows it", r.Resolve)
		row("  floor on the same puts (poller loading the CPUs)", r.FloorResolvePhase)
		row("  per put: polled − floor of the same put", r.ResolveMinusFloor)
		fmt.Fprintf(w, "  resolve polls per put (median): %.0f; decisions below the put's revision: %d; table JSON: %d bytes\n",
			r.PollsPerPut, r.Anomalies, r.FileBytes)
		fmt.Fprintf(w, "  vs the floor: blocking resolve p50 %+.3f ms, p99 ×%.2f;  polled resolve p50 %+.3f ms, p99 ×%.2f",
			r.Blocking.P50-r.Floor.P50, r.Blocking.P99/r.Floor.P99, r.Resolve.P50-r.Floor.P50, r.Resolve.P99/r.Floor.P99)
		if r.File.N > 0 {
			fmt.Fprintf(w, ";  file p50 %+.3f ms, p99 ×%.2f", r.File.P50-r.Floor.P50, r.File.P99/r.Floor.P99)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  vs the floor under the same polling load: polled resolve p50 %+.3f ms, p99 ×%.2f\n",
			r.Resolve.P50-r.FloorResolvePhase.P50, r.Resolve.P99/r.FloorResolvePhase.P99)
	}
	if b := r.Burst; b != nil {
		fmt.Fprintf(w, "\nburst: %d puts from %d workers in %.0f ms (%.0f puts/s)\n", b.Puts, b.Workers, b.DurationMS, b.PutsPerSec)
		fmt.Fprintf(w, "  last ack → file shows it: %.2f ms  (→ /v1/status shows it: %.2f ms)\n", b.LastAckToFileMS, b.LastAckToTableMS)
		fmt.Fprintf(w, "  file rewrites: %d (inotify), %d (regiond_snapshot_writes_total);  tables compiled and swapped: %d\n",
			b.Rewrites, b.RewritesMetric, b.TableSwaps)
	}
	if r.ExampleRSSMiB > 0 {
		fmt.Fprintf(w, "\nagent with the example fleet: peak RSS %.1f MiB, of which %.1f MiB executable pages\n", r.ExampleRSSMiB, r.ExampleFileMiB)
	}
	if s := r.Sync; s != nil {
		fmt.Fprintf(w, "\ninitial sync of %d keys (fresh agent, no snapshot file)\n", s.Keys)
		fmt.Fprintf(w, "  list+compile+swap (regiond_watch_last_list_duration_seconds): %.1f ms  (the same paged Get from the bench: %.1f ms)\n", s.ListMS, s.GetMS)
		fmt.Fprintf(w, "  process start → /readyz 200: %.1f ms;  → snapshot file written: %.1f ms (%d bytes)\n",
			s.StartToReadyMS, s.StartToFileMS, s.FileBytes)
		fmt.Fprintf(w, "  peak RSS (VmHWM): %.1f MiB;  RSS after sync: %.1f MiB = %.1f anonymous (heap, stacks) + %.1f executable pages\n",
			s.PeakRSSMiB, s.RSSMiB, s.AnonMiB, s.FileMiB)
	}
	if r.Fleet != nil {
		printFleet(w, r.Fleet)
	}
	if len(r.Targets) > 0 {
		fmt.Fprintf(w, "\ntargets (issue 3; fleet: issue 9)\n")
		for _, t := range r.Targets {
			fmt.Fprintf(w, "  %-47s %9.3f %-3s  target ≤ %g %-3s  %-7s", t.Name, t.Value, t.Unit, t.Limit, t.Unit, mark(t.Met))
			if len(t.PerRun) > 1 {
				fmt.Fprintf(w, "  runs:")
				for _, v := range t.PerRun {
					fmt.Fprintf(w, " %.3f", v)
				}
			}
			fmt.Fprintln(w)
		}
	}
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

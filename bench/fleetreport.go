package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// FleetReport is the fleet phase (issue 9): many agent processes on a
// 3-member cluster, some through etcd's grpc-proxy.
type FleetReport struct {
	// Agents is the number of agent processes started (-fleet-agents).
	Agents int `json:"agents"`
	// ViaProxy is how many of them reach etcd through the grpc-proxy
	// only (-fleet-via-proxy).
	ViaProxy int `json:"agents_via_proxy"`
	// Members is the number of etcd members in the cluster (3).
	Members int `json:"members"`
	// Topology says which endpoint each kind of client has.
	Topology string `json:"topology"`
	// StartSeconds is how long starting every agent (in batches, each
	// ready before the next) took.
	StartSeconds float64 `json:"start_seconds"`
	// Change is part 1, change → every agent serving it; nil when skipped
	// (-fleet-changes 0).
	Change *FleetChange `json:"change,omitempty"`
	// Idle is parts 2 and 3, the idle span; nil when skipped
	// (-fleet-idle 0).
	Idle *FleetIdle `json:"idle,omitempty"`
	// Converge is part 4, the --wait-converged writes; nil when skipped
	// (-fleet-converge-writes 0).
	Converge *FleetConverge `json:"wait_converged,omitempty"`
	// Targets are issue 9's, also in the report's targets.
	Targets []Target `json:"-"`
}

// FleetChange is change → every agent serving it, beside the fan-out
// floor, over isolated changes.
type FleetChange struct {
	// Changes is the number of measured changes (the warm-up ones not
	// counted).
	Changes int `json:"changes"`
	// LeadMS is how long before each Put the blocking queries were sent
	// (-fleet-lead), in ms.
	LeadMS float64 `json:"query_lead_ms"`
	// QueriesWaitingAtPut is how many agents had the blocking query
	// waiting when the first (warm-up) Put was sent.
	QueriesWaitingAtPut int `json:"queries_waiting_at_put"`
	// All is just before the Put → the last agent answering its blocking
	// /v1/resolve with the change.
	All Dist `json:"all_agents"`
	// Floor is just before the Put → the last of the bench's plain
	// watchers having the event.
	Floor Dist `json:"floor_all_watchers"`
	// RatioP50 is All.P50 / Floor.P50 (0 when Floor.P50 is 0).
	RatioP50 float64 `json:"ratio_p50"`
	// RatioP99 is All.P99 / Floor.P99 (0 when Floor.P50 is 0).
	RatioP99 float64 `json:"ratio_p99"`
	// AllProxied is All for the last of the proxied agents.
	AllProxied Dist `json:"all_agents_via_proxy"`
	// AllDirect is All for the last of the direct agents.
	AllDirect Dist `json:"all_agents_direct"`
	// FloorProxied is Floor for the last of the watchers through the proxy.
	FloorProxied Dist `json:"floor_via_proxy"`
	// FloorDirect is Floor for the last of the watchers on a member.
	FloorDirect Dist `json:"floor_direct"`
	// EachAgent is every single agent's answer, Put → answer.
	EachAgent Dist `json:"each_agent"`
	// EachWatcher is every single watcher's event, Put → event.
	EachWatcher Dist `json:"each_watcher"`
	// Status is the Put → the last agent's status key reporting the
	// change (what --wait-converged waits for).
	Status Dist `json:"status_keys"`
	// StatusMissed counts the changes whose status keys did not all
	// report it within -fleet-status-wait (left out of Status).
	StatusMissed int `json:"status_missed"`
	// ForeignCPUPct: see LatencyRun.
	ForeignCPUPct float64 `json:"foreign_cpu_pct"`
	// Error is why the changes stopped before -fleet-changes, if they did.
	Error string `json:"error,omitempty"`
}

// FleetIdle is what the idle fleet did over the idle span.
type FleetIdle struct {
	// Seconds is the idle span's length, between the two reads of etcd's
	// counters.
	Seconds float64 `json:"seconds"`
	// SampleSeconds is the interval of the connected samples
	// (-fleet-sample), in seconds.
	SampleSeconds float64 `json:"sample_interval_seconds"`
	// Relists is the increase of regiond_watch_resyncs_total summed over
	// agents, by reason.
	Relists map[string]float64 `json:"relists_by_reason"`
	// RelistsTotal is Relists summed over the reasons (target 0).
	RelistsTotal float64 `json:"relists"`
	// AgentsRelisted counts the agents that relisted at least once.
	AgentsRelisted int `json:"agents_relisted"`
	// ConnectedSamples are readings of regiond_watch_connected (one per
	// agent per sample).
	ConnectedSamples int `json:"connected_samples"`
	// DisconnectedSamples counts those that were not 1 (target 0).
	DisconnectedSamples int `json:"disconnected_samples"`
	// AgentsDisconnected counts the agents with a disconnected sample.
	AgentsDisconnected int `json:"agents_disconnected"`
	// StatusPuts counts the agents' status key puts (and deletes).
	StatusPuts int `json:"status_puts"`
	// Requests are the etcd requests of the idle span.
	Requests FleetRequests `json:"etcd_requests"`
	// ForeignCPUPct: see LatencyRun.
	ForeignCPUPct float64 `json:"foreign_cpu_pct"`
}

// FleetRequests are the idle span's gRPC requests, per agent per second,
// less the background (the same counters with the bench's clients open and
// no agent running). A request is a message a client sent: a unary call,
// or one message on a stream (a watch create or progress request, a lease
// keep-alive).
type FleetRequests struct {
	// FirstHopPerAgentPerSec is what the agents sent: the direct agents'
	// messages at their members plus the proxied agents' at the proxy,
	// divided by every agent (target ≤ 1).
	FirstHopPerAgentPerSec float64 `json:"first_hop_msgs_per_agent_per_sec"`
	// FirstHopRPCsPerAgentPerS is the same in RPCs started (a stream once).
	FirstHopRPCsPerAgentPerS float64 `json:"first_hop_rpcs_per_agent_per_sec"`
	// DirectPerAgentPerSec is the messages at the direct agents' members
	// divided by the direct agents (0 with none).
	DirectPerAgentPerSec float64 `json:"direct_msgs_per_direct_agent_per_sec"`
	// ProxiedPerAgentPerSec is the messages at the proxy divided by the
	// proxied agents (0 with none).
	ProxiedPerAgentPerSec float64 `json:"proxied_msgs_per_proxied_agent_per_sec"`
	// ClusterPerAgentPerSec is what the members received (the direct
	// agents' and what the proxy forwarded), divided by every agent.
	ClusterPerAgentPerSec float64 `json:"cluster_msgs_per_agent_per_sec"`
	// ProxyUpstreamPerSec is what the proxy sent on to its member.
	ProxyUpstreamPerSec float64 `json:"proxy_upstream_msgs_per_sec"`
	// BackgroundPerSec is the background subtracted: messages per second
	// at every member and the proxy before any agent ran (not per agent).
	BackgroundPerSec float64 `json:"background_msgs_per_sec"`
	// ByMethod are the rates by hop and method, in hop order, the largest
	// first; shares below 0.0005 per agent per second are left out.
	ByMethod []MethodRate `json:"by_method"`
}

// MethodRate is one gRPC method's share, per agent of the fleet.
type MethodRate struct {
	// Hop says whose counters: the direct agents' members, the proxy
	// (proxied agents), or the proxy's upstream member.
	Hop string `json:"hop"`
	// Method is the gRPC service and method ("etcdserverpb.Watch/Watch").
	Method string `json:"method"`
	// MsgsPerAgentPerSec is the messages received per second, divided by
	// every agent of the fleet.
	MsgsPerAgentPerSec float64 `json:"msgs_per_agent_per_sec"`
	// RPCsPerAgentPerSec is the same in RPCs started.
	RPCsPerAgentPerSec float64 `json:"rpcs_per_agent_per_sec"`
}

// FleetConverge is `regionctl … --wait-converged` writes back to back.
type FleetConverge struct {
	// Agents is the number of agents kept running for the writes
	// (-fleet-converge-agents).
	Agents int `json:"agents"`
	// Writes is the number of regionctl writes made.
	Writes int `json:"writes"`
	// CommitToExit is the bench's watch of the epoch key seeing the
	// write's commit → the regionctl process exited.
	CommitToExit Dist `json:"commit_to_exit"`
	// CommitToStatus is the same commit → the bench's watch of the
	// status keys seeing the last agent report it: the agents' share, the
	// floor of CommitToExit.
	CommitToStatus Dist `json:"commit_to_status_keys"`
	// EchoFloor is CommitToStatus's floor in the same run: one plain
	// client per agent, on its endpoint, watches a trigger key and puts
	// an ack key at each event; the bench's watch seeing the trigger's
	// commit → its watch seeing the last ack (see echoFloor).
	EchoFloor Dist `json:"echo_floor"`
	// StatusRatioP50 is CommitToStatus.P50 / EchoFloor.P50.
	StatusRatioP50 float64 `json:"status_ratio_p50"`
	// StartToCommit is regionctl's process start → the bench's watch
	// seeing the commit (dial, read, validate, Txn).
	StartToCommit Dist `json:"start_to_commit"`
	// StartToExit is regionctl's process start → its exit.
	StartToExit Dist `json:"start_to_exit"`
	// StatusMissed counts the writes whose status keys were not all seen
	// reporting them within 1 s of regionctl's exit (left out of
	// CommitToStatus).
	StatusMissed int `json:"status_missed"`
	// ExitCodes counts the writes by regionctl's exit code, in decimal
	// (every one should be "0"; 5 is a timeout).
	ExitCodes map[string]int `json:"exit_codes"`
	// ForeignCPUPct: see LatencyRun.
	ForeignCPUPct float64 `json:"foreign_cpu_pct"`
	// Error is why the writes stopped before -fleet-converge-writes, if
	// they did.
	Error string `json:"error,omitempty"`
}

func summarizeChange(ss []changeSample, lead time.Duration, waiting int) *FleetChange {
	pick := func(f func(changeSample) time.Duration) Dist {
		var xs []time.Duration
		for _, s := range ss {
			xs = append(xs, f(s))
		}
		return dist(xs)
	}
	var eachA, eachF, status []time.Duration
	missed := 0
	for _, s := range ss {
		eachA, eachF = append(eachA, s.agentEach...), append(eachF, s.floorEach...)
		if s.status < 0 {
			missed++
		} else {
			status = append(status, s.status)
		}
	}
	c := &FleetChange{Changes: len(ss), LeadMS: ms(lead), QueriesWaitingAtPut: waiting,
		All:          pick(func(s changeSample) time.Duration { return s.agents }),
		Floor:        pick(func(s changeSample) time.Duration { return s.floor }),
		AllProxied:   pick(func(s changeSample) time.Duration { return s.agentsProxied }),
		AllDirect:    pick(func(s changeSample) time.Duration { return s.agentsDirect }),
		FloorProxied: pick(func(s changeSample) time.Duration { return s.floorProxied }),
		FloorDirect:  pick(func(s changeSample) time.Duration { return s.floorDirect }),
		EachAgent:    dist(eachA), EachWatcher: dist(eachF), Status: dist(status), StatusMissed: missed}
	if c.Floor.P50 > 0 {
		c.RatioP50, c.RatioP99 = c.All.P50/c.Floor.P50, c.All.P99/c.Floor.P99
	}
	return c
}

func summarizeConverge(ss []convergeSample, agents int) *FleetConverge {
	pick := func(f func(convergeSample) time.Duration) Dist {
		var xs []time.Duration
		for _, s := range ss {
			if d := f(s); d >= 0 {
				xs = append(xs, d)
			}
		}
		return dist(xs)
	}
	c := &FleetConverge{Agents: agents, Writes: len(ss), ExitCodes: exitCodes(ss),
		CommitToExit:   pick(func(s convergeSample) time.Duration { return s.commitToExit }),
		CommitToStatus: pick(func(s convergeSample) time.Duration { return s.commitToStatus }),
		StartToCommit:  pick(func(s convergeSample) time.Duration { return s.startToCommit }),
		StartToExit:    pick(func(s convergeSample) time.Duration { return s.startToExit })}
	for _, s := range ss {
		if s.commitToStatus < 0 {
			c.StatusMissed++
		}
	}
	return c
}

// targets returns issue 9's targets for the parts that ran.
func (f *FleetReport) targets() []Target {
	var out []Target
	le := func(name string, v, limit float64, unit string) Target {
		return Target{Name: "fleet: " + name, Value: v, Limit: limit, Unit: unit, Met: v <= limit}
	}
	if c := f.Change; c != nil {
		out = append(out, le(fmt.Sprintf("change→all %d p50 / floor p50", f.Agents), c.RatioP50, 2, "×"))
		if c.Error != "" {
			out = append(out, Target{Name: "fleet: changes stopped early", Value: float64(c.Changes), Met: false})
		}
	}
	if i := f.Idle; i != nil {
		out = append(out, le("idle relists", i.RelistsTotal, 0, ""),
			le("idle disconnected samples", float64(i.DisconnectedSamples), 0, ""),
			le("idle etcd requests/s per agent", i.Requests.FirstHopPerAgentPerSec, 1, "/s"))
	}
	if c := f.Converge; c != nil {
		out = append(out, le(fmt.Sprintf("--wait-converged (%d agents) p50", c.Agents), c.CommitToExit.P50, 50, "ms"),
			le(fmt.Sprintf("--wait-converged (%d agents) p99", c.Agents), c.CommitToExit.P99, 250, "ms"))
		if n := c.ExitCodes["0"]; n != c.Writes {
			out = append(out, Target{Name: "fleet: --wait-converged writes not exiting 0", Value: float64(c.Writes - n), Limit: 0, Met: false})
		}
		if c.Error != "" {
			out = append(out, Target{Name: "fleet: --wait-converged writes stopped early", Value: float64(c.Writes), Met: false})
		}
	}
	return out
}

func printFleet(w io.Writer, f *FleetReport) {
	fmt.Fprintf(w, "\nfleet: %d agents (%d via grpc-proxy) on a %d-member etcd cluster; agents started in %.0f s\n  %s\n",
		f.Agents, f.ViaProxy, f.Members, f.StartSeconds, f.Topology)
	row := func(name string, d Dist) {
		if d.N == 0 {
			fmt.Fprintf(w, "  %-58s %8s %8s %8s %8s  (none)\n", name, "—", "—", "—", "—")
			return
		}
		fmt.Fprintf(w, "  %-58s %8.2f %8.2f %8.2f %8.2f\n", name, d.P50, d.P90, d.P99, d.Max)
	}
	if c := f.Change; c != nil {
		fmt.Fprintf(w, "\n  %d isolated changes (route PL's weights flipped)%*s p50      p90      p99      max  (ms)\n", c.Changes, 14, "")
		row(fmt.Sprintf("floor: put → last of %d plain watchers has it", f.Agents), c.Floor)
		row(fmt.Sprintf("put → last of %d agents serves it (blocking /v1/resolve)", f.Agents), c.All)
		row("  last of the proxied agents", c.AllProxied)
		row("  last of the direct agents", c.AllDirect)
		row("  floor: last of the proxied watchers", c.FloorProxied)
		row("  floor: last of the direct watchers", c.FloorDirect)
		row("  every single agent", c.EachAgent)
		row("  every single watcher", c.EachWatcher)
		row("put → last status key reports it", c.Status)
		fmt.Fprintf(w, "  all-agents / floor: p50 ×%.2f, p99 ×%.2f;  status keys not all at the change within the wait: %d;  queries waiting at the first put: %d/%d (lead %.0f ms);  other processes: %.0f%% CPU\n",
			c.RatioP50, c.RatioP99, c.StatusMissed, c.QueriesWaitingAtPut, f.Agents, c.LeadMS, c.ForeignCPUPct)
		if c.Error != "" {
			fmt.Fprintf(w, "  STOPPED after %d changes: %s\n", c.Changes, c.Error)
		}
	}
	if i := f.Idle; i != nil {
		printIdle(w, f, i)
	}
	if c := f.Converge; c != nil {
		fmt.Fprintf(w, "\n  %d `regionctl route set … --wait-converged` back to back, %d agents%*s p50      p90      p99      max  (ms)\n", c.Writes, c.Agents, 2, "")
		row("commit (bench's epoch watch) → regionctl exited", c.CommitToExit)
		row("  commit → last status key reports it (the agents' share)", c.CommitToStatus)
		if c.EchoFloor.N > 0 {
			row(fmt.Sprintf("  floor: commit → last of %d plain watchers' acks", c.Agents), c.EchoFloor)
			fmt.Fprintf(w, "  the agents' share / floor, p50: ×%.2f\n", c.StatusRatioP50)
		}
		row("process start → commit", c.StartToCommit)
		row("process start → exit", c.StartToExit)
		fmt.Fprintf(w, "  exit codes: %s;  status keys not all seen within 1 s of the exit: %d;  other processes: %.0f%% CPU\n",
			formatCounts(c.ExitCodes), c.StatusMissed, c.ForeignCPUPct)
		if c.Error != "" {
			fmt.Fprintf(w, "  STOPPED after %d writes: %s\n", c.Writes, c.Error)
		}
	}
}

func printIdle(w io.Writer, f *FleetReport, i *FleetIdle) {
	fmt.Fprintf(w, "\n  idle span: %.0f s\n", i.Seconds)
	fmt.Fprintf(w, "  relists (regiond_watch_resyncs_total increase, all agents): %.0f by %d agents %s\n",
		i.RelistsTotal, i.AgentsRelisted, formatFloats(i.Relists))
	fmt.Fprintf(w, "  regiond_watch_connected samples (every %.0f s): %d, disconnected %d (%d agents)\n",
		i.SampleSeconds, i.ConnectedSamples, i.DisconnectedSamples, i.AgentsDisconnected)
	r := i.Requests
	fmt.Fprintf(w, "  etcd requests (gRPC messages received, less the background of %.2f/s): %.3f /s per agent sent by the agents (%.3f RPCs started);\n",
		r.BackgroundPerSec, r.FirstHopPerAgentPerSec, r.FirstHopRPCsPerAgentPerS)
	fmt.Fprintf(w, "    %.3f /s per direct agent, %.3f /s per proxied agent; members received %.3f /s per agent (the proxy forwarded %.2f /s); status puts: %d\n",
		r.DirectPerAgentPerSec, r.ProxiedPerAgentPerSec, r.ClusterPerAgentPerSec, r.ProxyUpstreamPerSec, i.StatusPuts)
	hop := ""
	for _, m := range r.ByMethod {
		if m.Hop != hop {
			hop = m.Hop
			fmt.Fprintf(w, "    %s, per agent of the fleet:\n", hop)
		}
		fmt.Fprintf(w, "      %-44s %.4f msgs/s  %.4f RPCs/s\n", m.Method, m.MsgsPerAgentPerSec, m.RPCsPerAgentPerSec)
	}
	fmt.Fprintf(w, "  other processes: %.0f%% CPU\n", i.ForeignCPUPct)
}

func formatFloats(m map[string]float64) string {
	var parts []string
	for k, v := range m {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, v))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, " ") + ")"
}

func formatCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

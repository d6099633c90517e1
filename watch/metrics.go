package watch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/regiond/regiond/routing"
)

type metrics struct {
	revision       prometheus.Gauge
	epoch          prometheus.Gauge
	events         prometheus.Counter
	dropped        prometheus.Counter
	resyncs        *prometheus.CounterVec
	reopens        *prometheus.CounterVec
	openFailures   *prometheus.CounterVec
	probes         *prometheus.CounterVec
	skipped        prometheus.Gauge
	skippedAlike   prometheus.Gauge
	regressions    prometheus.Counter
	clusterChanges prometheus.Counter
	swaps          prometheus.Counter
	listSeconds    prometheus.Gauge
	apply          prometheus.Summary
}

func newMetrics(m *Mirror, reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "regiond", "watch"
	mt := &metrics{
		revision: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "applied_revision", Help: "etcd revision the routing table is current at."}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "epoch", Help: "Config epoch of the routing table."}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "events_applied_total", Help: "Watch events applied to the table."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "events_dropped_total", Help: "Watch events at or below the applied revision, dropped."}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "resyncs_total", Help: "Full relists of the routing prefix, by reason (the first is initial)."}, []string{"reason"}),
		reopens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "reopens_total", Help: "Watches replaced by a new one from the applied revision, without a relist, by why the old one ended."}, []string{"reason"}),
		openFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "create_failures_total", Help: "Watches whose creation was refused or not answered within the request timeout, by reason."}, []string{"reason"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "silence_probes_total", Help: "Linearizable reads after three progress intervals of silence, by result."}, []string{"result"}),
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "skipped_keys", Help: "Distinct keys whose current value was refused: the last good value is kept, except for those counted in skipped_keys_served_alike."}),
		skippedAlike: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "skipped_keys_served_alike", Help: "Of skipped_keys, those every agent serves alike whatever it saw before (a health key with a bad value counts as live; a key outside the grammar counts nowhere): nothing to fix for convergence."}),
		regressions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "revision_regressions_total", Help: "Lists whose revision was below the applied one, and reopened watches that found etcd holding another history at the applied revision (restored backup?)."}),
		listSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "last_list_duration_seconds", Help: "Duration of the last full list, from the first Get to the table swapped in."}),
		apply: prometheus.NewSummary(prometheus.SummaryOpts{Namespace: ns, Subsystem: sub,
			Name: "apply_seconds", Help: "From a watch response's arrival to its table swapped in (apply, compile, swap).",
			Objectives: map[float64]float64{0.5: 0.01, 0.9: 0.01, 0.99: 0.001}, MaxAge: 2 * time.Minute}),
		clusterChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cluster_changes_total", Help: "Lists from another etcd cluster than the table's (a replaced cluster)."}),
		swaps: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "table_swaps_total", Help: "Routing tables swapped in."}),
	}
	for _, r := range []string{ReasonInitial, ReasonCompacted, ReasonOutOfOrder, ReasonRegressed, ReasonCluster, ReasonDiverged, ReasonListFailed, ReasonBehind, ReasonUncreated} {
		mt.resyncs.WithLabelValues(r)
	}
	for _, r := range []string{ReasonSilent, ReasonClosed, ReasonError, ReasonNoLeader, ReasonDisconnected, ReasonPermission} {
		mt.reopens.WithLabelValues(r)
	}
	for _, r := range []string{createTimeout, ReasonClosed, ReasonError, ReasonNoLeader, ReasonPermission} {
		mt.openFailures.WithLabelValues(r)
	}
	for _, r := range []string{probeCurrent, probeBehind, probeFailed, probeRegressed, probeCluster} {
		mt.probes.WithLabelValues(r)
	}
	if reg != nil {
		var registered []prometheus.Collector // unregistered again if one fails
		for _, c := range []prometheus.Collector{mt.revision, mt.epoch, mt.events, mt.dropped, mt.resyncs, mt.reopens, mt.openFailures, mt.probes, mt.skipped, mt.skippedAlike, mt.regressions, mt.clusterChanges, mt.swaps, mt.listSeconds, mt.apply,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
				Name: "seconds_since_sync", Help: "Seconds since the table was last confirmed current against etcd (-1: never)."},
				func() float64 {
					if at := m.syncedAt.Load(); at != nil {
						return max(time.Since(*at).Seconds(), 0)
					}
					return -1
				}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
				Name: "pools", Help: "Pools in the routing table (0: nothing routes)."},
				func() float64 {
					if t := m.Table(); t != nil {
						return float64(t.NumPools())
					}
					return 0
				}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
				Name: "connected", Help: "1 while a created watch follows etcd."},
				func() float64 {
					if m.connected.Load() {
						return 1
					}
					return 0
				})} {
			if err := reg.Register(c); err != nil {
				for _, done := range registered {
					reg.Unregister(done)
				}
				return nil, err
			}
			registered = append(registered, c)
		}
	}
	return mt, nil
}

func (mt *metrics) observeTable(t *routing.Table) {
	mt.revision.Set(float64(t.Revision()))
	mt.epoch.Set(float64(t.Epoch()))
	n, alike := skippedCounts(t.Skipped())
	mt.skipped.Set(float64(n))
	mt.skippedAlike.Set(float64(alike))
	mt.swaps.Inc()
}

// skippedCounts counts the distinct keys of sk (a key can be reported
// twice: its value, and a reference to it), and those every agent serves
// alike (routing.ServedAlike).
func skippedCounts(sk []routing.Skipped) (n, alike int) {
	if len(sk) == 0 {
		return 0, 0
	}
	seen := make(map[string]bool, len(sk))
	for _, s := range sk {
		if !seen[s.Key] {
			seen[s.Key] = true
			if routing.ServedAlike(s.Key) {
				alike++
			}
		}
	}
	return len(seen), alike
}

package main

import (
	"testing"
)

// A scrape as etcd and regiond expose it: the fleet phase's counts come
// from these lines.
const promSample = `# HELP grpc_server_msg_received_total Total number of RPC stream messages received on the server.
# TYPE grpc_server_msg_received_total counter
grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"} 17
grpc_server_msg_received_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 5
grpc_server_msg_received_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 9
grpc_server_started_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 3
regiond_watch_connected 1
regiond_watch_resyncs_total{reason="compacted"} 0
regiond_watch_resyncs_total{reason="silent"} 4
regiond_watch_resyncs_total{reason="closed"} 1
regiond_api_blocking_queries_waiting 1.5e+00
malformed_line_without_value
`

func TestParseProm(t *testing.T) {
	ss := parseProm([]byte(promSample))
	if len(ss) != 9 {
		t.Fatalf("parsed %d samples, want 9: %+v", len(ss), ss)
	}
	tests := []struct {
		name, metric, label string
		want                map[string]float64
	}{
		{"by method", "grpc_server_msg_received_total", "grpc_method", map[string]float64{"LeaseKeepAlive": 17, "Range": 5, "Watch": 9}},
		{"by a later label", "grpc_server_msg_received_total", "grpc_service", map[string]float64{"etcdserverpb.Lease": 17, "etcdserverpb.KV": 5, "etcdserverpb.Watch": 9}},
		{"by reason", "regiond_watch_resyncs_total", "reason", map[string]float64{"compacted": 0, "silent": 4, "closed": 1}},
		{"unlabelled", "regiond_watch_connected", "", map[string]float64{"": 1}},
		{"absent", "regiond_nothing", "", map[string]float64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := sumBy(ss, tc.metric, tc.label)
			if len(got) != len(tc.want) {
				t.Fatalf("sumBy = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("sumBy[%q] = %v, want %v", k, got[k], v)
				}
			}
		})
	}
	if got := sumOf(ss, "regiond_api_blocking_queries_waiting"); got != 1.5 {
		t.Errorf("exponent notation: got %v, want 1.5", got)
	}
	if got := parseProm([]byte(promSample), "regiond_watch_"); len(got) != 4 {
		t.Errorf("prefix filter kept %d samples, want 4", len(got))
	}
}

func TestFleetTopology(t *testing.T) {
	c := &etcdCluster{proxyAddr: "127.0.0.1:9", names: []string{"m0", "m1", "m2"},
		members: []*etcdProc{{clientURL: "http://m0"}, {clientURL: "http://m1"}, {clientURL: "http://m2"}}}
	for _, tc := range []struct{ n, via int }{{100, 50}, {100, 0}, {100, 100}, {7, 3}, {1, 0}} {
		endpoints, hops, proxied := fleetTopology(c, tc.n, tc.via)
		count := map[string]int{}
		for i := range endpoints {
			count[hops[i]]++
			if proxied[i] != (endpoints[i] == "http://"+c.proxyAddr) || proxied[i] != (hops[i] == "proxy") {
				t.Errorf("n=%d via=%d: agent %d: endpoint %s, hop %s, proxied %v disagree", tc.n, tc.via, i, endpoints[i], hops[i], proxied[i])
			}
		}
		if count["proxy"] != tc.via || count["m0"] != 0 || count["m1"]+count["m2"] != tc.n-tc.via || count["m1"]-count["m2"] > 1 || count["m2"] > count["m1"] {
			t.Errorf("n=%d via=%d: hops %v: want %d through the proxy, none on m0, the rest alternating m1/m2", tc.n, tc.via, count, tc.via)
		}
		if tc.n == 100 && tc.via == 50 {
			// The first half (kept for --wait-converged) is half proxied.
			k := 0
			for _, p := range proxied[:50] {
				if p {
					k++
				}
			}
			if k != 25 {
				t.Errorf("the first 50 agents have %d proxied, want 25", k)
			}
		}
	}
}

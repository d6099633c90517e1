// Package faultsuite holds regiond's fleet fault suite: its tests run a
// real 3-member etcd cluster (internal/etcdproc), etcd's grpc-proxy in
// front of some agents, and six or more regiond agent processes, write a
// random history of thousands of operations while injecting faults (a
// compaction every 200 ms, the leader killed and restarted, a member
// partitioned, held until it says it has no leader, the proxy restarted,
// agents killed with SIGKILL and restarted, agents' connections cut), and
// check that every agent serves exactly what etcd holds (and that the
// compactions overtook some agent's watch: the run fails otherwise):
//
//   - at checkpoints and at the end, every agent's table JSON equals a
//     fresh compile of etcd's state at the agent's revision (byte for
//     byte, apart from written_at and synced_at);
//   - the tables and decisions sampled during the run equal the reference
//     at their revision, taken from an independent recorder watch: no
//     event is skipped or applied twice;
//   - no agent's revision ever goes backwards (within a process, and
//     across a restart below what its snapshot file held);
//   - the local API answers every request while the agent runs: 200, or
//     503 exactly where the reference resolver says NoRoute.
//
// TestAuthFaultsReconverge runs the same checks with etcd's authentication
// on (agents logging in with a password, a 3 s token TTL, one agent behind
// the proxy, a regionctl heartbeat beside them) across a leader killed, a
// member restarted (the simple tokens it issued lost), the agents'
// password changed and back, and their role revoked and granted again:
// every agent must be following again, serving etcd's state, its status
// key and the heartbeat's health key back, within 60 s of each fault's
// end. AUTHFAULT=1 runs its whole list of faults (rolling restarts,
// frozen members, a revoked permission, agents and the proxy killed,
// idle tokens expiring), -args -authfault.mode=jwt with etcd's JWT tokens.
//
// The package has no code of its own outside its tests. `go test ./...`
// runs the CI-sized suite (six agents, two of them behind the proxy: about
// two minutes under -race on 2 cores, most of it TestFleetFaults; ten
// agents took twice as long, their checkers slowing the writers, for no
// fault kind the six miss); the long variant is
//
//	go test ./internal/faultsuite -run TestFleetFaults -timeout 60m -args -fleet.ops=50000 -fleet.agents=20
package faultsuite

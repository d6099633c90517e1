package agent

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/ui"
)

// mountUI serves the status page at /ui/ on the API's listeners.
func (a *Agent) mountUI() {
	ks, _ := keyspace.New(a.cfg.Prefix) // validated by Config.Validate
	a.api.Handle(ui.Prefix, ui.New(ui.Config{Table: source{a}.Table, Client: a.etcdClient, Keyspace: ks,
		Node: a.cfg.Node, Version: a.cfg.Version, Snapshot: a.cfg.Snapshot, Logger: a.log}))
}

// etcdClient returns the agent's etcd client, or nil before it has one.
func (a *Agent) etcdClient() *clientv3.Client {
	if p := a.pub.Load(); p != nil {
		return p.cli
	}
	return nil
}

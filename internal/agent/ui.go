package agent

import (
	"crypto/tls"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/internal/ui"
)

// mountUI serves the status page at /ui/ on the API's listeners.
func (a *Agent) mountUI() {
	ks, _ := keyspace.New(a.cfg.Prefix) // validated by Config.Validate
	a.api.Handle(ui.Prefix, ui.New(ui.Config{Table: source{a}.Table, Client: a.etcdClient, Keyspace: ks,
		Node: a.cfg.Node, Version: a.cfg.Version, Snapshot: a.cfg.Snapshot, Logger: a.log, User: a.etcdUser()}))
}

// etcdUser is the agent's etcd user: its --user, else the common name of
// its client certificate (etcd's user with --client-cert-auth), else "".
func (a *Agent) etcdUser() string {
	if a.cfg.Username != "" {
		return a.cfg.Username
	}
	switch {
	case a.cfg.TLS == nil:
		return ""
	case len(a.cfg.TLS.Certificates) > 0:
		return store.CertCN(a.cfg.TLS.Certificates[0])
	case a.cfg.TLS.GetClientCertificate != nil:
		// etcd's transport hands the certificate out this way (it
		// reloads it from its files), not in Certificates.
		if c, err := a.cfg.TLS.GetClientCertificate(&tls.CertificateRequestInfo{}); err == nil && c != nil {
			return store.CertCN(*c)
		}
	}
	return ""
}

// etcdClient returns the agent's etcd client, or nil before it has one.
func (a *Agent) etcdClient() *clientv3.Client {
	return a.etcd.Load()
}

// Package keyspace maps regiond's names to etcd keys and back (docs/keys-and-values.md).
// Keys of the routing prefix are handled relative to <root>/routing/ by the
// routing package; this package adds the root and the keys beside it
// (audit, agents, locks).
package keyspace

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// DefaultRoot is the default root prefix.
const DefaultRoot = "/regiond/v1"

// Space is the key layout under one root prefix.
type Space struct {
	root string
}

// New returns the layout under root ("/regiond/v1"). The root must start
// with '/', must not end with one, and must not hold "//".
func New(root string) (Space, error) {
	if !strings.HasPrefix(root, "/") || strings.HasSuffix(root, "/") {
		return Space{}, fmt.Errorf("keyspace: prefix %q must start with '/' and not end with one (e.g. %s)", root, DefaultRoot)
	}
	if strings.Contains(root, "//") {
		return Space{}, fmt.Errorf("keyspace: prefix %q has an empty segment ('//') (e.g. %s)", root, DefaultRoot)
	}
	if strings.IndexFunc(root, unicode.IsSpace) >= 0 { // a stray space from a unit or env file
		return Space{}, fmt.Errorf("keyspace: prefix %q has white space (e.g. %s)", root, DefaultRoot)
	}
	return Space{root: root}, nil
}

// Default returns the layout under DefaultRoot.
func Default() Space { return Space{root: DefaultRoot} }

// Root returns the root prefix.
func (s Space) Root() string { return s.root }

// Routing returns the prefix every agent watches: "<root>/routing/".
func (s Space) Routing() string { return s.root + "/routing/" }

// RoutingKey returns the absolute key of a key relative to the routing
// prefix ("pools/eu-central").
func (s Space) RoutingKey(rel string) string { return s.Routing() + rel }

// Rel returns the key relative to the routing prefix, and whether abs is
// under it.
func (s Space) Rel(abs string) (string, bool) {
	return strings.CutPrefix(abs, s.Routing())
}

// Epoch returns the absolute key of the config epoch.
func (s Space) Epoch() string { return s.Routing() + "epoch" }

// AuditPrefix returns "<root>/audit/".
func (s Space) AuditPrefix() string { return s.root + "/audit/" }

// Audit returns the key of the audit record of an epoch (20-digit,
// zero-padded, so keys sort by epoch).
func (s Space) Audit(epoch int64) string { return fmt.Sprintf("%s%020d", s.AuditPrefix(), epoch) }

// ParseAudit returns the epoch of an audit key.
func (s Space) ParseAudit(key string) (int64, error) {
	rest, ok := strings.CutPrefix(key, s.AuditPrefix())
	if !ok || len(rest) != 20 {
		return 0, fmt.Errorf("keyspace: %q is not an audit key", key)
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("keyspace: %q is not an audit key: %w", key, err)
	}
	return n, nil
}

// AgentsPrefix returns "<root>/agents/".
func (s Space) AgentsPrefix() string { return s.root + "/agents/" }

// Agent returns the status key of a node.
func (s Space) Agent(node string) string { return s.AgentsPrefix() + node }

// NodesPrefix returns "<root>/nodes/": the agents' node records, each
// its agent's last status without a lease, so a node whose status key
// ended with its lease (cut off from etcd, crashed) is still known.
func (s Space) NodesPrefix() string { return s.root + "/nodes/" }

// Node returns the node record key of a node.
func (s Space) Node(node string) string { return s.NodesPrefix() + node }

// ValidNode reports whether name can name a node (an agent's --node): not
// empty, without '/' or white space (any Unicode space, as New refuses in
// a root: \v, \f, U+00A0 too), so that agents/<node> and nodes/<node> are
// one key each and read as they are.
func ValidNode(name string) bool {
	return name != "" && !strings.Contains(name, "/") && strings.IndexFunc(name, unicode.IsSpace) < 0
}

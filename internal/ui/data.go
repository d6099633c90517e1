package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/didyoumean"
	"github.com/regiond/regiond/internal/store"
	"github.com/regiond/regiond/routing"
)

// nodeBody is /ui/api/node.
type nodeBody struct {
	Node     string        `json:"node"`
	Version  string        `json:"version"`
	Snapshot *snapshotInfo `json:"snapshot,omitempty"`
	// TableChangeRevision is the revision of the newest change of the
	// table served (routing.Table.ChangeRevision), read before the
	// snapshot file: a file at an older revision does not hold that
	// table (its write failed, or has yet to come). 0 before a table.
	TableChangeRevision int64 `json:"table_change_revision,omitempty"`
}

// snapshotInfo is what the snapshot file's header says.
type snapshotInfo struct {
	Path      string `json:"path"`
	Revision  int64  `json:"revision,omitempty"`
	WrittenAt string `json:"written_at,omitempty"`
	Error     string `json:"error,omitempty"`
}

// snapshotHeadRE reads revision and written_at from the start of the
// snapshot file, which the writer puts first (routing.Table.JSON).
var snapshotHeadRE = regexp.MustCompile(`^\{"revision":(\d+),"epoch":\d+,"written_at":"([^"]+)"`)

func (h *handler) handleNode(w http.ResponseWriter, _ *http.Request) {
	body := nodeBody{Node: h.cfg.Node, Version: h.cfg.Version}
	if t := h.cfg.Table(); t != nil {
		body.TableChangeRevision = t.ChangeRevision()
	}
	if p := h.cfg.Snapshot; p != "" {
		body.Snapshot = readSnapshotHead(p)
	}
	writeJSON(w, http.StatusOK, body)
}

// readSnapshotHead reads the header of the snapshot file at path.
func readSnapshotHead(path string) *snapshotInfo {
	info := &snapshotInfo{Path: path}
	f, err := os.Open(path)
	if err != nil {
		info.Error = err.Error()
		return info
	}
	defer f.Close()
	head := make([]byte, 256)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		info.Error = fmt.Sprintf("read %s: %v", path, err)
		return info
	}
	m := snapshotHeadRE.FindSubmatch(head[:n])
	if m == nil {
		info.Error = fmt.Sprintf("%s does not start like a table written by regiond", path)
		return info
	}
	info.Revision, _ = strconv.ParseInt(string(m[1]), 10, 64)
	info.WrittenAt = string(m[2])
	return info
}

// boost is a live override with its time left: to the end of its lease
// or its expires_at, whichever comes first.
type boost struct {
	ID      string            `json:"id"`
	Route   string            `json:"route"`
	Targets []routing.Target  `json:"targets"`
	Attrs   map[string]string `json:"attrs,omitempty"`
	Reason  string            `json:"reason,omitempty"`
	Author  string            `json:"author,omitempty"`
	// Lease is the override key's lease (hex), "" when it has none.
	Lease string `json:"lease,omitempty"`
	// ExpiresAt is the override's expires_at, "" when it has none.
	ExpiresAt string `json:"expires_at,omitempty"`
	// TTLSeconds is the time left, when known: the lease's, or less if
	// expires_at comes first (an etcd leader election renews a lease).
	TTLSeconds *int64 `json:"ttl_seconds,omitempty"`
	// GrantedTTLSeconds is the lease's whole TTL.
	GrantedTTLSeconds int64 `json:"granted_ttl_seconds,omitempty"`
}

// boostsBody is /ui/api/boosts.
type boostsBody struct {
	Revision int64   `json:"revision"`
	Boosts   []boost `json:"boosts"`
	// Error says why the time left is missing.
	Error string `json:"error,omitempty"`
}

// handleBoosts lists the table's live overrides, with the time left of
// each one's lease read from etcd (the table does not hold leases).
func (h *handler) handleBoosts(w http.ResponseWriter, r *http.Request) {
	t := h.tableOr503(w)
	if t == nil {
		return
	}
	body := boostsBody{Revision: t.Revision(), Boosts: []boost{}}
	ovs := t.Overrides()
	ids := make([]string, 0, len(ovs))
	for id := range ovs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		o := ovs[id]
		body.Boosts = append(body.Boosts, boost{ID: id, Route: o.Route, Targets: o.Targets, Attrs: o.Attrs, Reason: o.Reason, Author: o.Author,
			ExpiresAt: o.ExpiresAt})
	}
	if len(ids) > 0 {
		if err := h.leaseTimes(r.Context(), body.Boosts); err != nil {
			body.Error = "the leases' time left unknown: " + err.Error()
		}
	}
	now := time.Now()
	for i := range body.Boosts {
		b := &body.Boosts[i]
		if end := ovs[b.ID].Expiry(); !end.IsZero() {
			if left := max(int64(end.Sub(now)/time.Second), 0); b.TTLSeconds == nil || left < *b.TTLSeconds {
				b.TTLSeconds = &left
			}
		}
	}
	writeJSON(w, http.StatusOK, body)
}

// leaseTimes fills in each boost's lease and time left.
func (h *handler) leaseTimes(ctx context.Context, bs []boost) error {
	cli := h.cfg.Client()
	if cli == nil {
		return errors.New("the agent has no etcd client (see /v1/status etcd_error)")
	}
	prefix := h.cfg.Keyspace.RoutingKey(routing.OverrideKey(""))
	rctx, cancel := context.WithTimeout(ctx, h.cfg.RequestTimeout)
	defer cancel()
	// Not keys-only: etcd 3.7 answers a keys-only range from its index,
	// without the leases (mvcc FastKeysOnly).
	resp, err := cli.Get(rctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read %s: %w", prefix, err)
	}
	leases := map[string]int64{}
	for _, kv := range resp.Kvs {
		leases[strings.TrimPrefix(string(kv.Key), prefix)] = kv.Lease
	}
	ttls := map[int64]*clientv3.LeaseTimeToLiveResponse{}
	for i := range bs {
		id := leases[bs[i].ID]
		if id == 0 {
			continue
		}
		bs[i].Lease = strconv.FormatInt(id, 16)
		tr, ok := ttls[id]
		if !ok {
			if tr, err = cli.TimeToLive(rctx, clientv3.LeaseID(id)); err != nil {
				return fmt.Errorf("time to live of lease %x (boost %s): %w", id, bs[i].ID, err)
			}
			ttls[id] = tr
		}
		left := max(tr.TTL, 0) // -1: the lease is gone, the key with it
		bs[i].TTLSeconds, bs[i].GrantedTTLSeconds = &left, tr.GrantedTTL
	}
	return nil
}

// fleetBody is /ui/api/fleet.
type fleetBody struct {
	*store.Fleet
	// Denied is set when the agent's etcd role may not read agents/.
	Denied bool   `json:"denied,omitempty"`
	Error  string `json:"error,omitempty"`
}

// handleFleet reads every agent's status key and the lost nodes' records, as regionctl status does.
func (h *handler) handleFleet(w http.ResponseWriter, r *http.Request) {
	cli := h.cfg.Client()
	if cli == nil {
		writeJSON(w, http.StatusServiceUnavailable, fleetBody{Error: "the agent has no etcd client (see /v1/status etcd_error)"})
		return
	}
	st := store.New(cli, h.cfg.Keyspace, store.Options{RequestTimeout: h.cfg.RequestTimeout, User: h.cfg.User})
	f, err := st.Fleet(r.Context())
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, fleetBody{Fleet: f})
	case permissionDenied(err):
		writeJSON(w, http.StatusForbidden, fleetBody{Denied: true, Error: fmt.Sprintf(
			"this agent's etcd role may not read %s (least privilege, as regionctl auth apply makes it; a grant there would be refused by its next run): %v; regionctl status shows the fleet",
			h.cfg.Keyspace.AgentsPrefix(), err)})
	default:
		writeJSON(w, http.StatusBadGateway, fleetBody{Error: "read the fleet: " + err.Error()})
	}
}

// permissionDenied reports whether etcd refused a read to this user.
func permissionDenied(err error) bool {
	if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.PermissionDenied
	}
	return status.Code(errors.Unwrap(err)) == codes.PermissionDenied
}

// poolRow is a pool as /ui/api/pools lists it.
type poolRow struct {
	ID          string `json:"id"`
	Status      string `json:"status"`
	Residency   string `json:"residency"`
	Region      string `json:"region,omitempty"`
	Host        string `json:"host"`
	HealthCheck bool   `json:"health_check"`
	// Healthy is whether the pool passes its health check now (one
	// without health_check always does; one in its grace window too).
	Healthy bool `json:"healthy"`
	// Instances is the number of its live health keys.
	Instances int `json:"instances"`
}

// tableOr503 returns the table the agent serves, or answers 503 (no
// table loaded yet) and returns nil.
func (h *handler) tableOr503(w http.ResponseWriter) *routing.Table {
	t := h.cfg.Table()
	if t == nil {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "no routing table loaded yet", Code: api.CodeNoTable})
	}
	return t
}

// poolsBody is /ui/api/pools.
type poolsBody struct {
	Revision int64     `json:"revision"`
	Pools    []poolRow `json:"pools"`
}

// handlePools lists the table's pools with what the table JSON does not
// say of them: the count of each one's live health keys.
func (h *handler) handlePools(w http.ResponseWriter, _ *http.Request) {
	t := h.tableOr503(w)
	if t == nil {
		return
	}
	now := time.Now()
	body := poolsBody{Revision: t.Revision(), Pools: make([]poolRow, 0, t.NumPools())}
	for _, id := range t.PoolIDs() {
		p, ok := t.Pool(id)
		if !ok {
			continue
		}
		body.Pools = append(body.Pools, poolRow{ID: id, Status: p.Status, Residency: p.Residency, Region: p.Region, Host: p.Host,
			HealthCheck: p.HealthCheck, Healthy: t.Healthy(id, now), Instances: p.Instances})
	}
	writeJSON(w, http.StatusOK, body)
}

// whatIfBody is /ui/api/whatif.
type whatIfBody struct {
	Revision int64    `json:"revision"`
	Epoch    int64    `json:"epoch"`
	Down     []string `json:"down"`
	// Effective is every country's entry with the pools down; Changed
	// names the countries whose entry differs from the table's.
	Effective map[string]*routing.Effective `json:"effective"`
	Changed   []string                      `json:"changed"`
	NoRoute   []string                      `json:"no_route"`
}

// handleWhatIf resolves every country with the pools of ?down= down, as
// regionctl resolve --down does, on the table the agent serves.
func (h *handler) handleWhatIf(w http.ResponseWriter, r *http.Request) {
	t := h.tableOr503(w)
	if t == nil {
		return
	}
	down, err := parseDown(r.URL.Query()["down"], t)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: err.Error(), Code: api.CodeBadParam})
		return
	}
	slices.Sort(down) // the same answer, and the same cache entry, in any order
	key := strings.Join(down, ",")
	if last := h.whatIfLast.Load(); last != nil && last.t == t && last.down == key {
		writeRaw(w, http.StatusOK, last.body)
		return
	}
	select {
	case h.whatIfBusy <- struct{}{}:
		defer func() { <-h.whatIfBusy }()
	default:
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, errorBody{Error: "another what-if is being computed (one at a time: each resolves every country); retry in a second", Code: api.CodeTooManyWaiting})
		return
	}
	now := time.Now()
	wt := t.WithDown(down, now)
	body := whatIfBody{Revision: t.Revision(), Epoch: t.Epoch(), Down: down, Effective: map[string]*routing.Effective{},
		Changed: []string{}, NoRoute: []string{}}
	for _, cc := range append(routing.Countries(), routing.Unknown) {
		e := wt.Effective(cc)
		body.Effective[cc] = e
		if len(e.Candidates) == 0 {
			body.NoRoute = append(body.NoRoute, cc)
		}
		a, _ := json.Marshal(e)
		b, _ := json.Marshal(t.Effective(cc))
		if !bytes.Equal(a, b) {
			body.Changed = append(body.Changed, cc)
		}
	}
	out, err := json.Marshal(body)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "encode response", Code: api.CodeInternal})
		return
	}
	out = append(out, '\n')
	h.whatIfLast.Store(&whatIfAnswer{t: t, down: key, body: out})
	writeRaw(w, http.StatusOK, out)
}

// whatIfAnswer is a what-if answered: for table t, with the pools of down
// (sorted, comma-separated) down, the JSON body.
type whatIfAnswer struct {
	t    *routing.Table
	down string
	body []byte
}

// parseDown reads ?down= (repeated or comma-separated) into pool ids of t.
func parseDown(vals []string, t *routing.Table) ([]string, error) {
	var down []string
	seen := map[string]bool{}
	for _, v := range vals {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id == "" || seen[id] {
				continue
			}
			// Each id is checked as it comes: a query of many ids costs
			// no more than its length (a megabyte of ids took 20 s of
			// CPU when they were checked for duplicates first).
			if _, ok := t.Pool(id); !ok {
				return nil, fmt.Errorf("down: no such pool %q%s", id, poolHint(t.PoolIDs(), id))
			}
			seen[id] = true
			down = append(down, id)
		}
	}
	if len(down) == 0 {
		return nil, errors.New("down names no pool: ?down=eu-central,eu-west resolves every country with those pools down")
	}
	return down, nil
}

// poolHint helps with an id that names no pool of ids (sorted), as
// regionctl does: "; did you mean X?" for the pools within two edits of
// it (its case aside), else the pools there are, the first ten: a fleet
// of 2,000 pools made a 16 KB answer of the whole list.
func poolHint(ids []string, id string) string {
	near := didyoumean.Near(id, ids)
	switch {
	case len(near) > 0:
		return "; did you mean " + strings.Join(near, " or ") + "?"
	case len(ids) == 0:
		return " (the table has no pools)"
	case len(ids) > 10:
		return fmt.Sprintf(" (pools: %s and %d more; regionctl get pools lists them)", strings.Join(ids[:10], ", "), len(ids)-10)
	}
	return " (pools: " + strings.Join(ids, ", ") + ")"
}

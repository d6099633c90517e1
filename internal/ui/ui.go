// Package ui is the agent's read-only status page, served at /ui/ on the
// API's listeners (and under its rules: GET only, loopback Host names on
// TCP). The page and its script are embedded in the binary and load
// nothing from elsewhere (the Content-Security-Policy forbids it); the
// script reads the API (/v1/status, and /v1/table as a blocking query with
// min_revision, so a change shows without a reload) and the few JSON
// endpoints of this package, which answer what the API does not:
//
//	/ui/api/node     this agent: version, node, the snapshot file's written_at
//	/ui/api/boosts   the live boosts with their leases' time left (from etcd)
//	/ui/api/fleet    every agent's status key and lag (from etcd, when the
//	                 agent's role may read <prefix>/agents/)
//	/ui/api/pools    every pool of the table with its live health keys' count
//	/ui/api/whatif   ?down=POOL,… every country resolved with those pools
//	                 down, in memory (routing.Table.WithDown)
package ui

import (
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/regiond/regiond/internal/api"
	"github.com/regiond/regiond/internal/keyspace"
	"github.com/regiond/regiond/routing"
)

//go:embed assets
var assets embed.FS

// Config is what the status page reads from the agent.
type Config struct {
	// Table returns the table the agent serves (nil before it has one).
	Table func() *routing.Table
	// Client returns the agent's etcd client, or nil while it has none.
	Client func() *clientv3.Client
	// Keyspace is the agent's --prefix.
	Keyspace keyspace.Space
	// Node and Version name this agent.
	Node, Version string
	// Snapshot is the snapshot file's path ("" when disabled).
	Snapshot string
	// User is the agent's etcd user (its --user, or its client
	// certificate's CN), named in a refusal; "" for none.
	User string
	// RequestTimeout bounds each etcd read (default 3s).
	RequestTimeout time.Duration
	// Logger receives the page's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Prefix is where the page is mounted.
const Prefix = "/ui/"

// contentSecurityPolicy lets the page load and fetch from the agent only.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handler serves the page and its endpoints.
type handler struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	static http.Handler
	// whatIfBusy holds a token while a what-if is computed: one at a
	// time, so that requests for it (a CPU's work each: every country
	// resolved) cannot take the agent's CPUs from the front doors.
	whatIfBusy chan struct{}
	// whatIfLast is the last what-if answered, reused while its table
	// serves and the same pools are asked down.
	whatIfLast atomic.Pointer[whatIfAnswer]
}

// New returns the handler of everything under Prefix.
func New(cfg Config) http.Handler {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Table == nil {
		cfg.Table = func() *routing.Table { return nil }
	}
	if cfg.Client == nil {
		cfg.Client = func() *clientv3.Client { return nil }
	}
	sub, _ := fs.Sub(assets, "assets")
	h := &handler{cfg: cfg, log: cfg.Logger.With("component", "ui"), mux: http.NewServeMux(),
		static: http.StripPrefix(Prefix, http.FileServerFS(sub)), whatIfBusy: make(chan struct{}, 1)}
	h.mux.HandleFunc(Prefix+"api/node", h.handleNode)
	h.mux.HandleFunc(Prefix+"api/boosts", h.handleBoosts)
	h.mux.HandleFunc(Prefix+"api/fleet", h.handleFleet)
	h.mux.HandleFunc(Prefix+"api/pools", h.handlePools)
	h.mux.HandleFunc(Prefix+"api/whatif", h.handleWhatIf)
	h.mux.HandleFunc(Prefix+"api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "no such endpoint " + r.URL.Path + "; the page's are api/node, api/boosts, api/fleet, api/pools, api/whatif", Code: api.CodeNotFound})
	})
	h.mux.Handle(Prefix, h.static)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// errorBody is an error of the page's JSON, shaped as the API's
// ({"error":"…","code":"…"}, with the API's codes): act on code.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode response","code":"internal"}`)
	}
	writeRaw(w, status, append(b, '\n'))
}

// writeRaw answers body, a JSON document and its newline, with DEL and
// the C1 controls escaped as the API's JSON has them (api.EscapeControls):
// a boost's reason or a key's name holding one does not drive the
// terminal of whoever curls the page's endpoints.
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(api.EscapeControls(body))
}

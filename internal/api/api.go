// Package api serves the agent's HTTP API (docs/agent.md): resolve, table,
// status, healthz, readyz and metrics, answered from memory.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/regiond/regiond/routing"
	"github.com/regiond/regiond/watch"
)

// Source is what the API answers from: the mirror.
type Source interface {
	Table() *routing.Table
	Status() watch.Status
	// Changed returns a channel closed at the next table swap.
	Changed() <-chan struct{}
	// EtcdError says why the agent has not reached etcd since it started
	// (a refused login, etcd unreachable at start), or is "" once it has.
	// /v1/status gives Status().Refused in its place when it is "".
	EtcdError() string
	// StatusError says why the agent's status key in etcd is not
	// published (its last lease or put failed), or is "" once it is.
	StatusError() string
	// SnapshotError says why the snapshot files do not hold the table
	// served (their last write failed), or is "" while they do.
	SnapshotError() string
}

// MaxWait bounds the wait of a blocking query (min_revision).
const MaxWait = 5 * time.Minute

// DefaultWait is the wait of a blocking query that names no wait.
const DefaultWait = 30 * time.Second

// Config configures the API.
type Config struct {
	// Node is the node name reported by /v1/status.
	Node string
	// MaxStale: /readyz fails once the table is older than this. Default 15m.
	MaxStale time.Duration
	// MaxWaiting caps the blocking queries waiting at once; one more is
	// refused with 429 and Retry-After. Default DefaultMaxWaiting.
	MaxWaiting int
	// Registerer receives the API's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Gatherer is served on /metrics; nil serves no /metrics.
	Gatherer prometheus.Gatherer
	// Logger receives the API's logs; nil means slog.Default().
	Logger *slog.Logger
	// WriteTimeout bounds the writing of an answer: the server that
	// serves Handler sets it as its http.Server.WriteTimeout (counted from
	// the request), and a blocking query's answer gets as long again after
	// its wait. A client that stops reading has its connection closed
	// then. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// DefaultWriteTimeout is the default Config.WriteTimeout.
const DefaultWriteTimeout = 10 * time.Second

// DefaultMaxWaiting is the default cap of blocking queries waiting at once.
const DefaultMaxWaiting = 128

// RetryAfter is the Retry-After of a blocking query refused at the cap.
const RetryAfter = 5 * time.Second

// Server is the API's http.Handler factory.
type Server struct {
	cfg      Config
	src      Source
	log      *slog.Logger
	resolves *prometheus.CounterVec
	degraded *prometheus.CounterVec
	// unknownCountry counts decisions for the unknown country, by cause:
	// no country given, or one that is not a known code.
	unknownCountry *prometheus.CounterVec
	etags          etagCache
	refused        prometheus.Counter
	mux            *http.ServeMux
	paths          []string     // what the mux serves, for a 404's body
	waiting        atomic.Int64 // blocking queries waiting for a newer table
	// tcpWaiting are those of them asked over TCP (the loopback listener,
	// open to every local user): at most half of MaxWaiting, so a local
	// user filling it leaves the socket's front doors the other half.
	tcpWaiting atomic.Int64
}

// Waiting returns how many blocking queries (min_revision) are waiting for
// a newer table.
func (s *Server) Waiting() int64 { return s.waiting.Load() }

// WriteTimeout is the bound on writing an answer that the server serving
// Handler must set as its http.Server.WriteTimeout (Config.WriteTimeout,
// after its default).
func (s *Server) WriteTimeout() time.Duration { return s.cfg.WriteTimeout }

// Handle mounts h at pattern on the API's mux (the status page, /ui/): it
// is served on every listener under the API's rules (GET and HEAD only;
// on loopback TCP, loopback Host names only).
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
	s.paths = append(s.paths, pattern)
}

// New returns the API over src.
func New(cfg Config, src Source) *Server {
	if cfg.MaxStale <= 0 {
		cfg.MaxStale = 15 * time.Minute
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	s := &Server{cfg: cfg, src: src, log: cfg.Logger.With("component", "api")}
	s.resolves = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "api",
		Name: "resolves_total", Help: "Resolve requests by outcome (ok, degraded, no_route, no_table)."}, []string{"outcome"})
	s.degraded = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "api",
		Name: "resolve_reasons_total", Help: "Reasons reported by resolve requests, by reason code."}, []string{"reason"})
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "api",
		Name: "blocking_queries_waiting", Help: "Blocking queries (min_revision) waiting for a newer table."},
		func() float64 { return float64(s.waiting.Load()) })
	s.refused = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "api",
		Name: "blocking_queries_refused_total", Help: "Blocking queries refused with 429: that many were waiting already (--max-blocking-queries)."})
	limit := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "regiond", Subsystem: "api",
		Name: "blocking_queries_limit", Help: "The most blocking queries that may wait at once (--max-blocking-queries)."})
	limit.Set(float64(cfg.MaxWaiting))
	s.unknownCountry = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "regiond", Subsystem: "api",
		Name: "resolves_unknown_country_total",
		Help: "Resolve requests answered for the unknown country (_unknown), by cause: missing (no country parameter or an empty one, and no CF-IPCountry header or an empty one), unrecognized (a value that is not a known country code)."},
		[]string{"cause"})
	for _, c := range []string{causeMissing, causeUnrecognized} {
		s.unknownCountry.WithLabelValues(c) // both series exist from the start, at 0
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.resolves, s.degraded, waiting, s.refused, limit, s.unknownCountry)
	}
	s.mux = http.NewServeMux()
	s.Handle("/v1/resolve", http.HandlerFunc(s.handleResolve))
	s.Handle("/v1/table", http.HandlerFunc(s.handleTable))
	s.Handle("/v1/status", http.HandlerFunc(s.handleStatus))
	s.Handle("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok\n") }))
	s.Handle("/readyz", http.HandlerFunc(s.handleReady))
	if cfg.Gatherer != nil {
		s.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	// Any other path: a JSON 404 (as every other API error) naming what
	// is served, not the mux's plain-text "404 page not found".
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no such endpoint %s; this agent serves %s",
			r.URL.Path, strings.Join(s.paths, ", ")))
	})
	return s
}

// Handler returns the API handler. With loopbackOnly, requests whose Host
// is not a loopback name are refused (DNS rebinding).
func (s *Server) Handler(loopbackOnly bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every answer is live (a decision, the table, the status): no
		// cache between a front door and the agent may keep one.
		w.Header().Set("Cache-Control", "no-store")
		hasBody := r.ContentLength != 0 || len(r.TransferEncoding) > 0
		if hasBody {
			// The API reads no body, but the server would wait for an
			// announced one after the answer, to reuse the connection:
			// a client announcing a body and sending none held its
			// connection for good (a local user could take all of
			// them). The connection is closed after the answer instead,
			// a body actually sent read for up to a second first (closed
			// with unread data, the connection would be reset under the
			// answer).
			w.Header().Set("Connection", "close")
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Second))
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method "+r.Method+" not allowed; the API is read-only (GET, HEAD)")
			return
		}
		if hasBody {
			writeError(w, http.StatusBadRequest, CodeBodyNotAllowed, "a request body is not taken: the API is read-only (GET, HEAD)")
			return
		}
		if loopbackOnly && !IsLoopbackHost(r.Host) {
			writeError(w, http.StatusForbidden, CodeForbiddenHost, fmt.Sprintf("host %q is not a loopback name; use 127.0.0.1 or localhost", r.Host))
			return
		}
		// A path that is not clean (//v1/resolve, /v1/./table) is a JSON
		// 404 naming the clean one: the mux would redirect it with an
		// HTML body, which a front door following no redirect, or
		// decoding the error, cannot read.
		if p := r.URL.Path; p != "" && p != cleanPath(p) {
			writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("path %q is not clean (an empty, . or .. segment); ask for %s", p, cleanPath(p)))
			return
		}
		if loopbackOnly {
			r = r.WithContext(context.WithValue(r.Context(), overTCP{}, true))
		}
		s.mux.ServeHTTP(w, r)
	})
}

// IsLoopbackHost reports whether an HTTP Host header (or a listen
// address's host) names the loopback interface: localhost (any case, with
// or without the root's trailing dot), an address of 127.0.0.0/8, or ::1
// (bare or in brackets), each with an optional port. A name that merely
// begins with one of those (localhost.example, 127.0.0.1.nip.io) is not
// loopback: it is resolved by DNS, the way of a rebinding attack.
func IsLoopbackHost(host string) bool {
	bracketed := strings.HasPrefix(host, "[")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h // without the brackets of [::1]:80
	} else if bracketed && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	} else if bracketed {
		return false
	}
	ip := net.ParseIP(host)
	if bracketed { // brackets hold an IPv6 address, nothing else
		return ip != nil && strings.Contains(host, ":") && ip.IsLoopback()
	}
	if strings.EqualFold(host, "localhost") || strings.EqualFold(host, "localhost.") {
		return true
	}
	return ip != nil && ip.IsLoopback()
}

// cleanPath is p as the mux would redirect it: path.Clean, keeping a
// trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// params parses r's query strictly: a pair that does not decode (a raw
// '%', a ';' separator), a parameter the endpoint does not take (a typo:
// contry=PL), or one given twice is a 400 naming it, never dropped: a
// dropped key would turn a sticky pick random, a dropped country send the
// viewer to _unknown's pools. It writes the 400 and returns false.
func params(w http.ResponseWriter, r *http.Request, takes ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeMalformedQuery, fmt.Sprintf(
			"malformed query %q: %v; percent-encode each value (%%25 for a literal %%) and separate parameters with &", r.URL.RawQuery, err))
		return nil, false
	}
	for _, name := range slices.Sorted(maps.Keys(q)) { // the first bad one, always the same
		vs := q[name]
		if !slices.Contains(takes, name) {
			takesText := "no parameters"
			if len(takes) > 0 {
				takesText = strings.Join(takes, ", ")
			}
			writeError(w, http.StatusBadRequest, CodeUnknownParam, fmt.Sprintf("unknown parameter %q: %s takes %s", name, r.URL.Path, takesText))
			return nil, false
		}
		if len(vs) > 1 {
			writeError(w, http.StatusBadRequest, CodeRepeatedParam, fmt.Sprintf("parameter %q given %d times; give it once", name, len(vs)))
			return nil, false
		}
	}
	return q, true
}

// overTCP marks, in a request's context, one that came over the loopback
// TCP listener.
type overTCP struct{}

// refuseWait answers a blocking query with 429 and Retry-After, and
// counts it.
func (s *Server) refuseWait(w http.ResponseWriter, msg string) {
	s.refused.Inc()
	w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	writeError(w, http.StatusTooManyRequests, CodeTooManyWaiting, msg)
}

// How a blocking query's wait ended, in the header X-Regiond-Wait.
const (
	// WaitMet: the table answering meets the query's condition (current
	// at min_revision; for /v1/table with If-None-Match, an ETag that
	// matches none given).
	WaitMet = "met"
	// WaitTimeout: the wait ended first (wait= passed, the client left or
	// the agent stops); the table the agent has answers, or 304, or 503
	// no_table.
	WaitTimeout = "timeout"
)

// Headers of every answer from a table (/v1/resolve, /v1/table).
const (
	// HeaderRevision is the revision the answering table is current at.
	HeaderRevision = "X-Regiond-Revision"
	// HeaderSyncedAt is when that table was last confirmed current
	// against etcd (RFC 3339, UTC), /v1/status's synced_at; absent when
	// it never was.
	HeaderSyncedAt = "X-Regiond-Synced-At"
	// HeaderWait says how a blocking query's wait ended (WaitMet,
	// WaitTimeout), on every answer to a request with min_revision or
	// wait.
	HeaderWait = "X-Regiond-Wait"
)

// tableFor returns the table a request is answered from, and how its
// wait ended ("" when none was asked). With min_revision=N it waits (up
// to wait=, default DefaultWait, at most MaxWait) until the table is
// current at revision N or later, and answers with the table it has when
// the wait ends (its revision tells which), as Consul's blocking queries
// do: a client that just wrote at revision N reads its write without
// polling. With inm (/v1/table's If-None-Match) and wait=, it also waits
// until the table's ETag matches none of inm: a change feed, woken by a
// table changed by the clock alone too. It writes a 400 and returns false
// for malformed parameters, and a 429 when MaxWaiting queries wait
// already.
func (s *Server) tableFor(w http.ResponseWriter, r *http.Request, q url.Values, inm string) (*routing.Table, string, bool) {
	if !q.Has("min_revision") && (!q.Has("wait") || inm == "") {
		if q.Has("wait") {
			msg := "wait needs min_revision: ?min_revision=N&wait=5s waits until the table is current at revision N"
			if r.URL.Path == "/v1/table" {
				msg = "wait needs min_revision or If-None-Match: ?min_revision=N&wait=5s waits until the table is current at revision N; with If-None-Match: <ETag>, ?wait=5m waits until the table's ETag differs"
			}
			writeError(w, http.StatusBadRequest, CodeBadParam, msg)
			return nil, "", false
		}
		return s.src.Table(), "", true
	}
	var min int64
	if q.Has("min_revision") {
		var err error
		if min, err = strconv.ParseInt(q.Get("min_revision"), 10, 64); err != nil || min < 0 {
			writeError(w, http.StatusBadRequest, CodeBadParam, fmt.Sprintf("min_revision %q is not a non-negative integer (an etcd revision)", q.Get("min_revision")))
			return nil, "", false
		}
	}
	wait := DefaultWait
	if q.Has("wait") {
		var err error
		if wait, err = time.ParseDuration(q.Get("wait")); err != nil || wait < 0 || wait > MaxWait {
			writeError(w, http.StatusBadRequest, CodeBadParam, fmt.Sprintf("wait %q is not a duration between 0s and %v (e.g. 500ms, 5s)", q.Get("wait"), MaxWait))
			return nil, "", false
		}
	}
	if strings.TrimSpace(inm) == "*" && q.Has("wait") {
		// "*" matches every table: the wait could only end at its
		// deadline, holding a place among the waiting.
		writeError(w, http.StatusBadRequest, CodeBadParam, "If-None-Match: * with wait: * matches every table, so the wait would never end before its deadline; send the ETag of the table you have")
		return nil, "", false
	}
	met := func(t *routing.Table, now time.Time) bool {
		return t != nil && t.Revision() >= min && (inm == "" || !matchesETag(inm, s.etags.of(t, now).tag))
	}
	if t := s.src.Table(); met(t, time.Now()) {
		return t, WaitMet, true // no wait: it takes no place among the waiting
	} else if wait == 0 {
		return t, WaitTimeout, true
	}
	tcp, _ := r.Context().Value(overTCP{}).(bool)
	if tcp {
		if s.tcpWaiting.Add(1) > int64(max(1, s.cfg.MaxWaiting/2)) {
			s.tcpWaiting.Add(-1)
			s.refuseWait(w, fmt.Sprintf("too many blocking queries over TCP: half the cap of %d (--max-blocking-queries) are waiting (the other half is the unix socket's); retry later, ask over the socket, or ask without min_revision for the current table",
				s.cfg.MaxWaiting))
			return nil, "", false
		}
		defer s.tcpWaiting.Add(-1)
	}
	if s.waiting.Add(1) > int64(s.cfg.MaxWaiting) {
		s.waiting.Add(-1)
		s.refuseWait(w, fmt.Sprintf(
			"too many blocking queries: the cap of %d (--max-blocking-queries) are waiting for a newer table; retry later, or ask without min_revision for the current table",
			s.cfg.MaxWaiting))
		return nil, "", false
	}
	defer s.waiting.Add(-1)
	// The answer is written after the wait: the server's WriteTimeout
	// counts from the request (a client that stops reading is cut then).
	defer func() { _ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) }()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	// clock wakes an If-None-Match wait when the table changes by the
	// clock alone (the mirror swaps in the rebuilt table then too, which
	// Changed tells; this does not depend on it).
	clock := time.NewTimer(time.Hour)
	clock.Stop()
	defer clock.Stop()
	for {
		changed := s.src.Changed()
		t, now := s.src.Table(), time.Now()
		if met(t, now) {
			return t, WaitMet, true
		}
		var wake <-chan time.Time
		if t != nil && inm != "" {
			if until := t.At(now).ValidUntil(); !until.IsZero() {
				clock.Reset(max(until.Sub(now), 0))
				wake = clock.C
			}
		}
		select {
		case <-changed:
		case <-wake:
		case <-timer.C:
			return s.lastLook(met)
		case <-r.Context().Done():
			return s.lastLook(met)
		}
		clock.Stop()
	}
}

// lastLook is a blocking query's answer at its deadline: the current
// table, said met when it is (one swapped in as the timer fired).
func (s *Server) lastLook(met func(*routing.Table, time.Time) bool) (*routing.Table, string, bool) {
	t := s.src.Table()
	if met(t, time.Now()) {
		return t, WaitMet, true
	}
	return t, WaitTimeout, true
}

// tableHeaders sets the headers of an answer from t at now: its ETag,
// revision and when it was last confirmed current against etcd. It
// returns the table's ETag entry and that time (zero when never).
func (s *Server) tableHeaders(w http.ResponseWriter, t *routing.Table, now time.Time) (*etagEntry, time.Time) {
	h := w.Header()
	e := s.etags.of(t, now)
	h.Set("ETag", e.tag)
	h.Set(HeaderRevision, strconv.FormatInt(t.Revision(), 10))
	synced := s.src.Status().SyncedAt
	if !synced.IsZero() {
		h.Set(HeaderSyncedAt, synced.UTC().Format(time.RFC3339Nano))
	}
	return e, synced
}

// Causes of a decision for the unknown country
// (regiond_api_resolves_unknown_country_total).
const (
	causeMissing      = "missing"
	causeUnrecognized = "unrecognized"
)

// explainBody is the answer of explain=1: the Explanation, with the
// revision and epoch of the table that explained it (a NoRoute carries
// them, and an explanation that found no route had only its decision's),
// and for no route the error and code of a NoRoute.
type explainBody struct {
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
	routing.Explanation
	Revision int64 `json:"revision"`
	Epoch    int64 `json:"epoch"`
}

func (s *Server) handleResolve(w http.ResponseWriter, r *http.Request) {
	q, ok := params(w, r, "country", "key", "explain", "min_revision", "wait")
	if !ok {
		return
	}
	explain := false
	switch v := q.Get("explain"); v {
	case "", "0", "false":
	case "1", "true":
		explain = true
	default:
		writeError(w, http.StatusBadRequest, CodeBadParam, fmt.Sprintf("explain=%s: want 1 or true (0 or false: a plain decision)", v))
		return
	}
	t, waited, ok := s.tableFor(w, r, q, "")
	if !ok {
		return
	}
	if waited != "" {
		w.Header().Set(HeaderWait, waited)
	}
	if t == nil {
		if !explain { // an explain is a diagnostic, not a decision: not counted
			s.resolves.WithLabelValues("no_table").Inc()
		}
		writeNoTable(w)
		return
	}
	if t.NumPools() == 0 {
		// A table without pools (a wrong --prefix, every pool deleted
		// around regionctl) answers every viewer NoRoute, which a front
		// door must take as a decision ("unavailable"). It is no
		// decision: the agent holds its snapshot files at the last table
		// with pools, and no_table sends a front door to them.
		if !explain {
			s.resolves.WithLabelValues("no_table").Inc()
		}
		s.tableHeaders(w, t, time.Now())
		epoch := t.Epoch()
		w.Header().Set("Retry-After", strconv.Itoa(int(NoTableRetryAfter/time.Second)))
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: noPoolsMsg, Code: CodeNoTable, Revision: t.Revision(), Epoch: &epoch})
		return
	}
	// An empty country= is no country: the header's, as when absent (a
	// front door building ?country=$var&… with $var empty meant none).
	country := q.Get("country")
	if country == "" {
		country = r.Header.Get("CF-IPCountry")
	}
	key, now := q.Get("key"), time.Now()
	s.tableHeaders(w, t, now)
	if explain {
		ex := explainBody{Explanation: t.Explain(country, key, now), Revision: t.Revision(), Epoch: t.Epoch()}
		status := http.StatusOK
		if ex.NoRoute {
			status, ex.Error, ex.Code = http.StatusServiceUnavailable, "no eligible pool", CodeNoRoute
		}
		writeJSON(w, status, ex)
		return
	}
	d, err := t.Resolve(country, key, now)
	for _, reason := range d.Degraded {
		code, _, _ := strings.Cut(reason, ":")
		s.degraded.WithLabelValues(code).Inc()
	}
	if d.Country == routing.Unknown {
		cause := causeUnrecognized
		if strings.TrimSpace(country) == "" {
			cause = causeMissing
		}
		s.unknownCountry.WithLabelValues(cause).Inc()
	}
	if errors.Is(err, routing.ErrNoRoute) {
		s.resolves.WithLabelValues("no_route").Inc()
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "no eligible pool", Code: CodeNoRoute, Country: d.Country, Reasons: d.Degraded,
			Revision: d.Revision, Epoch: &d.Epoch})
		return
	}
	outcome := "ok"
	if len(d.Degraded) > 0 {
		outcome = "degraded"
	}
	s.resolves.WithLabelValues(outcome).Inc()
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) handleTable(w http.ResponseWriter, r *http.Request) {
	q, ok := params(w, r, "min_revision", "wait")
	if !ok {
		return
	}
	inm := r.Header.Get("If-None-Match")
	t, waited, ok := s.tableFor(w, r, q, inm)
	if !ok {
		return
	}
	if waited != "" {
		w.Header().Set(HeaderWait, waited)
	}
	if t == nil {
		writeNoTable(w)
		return
	}
	now := time.Now()
	e, synced := s.tableHeaders(w, t, now)
	if inm != "" && matchesETag(inm, e.tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	b, err := t.JSONWith(nil, routing.JSONHeader{WrittenAt: now, SyncedAt: synced})
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeInternal, "render table: "+err.Error())
		return
	}
	// The table JSON as the snapshot files have it, but for DEL and the
	// C1 controls (a key an origin named with one), escaped as in every
	// other answer of the API: the same JSON, which no longer drives the
	// terminal of whoever curls it. Known per table (its ETag's pass), so
	// a table without them, the common case, is served as rendered.
	if e.controls {
		b = EscapeControls(b)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// Status is the body of /v1/status.
type Status struct {
	// Node is the agent's node name (Config.Node).
	Node string `json:"node"`
	// Revision is the etcd revision the table is known to be current at.
	Revision int64 `json:"revision"`
	// Epoch is the config epoch of the table.
	Epoch int64 `json:"epoch"`
	// Connected is true while a watch of etcd follows the prefix.
	Connected bool `json:"connected"`
	// SyncedAt (RFC 3339 UTC, nanoseconds) is when the table was last
	// confirmed current against etcd; empty when never.
	SyncedAt string `json:"synced_at"`
	// StaleSeconds is how long ago SyncedAt was, in seconds; -1 when never.
	StaleSeconds float64 `json:"stale_seconds"`
	// Stale is true while the table served is the snapshot file's read at
	// start, not yet confirmed by etcd; not about age.
	Stale bool `json:"stale"`
	// Skipped are the keys whose values the table refuses; empty, not
	// null, when none.
	Skipped []routing.Skipped `json:"skipped"`
	// EtcdError is why the agent cannot use etcd (its login refused,
	// etcd unreachable at start or since, its read of the prefix
	// refused); absent once it can.
	EtcdError string `json:"etcd_error,omitempty"`
	// StatusError is why the agent's status key is not published (so
	// regionctl status and --wait-converged see its last status, or none):
	// its last lease or put failed, as under etcd's NOSPACE alarm; absent
	// once a put succeeds.
	StatusError string `json:"status_error,omitempty"`
	// SnapshotError is why the snapshot files do not hold the table
	// served: their last write failed (a full or read-only directory), so
	// front doors reading them route by an older table; absent while
	// they are written.
	SnapshotError string `json:"snapshot_error,omitempty"`
}

// status computes the agent's status now.
func (s *Server) status(now time.Time) (Status, bool) {
	st := s.src.Status()
	t := s.src.Table()
	out := Status{Node: s.cfg.Node, Revision: st.Revision, Epoch: st.Epoch, Connected: st.Connected,
		Skipped: []routing.Skipped{}, StaleSeconds: -1, EtcdError: s.src.EtcdError(), StatusError: s.src.StatusError(),
		SnapshotError: s.src.SnapshotError()}
	if out.EtcdError == "" {
		out.EtcdError = st.Refused // from the same snapshot as Connected
	}
	if out.EtcdError == "" && st.Unreachable != "" {
		out.EtcdError = "etcd unreachable: " + st.Unreachable
	}
	if !st.SyncedAt.IsZero() {
		out.SyncedAt = st.SyncedAt.UTC().Format(time.RFC3339Nano)
		// A monotonic age once confirmed in this process; from a seed
		// (the file's wall time), never below 0 for a clock stepped back.
		out.StaleSeconds = max(now.Sub(st.SyncedAt).Seconds(), 0)
	}
	if t != nil {
		out.Stale = t.Stale()
		if sk := t.Skipped(); sk != nil {
			out.Skipped = sk
		}
	}
	ready := t != nil && !st.SyncedAt.IsZero() && now.Sub(st.SyncedAt) <= s.cfg.MaxStale && t.NumPools() > 0
	return out, ready
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	if _, ok := params(w, r); !ok {
		return
	}
	st, _ := s.status(time.Now())
	writeJSON(w, http.StatusOK, st)
}

// handleReady answers /readyz: 200 "ok" when the agent serves a table
// confirmed within --max-stale that has pools; with ?synced=1, only when
// it also follows etcd now, with a table confirmed by this run (not one
// read back from its snapshot at start): the check of a node after its
// restart, which the plain readiness passes on a node that cannot reach
// etcd (its snapshot copy is fresh enough). Its other parameters are
// ignored, as probes expect.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	synced, err := syncedParam(r.URL.Query())
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error()+"\n")
		return
	}
	st, ready := s.status(time.Now())
	switch {
	case ready && synced && st.Stale:
		writeText(w, http.StatusServiceUnavailable, "not synced: serving the table read back from its snapshot file at start (confirmed "+st.SyncedAt+"), not yet confirmed against etcd"+etcdErrorText(st)+"\n")
	case ready && synced && !st.Connected:
		writeText(w, http.StatusServiceUnavailable, "not synced: not following etcd"+etcdErrorText(st)+"; serving the table last confirmed "+st.SyncedAt+"\n")
	case ready:
		writeText(w, http.StatusOK, "ok\n")
	case s.src.Table() == nil:
		writeText(w, http.StatusServiceUnavailable, "not ready: no routing table loaded yet\n")
	case s.src.Table().NumPools() == 0 && st.SyncedAt != "":
		writeText(w, http.StatusServiceUnavailable, fmt.Sprintf("not ready: the table (epoch %d, revision %d) has no pools, so nothing routes (a snapshot file with pools is kept as it is): is --prefix right, and was a config applied (regionctl apply)?\n", st.Epoch, st.Revision))
	default:
		writeText(w, http.StatusServiceUnavailable, "not ready: table last confirmed "+st.SyncedAt+", older than --max-stale "+s.cfg.MaxStale.String()+"\n")
	}
}

// syncedParam reads /readyz's synced parameter: absent, 0 or false is
// off; 1 or true is on; anything else, empty too, is an error naming it
// (a probe with a typo'd value, or a bare ?synced, must not pass as the
// plain one).
func syncedParam(q url.Values) (bool, error) {
	vs, ok := q["synced"]
	if !ok {
		return false, nil
	}
	switch v := vs[0]; v {
	case "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	default:
		return false, fmt.Errorf("bad value %q for synced: give synced=1 (ready, and following etcd now) or leave it out", v)
	}
}

// etcdErrorText is ": " and why the agent is not following etcd, from
// the status, or "" when nothing says why.
func etcdErrorText(st Status) string {
	if st.EtcdError == "" {
		return ""
	}
	return ": " + st.EtcdError
}

// writeJSON answers v as JSON on one line. Characters are written as they
// are (an error quoting `explain=<b>&x` shows just that): the answers are
// read by operators and programs, never embedded in HTML, so
// encoding/json's HTML escaping (\u003c, \u0026) would only garble them.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b) // Encode ends the line
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		b.Reset()
		b.WriteString(`{"error":"encode response","code":"internal"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(EscapeControls(b.Bytes()))
}

// EscapeControls returns js (JSON) with DEL and the C1 controls (U+0080 to
// U+009F), which encoding/json writes raw, as \u escapes: the same JSON,
// but a value from etcd holding one (a key name an origin wrote) no longer
// drives the terminal of whoever curls the API. js itself when it holds
// none. The status page's JSON (internal/ui) goes through it too.
func EscapeControls(js []byte) []byte {
	if !hasControls(js) {
		return js
	}
	out := make([]byte, 0, len(js)+16)
	for _, r := range string(js) {
		if r == 0x7f || r >= 0x80 && r <= 0x9f {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// hasControls reports whether b holds DEL or a C1 control in UTF-8
// (0xc2 0x80 to 0xc2 0x9f), what EscapeControls escapes: two scans of
// bytes.IndexByte, fast for the size of a table JSON.
func hasControls(b []byte) bool {
	if bytes.IndexByte(b, 0x7f) >= 0 {
		return true
	}
	for {
		i := bytes.IndexByte(b, 0xc2)
		if i < 0 || i+1 >= len(b) {
			return false
		}
		if c := b[i+1]; c >= 0x80 && c <= 0x9f {
			return true
		}
		b = b[i+1:]
	}
}

func writeText(w http.ResponseWriter, status int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(s))
}

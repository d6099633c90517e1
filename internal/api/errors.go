package api

import (
	"net/http"
	"strconv"
	"time"
)

// The codes of the API's JSON errors (docs/agent.md#errors): stable,
// machine-readable, in the member "code" beside the human "error". A
// front door acts on the code, never on the message.
const (
	// CodeNoRoute: 503, no pool of the viewer's chain is eligible (drained,
	// down, or forbidden by residency). A decision, not an outage: a
	// front door must not fall back to a default pool for it.
	CodeNoRoute = "no_route"
	// CodeNoTable: 503 with Retry-After, the agent has loaded no table yet
	// (nor at the end of a blocking query's wait).
	CodeNoTable = "no_table"
	// CodeMalformedQuery: 400, the query does not decode.
	CodeMalformedQuery = "malformed_query"
	// CodeUnknownParam: 400, a parameter the endpoint does not take.
	CodeUnknownParam = "unknown_param"
	// CodeRepeatedParam: 400, a parameter given more than once.
	CodeRepeatedParam = "repeated_param"
	// CodeBadParam: 400, a parameter's value is not one the endpoint
	// takes, or it needs another parameter.
	CodeBadParam = "bad_param"
	// CodeBodyNotAllowed: 400, the request announced a body.
	CodeBodyNotAllowed = "body_not_allowed"
	// CodeForbiddenHost: 403, on loopback TCP a Host that is not a
	// loopback name.
	CodeForbiddenHost = "forbidden_host"
	// CodeNotFound: 404, a path the agent does not serve, or one that is
	// not clean (an empty, . or .. segment).
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed: 405, a method other than GET and HEAD.
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeTooManyWaiting: 429 with Retry-After, the blocking queries'
	// cap is reached.
	CodeTooManyWaiting = "too_many_waiting"
	// CodeInternal: 500, the answer could not be made.
	CodeInternal = "internal"
)

// errorCodes lists every code, for the test that finds each documented.
var errorCodes = []string{CodeNoRoute, CodeNoTable, CodeMalformedQuery, CodeUnknownParam, CodeRepeatedParam,
	CodeBadParam, CodeBodyNotAllowed, CodeForbiddenHost, CodeNotFound, CodeMethodNotAllowed, CodeTooManyWaiting, CodeInternal}

// NoTableRetryAfter is the Retry-After of a 503 no_table: a table comes
// with the first list of etcd or the snapshot file read at start.
const NoTableRetryAfter = time.Second

// errorBody is every JSON error: a code and a message, and for a NoRoute
// the country, reasons, revision and epoch.
type errorBody struct {
	Error   string   `json:"error"`
	Code    string   `json:"code"`
	Country string   `json:"country,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
	// Revision and Epoch name the table that found no route; a NoRoute
	// carries both, epoch 0 (nothing applied yet) too, as a Decision does.
	Revision int64  `json:"revision,omitempty"`
	Epoch    *int64 `json:"epoch,omitempty"`
}

// writeError answers a JSON error with its code.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: msg, Code: code})
}

// writeNoTable answers 503 no_table with Retry-After.
func writeNoTable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(int(NoTableRetryAfter/time.Second)))
	writeError(w, http.StatusServiceUnavailable, CodeNoTable, "no routing table loaded yet")
}

// noPoolsMsg is no_table's message for a table without pools: it routes
// nothing, so its NoRoutes are no decision (see handleResolve); the
// answer names the table's revision and epoch.
const noPoolsMsg = "the routing table has no pools (a wrong --prefix, or no config applied yet): nothing routes; snapshot files that had pools are kept as they were (regiond_snapshot_held 1), files that had none are written as usual"

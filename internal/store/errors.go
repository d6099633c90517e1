package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/routing"
)

// ErrNotFound is returned when a named object (audit record, override)
// does not exist.
var ErrNotFound = errors.New("store: not found")

// ConflictError means the state changed between the read and the Txn: the
// write was not applied and may be re-run.
type ConflictError struct {
	// Epoch is the epoch the write was built on; Now is the epoch found
	// when the Txn failed.
	Epoch, Now int64
	// Key is set when a guarded key other than the epoch changed (an
	// override that expired or was replaced).
	Key string
}

// Error tells the operator what happened and what to do.
func (e *ConflictError) Error() string {
	if e.Key != "" && e.Epoch == e.Now {
		return fmt.Sprintf("%s changed concurrently (expired or replaced); re-run", e.Key)
	}
	return fmt.Sprintf("config changed concurrently (epoch %d → %d); re-run", e.Epoch, e.Now)
}

// RefusedError means the proposed state breaks an invariant; nothing was
// written. Errs lists every problem, each naming its key and field.
type RefusedError struct {
	Errs routing.Errors
	// Changes are the writes that were proposed (and not made).
	Changes []routing.Change
}

// Error lists the problems, one per line.
func (e *RefusedError) Error() string {
	return "refused, nothing written:\n" + e.Errs.Error()
}

// UnreachableError means etcd did not answer; Endpoints are those tried.
type UnreachableError struct {
	Endpoints []string
	Err       error
}

// Error names the endpoints tried.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("etcd unreachable at %s: %v (check --endpoints, TLS flags and that the cluster has a leader)",
		strings.Join(e.Endpoints, ","), e.Err)
}

// Unwrap returns the underlying error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// NotConvergedError means some live agents did not reach a revision in time.
type NotConvergedError struct {
	Revision int64
	Waited   time.Duration
	Lagging  []AgentInfo
}

// Error names the lagging agents.
func (e *NotConvergedError) Error() string {
	names := make([]string, len(e.Lagging))
	for i, a := range e.Lagging {
		names[i] = fmt.Sprintf("%s@%d", a.Node, a.Revision)
	}
	waited := ""
	if e.Waited > 0 {
		waited = " after " + e.Waited.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("not converged to revision %d%s: %d agent(s) behind: %s",
		e.Revision, waited, len(e.Lagging), strings.Join(names, ", "))
}

// rpcErr wraps an etcd request error with what was being done, turning
// "no answer" errors into *UnreachableError.
func (s *Store) rpcErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if isUnreachable(err) {
		return &UnreachableError{Endpoints: s.opts.Endpoints, Err: fmt.Errorf("%s: %w", what, err)}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isUnreachable reports whether err means the cluster did not answer (as
// opposed to answering with a refusal).
func isUnreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

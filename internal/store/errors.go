package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/regiond/regiond/internal/etcddiag"
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
	// override that expired or was replaced, or a config key written
	// around regionctl).
	Key string
	// Outside says Key is a config key written since the write read the
	// state with no epoch of its own: by etcdctl or a script, not
	// regionctl.
	Outside bool
	// EpochByHand says the epoch key was written (put forward, put again,
	// or deleted: EpochDeleted) since the write read it, with no audit
	// record of the next epoch: around regionctl, by etcdctl or a
	// script, no write of regionctl's. EpochValue is what it holds then.
	EpochByHand, EpochDeleted bool
	EpochValue                string
}

// Error tells the operator what happened and what to do.
func (e *ConflictError) Error() string {
	if e.EpochByHand {
		what := fmt.Sprintf("put again (%q)", e.EpochValue)
		if e.EpochDeleted {
			what = "deleted"
		} else if strings.TrimSpace(e.EpochValue) != strconv.FormatInt(e.Epoch, 10) {
			what = fmt.Sprintf("put to %q (from %d)", e.EpochValue, e.Epoch)
		}
		return fmt.Sprintf("the epoch key was %s around regionctl (etcdctl, a script: no audit record of epoch %d) after this write read it; nothing written; "+
			"re-run: the write builds on the epoch key as it is now (no history record names that change)", what, e.Epoch+1)
	}
	if e.Key != "" && e.Epoch == e.Now && e.Outside {
		return fmt.Sprintf("%s was written outside regionctl (etcdctl, a script: no epoch, no audit record) after this write read it, so it was not overwritten; "+
			"re-run: the write reads it as it is now (regionctl get shows it), and a verb that sets it, as apply -f does, writes its value over the hand edit, its audit record naming the hand edit as replaced", e.Key)
	}
	if e.Key != "" && e.Epoch == e.Now {
		return fmt.Sprintf("%s changed concurrently (expired or replaced); re-run", e.Key)
	}
	if e.Epoch == e.Now {
		return "a key this write guards changed concurrently with no epoch of its own (a hand edit, a boost's lease ended); nothing written; re-run"
	}
	if e.Now < e.Epoch {
		// One etcd's epoch never goes back: two reads were answered by
		// different clusters, or histories (a backup restored meanwhile).
		return fmt.Sprintf("the epoch went back (%d → %d) between the read and the write: the endpoints answer from different etcd clusters or histories (check --endpoints: etcdctl endpoint status -w table shows each one's cluster ID); nothing written, and a re-run may meet the same", e.Epoch, e.Now)
	}
	if e.Now == e.Epoch+1 || e.Now-e.Epoch > 1000 { // more: the epoch key set forward by hand, no records of them
		return fmt.Sprintf("config changed concurrently (epoch %d → %d); re-run (it builds on the new state: regionctl history %d shows what changed)", e.Epoch, e.Now, e.Now)
	}
	// Several writes came between: each its own record (the review: a
	// history of the last alone hid the others).
	return fmt.Sprintf("config changed concurrently (epoch %d → %d: %d writes); re-run (it builds on the new state: regionctl history --limit %d shows what changed)", e.Epoch, e.Now, e.Now-e.Epoch, e.Now-e.Epoch)
}

// RefusedError means the proposed state breaks an invariant; nothing was
// written. Errs lists every problem, each naming its key and field.
type RefusedError struct {
	// Errs are the problems found, sorted.
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
	// Endpoints are the endpoints tried, as given.
	Endpoints []string
	// Err is the error of the request that got no answer.
	Err error
	// Why is what each endpoint's own dial found (etcddiag.Why): a
	// refused connection, a certificate, TLS against plaintext; "" when
	// every endpoint took the connection.
	Why string
	// Connected are the endpoints that took the connection while others
	// did not: etcd there did not answer, as a member without a leader
	// does when a quorum of members is down.
	Connected []string
	// NothingWritten is set (NothingWritten) for a write whose Txn etcd
	// certainly did not apply: the failure came before it was sent, or
	// etcd answered that it did not apply it. The message then says
	// nothing was written. Never set when the outcome is unknown (that is
	// an *OutcomeUnknownError).
	NothingWritten bool
}

// Error names the endpoints tried, and what each answered when known.
func (e *UnreachableError) Error() string {
	var msg string
	if e.Why != "" {
		msg = fmt.Sprintf("etcd unreachable at %s: %v (%s)", strings.Join(e.Endpoints, ","), e.Err, etcddiag.Describe(e.Why, e.Connected))
	} else {
		msg = fmt.Sprintf("etcd unreachable at %s: %v (check --endpoints, TLS flags and that the cluster has a leader)",
			strings.Join(e.Endpoints, ","), e.Err)
	}
	if e.NothingWritten && !strings.Contains(fmt.Sprint(e.Err), "nothing written") {
		msg += "; nothing was written"
	}
	return msg
}

// NothingWritten marks err, when it is an *UnreachableError, as the
// failure of a write whose Txn etcd certainly did not apply (see
// UnreachableError.NothingWritten), and returns it. A caller that dials
// for a write marks the dial's error so.
func NothingWritten(err error) error {
	var ue *UnreachableError
	var unknown *OutcomeUnknownError
	if errors.As(err, &ue) && !errors.As(err, &unknown) {
		ue.NothingWritten = true
	}
	return err
}

// Unwrap returns the underlying error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// lagAlone is 1 for an agent that is only behind, 0 for one whose status
// key does not decode, of another history, serving refused values or with
// its snapshot files not written.
func (a AgentInfo) lagAlone() int {
	if a.problem() != ReasonBehind {
		return 0
	}
	return 1
}

// MaxNamedAgents is how many agents a message names (a NotConvergedError,
// status's paragraphs) before "and N more": a fleet of thousands would
// make a message no terminal shows.
const MaxNamedAgents = 10

// FirstNames joins the first MaxNamedAgents of names with sep, then "and
// N more" for the rest: "n1; n2; and 3 more" (sep "; ").
func FirstNames(names []string, sep string) string {
	if len(names) <= MaxNamedAgents {
		return strings.Join(names, sep)
	}
	shown := slices.Clone(names[:MaxNamedAgents])
	return strings.Join(append(shown, fmt.Sprintf("and %d more", len(names)-MaxNamedAgents)), sep)
}

// NotConvergedError means some live agents did not reach a revision in
// time or serve refused values (skipped keys), or their status could not
// be read.
type NotConvergedError struct {
	// Revision is the revision the agents were to reach (the write's).
	Revision int64
	// Waited is how long the wait lasted.
	Waited time.Duration
	// Lagging are the agents not converged: behind Revision, of another
	// history, or serving refused values (AgentInfo.ServesRefused).
	Lagging []AgentInfo
	// Err is what failed, when a read of the agents' status failed (the
	// last such failure when the wait ended on its deadline); nil when the
	// agents were read and some simply lag.
	Err error
	// Unknown is set when the agents' status keys could not be listed at
	// all: Lagging is then empty without meaning that none lag.
	Unknown bool
	// NoAgents names the agents' prefix when it held no live agent's
	// status key: nothing confirmed the write (a --prefix other than the
	// agents', every agent down).
	NoAgents string
	// Vanished are the agents whose status key disappeared during the
	// wait before they confirmed Revision, as last seen: stopped, or cut
	// off from etcd (the key's lease ran out) and still serving what they
	// had. The key of neither kind comes back; nothing tells them apart.
	Vanished []AgentInfo
	// Lost are the nodes whose status key was already gone when the wait
	// listed the agents and whose node record is there (Fleet.Lost), as
	// their record last said: they were not waited for by their key's
	// return alone; one whose key comes back is judged anew.
	Lost []AgentInfo
	// Expected, when set, is how many live agents were to confirm
	// Revision (--expect-agents), and Confirmed how many did.
	Expected, Confirmed int
}

// shortfall says that fewer agents than expected confirmed the revision
// ("" when enough did, or none was expected).
func (e *NotConvergedError) shortfall() string {
	if e.Expected == 0 || e.Confirmed >= e.Expected {
		return ""
	}
	return fmt.Sprintf("%d of the %d agents expected (--expect-agents) confirmed it: the others are behind (named here, if live) or their status keys are gone (stopped, or cut off from etcd and serving their last table, as their front doors read it; regionctl status lists the live ones)",
		e.Confirmed, e.Expected)
}

// Error names the lagging agents and what failed.
func (e *NotConvergedError) Error() string {
	waited := ""
	if e.Waited > 0 {
		waited = " after " + e.Waited.Round(time.Millisecond).String()
	}
	msg := fmt.Sprintf("not converged to revision %d%s: ", e.Revision, waited)
	switch {
	case e.Unknown:
		msg += "the agents' status keys could not be read"
	case e.NoAgents != "" && len(e.Vanished) == 0 && len(e.Lost) == 0:
		msg += fmt.Sprintf("no live agent under %s confirmed it: is --prefix the agents' --prefix, and are they running (regionctl status)?", e.NoAgents)
	case len(e.Lagging) == 0 && len(e.Vanished) == 0 && len(e.Lost) == 0:
		msg += e.shortfall()
	case len(e.Lagging) == 0:
		var parts []string
		if len(e.Vanished) > 0 {
			parts = append(parts, vanishedString(e.Vanished))
		}
		if len(e.Lost) > 0 {
			parts = append(parts, LostString(e.Lost))
		}
		if s := e.shortfall(); s != "" {
			parts = append(parts, s)
		}
		msg += strings.Join(parts, "; ")
	default:
		// Agents a lag alone does not explain (an undecodable status key,
		// another history, refused values) first: they are named even
		// among thousands merely behind.
		lagging := slices.Clone(e.Lagging)
		slices.SortStableFunc(lagging, func(a, b AgentInfo) int { return cmp.Compare(a.lagAlone(), b.lagAlone()) })
		names := make([]string, 0, min(len(lagging), MaxNamedAgents+1))
		skipping := false
		for i, a := range lagging {
			skipping = skipping || a.ServesRefused()
			if i >= MaxNamedAgents {
				continue
			}
			n := fmt.Sprintf("%s@%d", a.Node, a.Revision)
			if a.Invalid != "" {
				n = fmt.Sprintf("%s (its status key %s does not decode: %s)", a.Node, a.Key, a.Invalid)
			}
			if a.ServesRefused() {
				n += " serving refused values of " + skippedString(a.AgentStatus)
			}
			if a.Diverged != "" {
				n += " (" + a.Diverged + ")"
			}
			if a.SnapshotError != "" {
				n += " (" + SnapshotErrorString(a.SnapshotError) + ")"
			}
			if a.lagAlone() == 1 {
				n += " (behind)" // the review: a bare node@rev read as any of the four
			}
			names = append(names, n)
		}
		if more := len(lagging) - len(names); more > 0 {
			// A fleet of thousands behind (etcd away, a storm) would
			// make a message no terminal shows.
			names = append(names, fmt.Sprintf("and %d more (regionctl status lists them all)", more))
		}
		msg += fmt.Sprintf("%d agent(s) behind, of another history, serving refused values or with snapshot files not written: %s", len(e.Lagging), strings.Join(names, "; "))
		if skipping {
			msg += " (fix or delete those keys: regionctl validate names what is wrong with them)"
		}
		if len(e.Vanished) > 0 {
			msg += "; " + vanishedString(e.Vanished)
		}
		if len(e.Lost) > 0 {
			msg += "; " + LostString(e.Lost)
		}
		if s := e.shortfall(); s != "" {
			msg += "; " + s
		}
	}
	if e.Err != nil {
		msg += fmt.Sprintf(" (last error: %v)", e.Err)
	}
	return msg
}

// Unwrap returns Err.
func (e *NotConvergedError) Unwrap() error { return e.Err }

// ByReason counts the agents the error names by why they are not
// converged (the keys of Reasons: the lagging agents by
// AgentInfo.NotConvergedReason, then ReasonVanished and ReasonLost), and
// names the first MaxNamedAgents of each reason, in node order, for -o
// json. Both are empty when nothing is named (the status keys could not
// be read, no agent was live, only fewer than expected confirmed).
func (e *NotConvergedError) ByReason() (counts map[string]int, first map[string][]string) {
	counts, first = map[string]int{}, map[string][]string{}
	add := func(reason string, agents []AgentInfo) {
		nodes := slices.Clone(agents)
		slices.SortStableFunc(nodes, func(a, b AgentInfo) int { return cmp.Compare(a.Node, b.Node) })
		for _, a := range nodes {
			r := reason
			if r == "" {
				r = a.problem()
			}
			counts[r]++
			if len(first[r]) < MaxNamedAgents {
				first[r] = append(first[r], a.Node)
			}
		}
	}
	add("", e.Lagging)
	add(ReasonVanished, e.Vanished)
	add(ReasonLost, e.Lost)
	return counts, first
}

// vanishedString names the agents whose status key disappeared during a
// wait, and what that may mean.
func vanishedString(vanished []AgentInfo) string {
	return fmt.Sprintf("%d agent(s) whose status key disappeared before they confirmed it: %s: stopped, or cut off from etcd and still serving their last table (check each node: curl its /v1/status, systemctl status regiond)",
		len(vanished), nodesAt(vanished))
}

// nodesAt is "n1@12; n2@9", the first MaxNamedAgents agents by node and
// revision, then "and N more".
func nodesAt(agents []AgentInfo) string {
	names := make([]string, len(agents))
	for i, a := range agents {
		names[i] = fmt.Sprintf("%s@%d", a.Node, a.Revision)
	}
	return FirstNames(names, "; ")
}

// LostString names lost nodes (Fleet.Lost), each with the revision its
// record last said, and what that may mean and what to do.
func LostString(lost []AgentInfo) string {
	return fmt.Sprintf("%d node(s) lost: their status key ended with its lease and no clean stop removed their node record (cut off from etcd and serving their last table, crashed, or the host gone): %s (each as its record last said; check the node: curl its /v1/status, systemctl status regiond; regionctl agent rm NODE forgets a node taken out of the fleet)",
		len(lost), nodesAt(lost))
}

// skippedString is "2 key(s): policy/residency, routes/PL", with "(N
// served alike)" when some are (they do not count against convergence)
// and "and N more" when the status names only the first keys.
func skippedString(a routing.AgentStatus) string {
	s := fmt.Sprintf("%d key(s)", a.Skipped)
	if a.SkippedAlike > 0 {
		s += fmt.Sprintf(" (%d served alike)", a.SkippedAlike)
	}
	if len(a.SkippedKeys) > 0 {
		s += ": " + strings.Join(a.SkippedKeys, ", ")
	}
	if more := a.Skipped - len(a.SkippedKeys); more > 0 && len(a.SkippedKeys) > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// SkippedString describes an agent's skipped keys for a table: "-" when
// none, else "2: policy/residency, routes/PL" or "1 (1 served alike):
// health/eu-west/h1".
func SkippedString(a routing.AgentStatus) string {
	if a.Skipped == 0 {
		return "-"
	}
	return strings.Replace(skippedString(a), " key(s)", "", 1)
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
	if h := etcddiag.Hint(err); h != "" {
		if !strings.Contains(what, "nothing written") {
			what += ": refused by etcd, nothing written"
		}
		return fmt.Errorf("%s: %w (%s)", what, err, h)
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

// EpochResetError means the epoch key says E while an audit record of
// epoch E+1 or later exists: the key was deleted or rewritten by hand.
// Nothing was written, since the write would overwrite the audit trail,
// and a retry cannot fix it: the operator must restore the epoch key.
type EpochResetError struct {
	// EpochKey is the epoch key's full etcd key.
	EpochKey string
	// Epoch is the epoch the key holds (0 when it is absent: Missing).
	Epoch int64
	// Missing is set when the epoch key does not exist.
	Missing bool
	// AuditKey is the newest key under the audit prefix.
	AuditKey string
	// Newest is AuditKey's epoch (0 when it is not an audit record).
	Newest int64
	// Malformed is the key's value when it holds no epoch (a non-negative
	// integer): rewritten by hand. nil otherwise.
	Malformed []byte
	// auditErr is why the audit prefix could not be read (AuditKey then
	// the key the guard met, if any).
	auditErr error
}

// Error says what happened and the etcdctl command that repairs it.
func (e *EpochResetError) Error() string {
	if e.Malformed != nil {
		bad := fmt.Sprintf("refused, nothing written: the epoch key %s holds %q, not an epoch (a non-negative integer): it was rewritten by hand. ", e.EpochKey, e.Malformed)
		switch {
		case e.Newest == 0 && e.auditErr != nil:
			return bad + fmt.Sprintf("The audit trail could not be read (%v), so the epoch to restore is not known: "+
				"regionctl history names the newest; restore the key to it (etcdctl put %s N), then re-run", e.auditErr, e.EpochKey)
		case e.Newest == 0 && e.AuditKey != "":
			return bad + fmt.Sprintf("The newest key under the audit prefix, %s, is not an audit record, so the epoch to restore is not known: "+
				"remove it (etcdctl del %s) and re-run for the fix", e.AuditKey, e.AuditKey)
		case e.Newest == 0:
			return bad + fmt.Sprintf("No audit record was found under the audit prefix, so no write of regionctl's came before: "+
				"restore the key, then re-run: etcdctl put %s 0", e.EpochKey)
		}
		return fmt.Sprintf("refused, nothing written: the epoch key %s holds %q, not an epoch (a non-negative integer): it was rewritten by hand. "+
			"The audit trail goes up to epoch %d (%s). A retry cannot fix this: restore the epoch key, then re-run: etcdctl put %s %d",
			e.EpochKey, e.Malformed, e.Newest, e.AuditKey, e.EpochKey, e.Newest)
	}
	holds := fmt.Sprintf("holds %d", e.Epoch)
	if e.Missing {
		holds = "is missing"
	}
	if e.Newest == 0 {
		return fmt.Sprintf("refused, nothing written: the epoch key %s %s, and %s, under the audit prefix, is not an audit record; "+
			"remove it (etcdctl del %s) and re-run", e.EpochKey, holds, e.AuditKey, e.AuditKey)
	}
	return fmt.Sprintf("refused, nothing written: the epoch key %s %s, but the audit trail goes up to epoch %d (%s): "+
		"the epoch key was deleted or rewritten by hand, and this write would overwrite the audit record of epoch %d. "+
		"A retry cannot fix this: restore the epoch key, then re-run: etcdctl put %s %d",
		e.EpochKey, holds, e.Newest, e.AuditKey, e.Epoch+1, e.EpochKey, e.Newest)
}

// OutcomeUnknownError means a commit got no answer and etcd did not
// answer the read-back either: the write may or may not be committed. The
// leases of its new boosts are left to end with their TTL.
type OutcomeUnknownError struct {
	// Epoch is the epoch the write would have committed.
	Epoch int64
	// Endpoints are the endpoints the client was given.
	Endpoints []string
	// Err is the commit's error, ReadErr the last read-back's.
	Err, ReadErr error
}

// Error tells the operator what to check before re-running.
func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("commit epoch %d: outcome unknown: etcd at %s did not answer the commit (%v) nor the read-back (%v); "+
		"the write may be committed: check `regionctl history %d` before re-running",
		e.Epoch, strings.Join(e.Endpoints, ","), e.Err, e.ReadErr, e.Epoch)
}

// Unwrap returns the commit's error.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// SnapshotErrorString says what an agent's snapshot_error means.
func SnapshotErrorString(err string) string {
	return "its snapshot files are not written, so the front doors reading them route by an older table: " + err
}

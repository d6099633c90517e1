package routing

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrNoRoute is returned by Resolve when no eligible pool exists for the
// viewer anywhere on the route chain.
var ErrNoRoute = errors.New("routing: no eligible pool")

// ErrNoTable is returned by Resolve called on a nil *Table: a mirror's
// Table before its first sync (watch.Mirror.WaitReady). Unlike ErrNoRoute
// it is no decision: a front door may answer from elsewhere (a snapshot
// file) or 503, never as if the viewer had no route.
var ErrNoTable = errors.New("routing: no table yet")

// FieldError is one problem with one field of one value, named by its key
// relative to <root>/routing/ ("routes/PL") and its field path
// ("targets[1].weight").
type FieldError struct {
	// Key is the value's key relative to <root>/routing/; empty for a
	// problem of no one key.
	Key string
	// Field is the field's path in the value; empty for the value (or
	// the key) as a whole.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error returns "routes/PL: targets[1].weight: must be 0..100, got 130".
func (e *FieldError) Error() string {
	switch {
	case e.Key == "" && e.Field == "":
		return e.Msg
	case e.Field == "":
		return e.Key + ": " + e.Msg
	case e.Key == "":
		return e.Field + ": " + e.Msg
	}
	return e.Key + ": " + e.Field + ": " + e.Msg
}

// Errors is a list of problems found together; validation never stops at the
// first one.
type Errors []*FieldError

// Error joins the problems, one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Err returns es as an error, or nil when it is empty.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Sort orders the problems by key, then field, then message.
func (es Errors) Sort() {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Key != es[j].Key {
			return es[i].Key < es[j].Key
		}
		if es[i].Field != es[j].Field {
			return es[i].Field < es[j].Field
		}
		return es[i].Msg < es[j].Msg
	})
}

// add appends a problem.
func (es *Errors) add(key, field, format string, args ...any) {
	*es = append(*es, &FieldError{Key: key, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// prefixed returns the problems with their key set to key.
func (es Errors) prefixed(key string) Errors {
	for _, e := range es {
		e.Key = key
	}
	return es
}

package api

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/regiond/regiond/routing"
)

// This file gives a table its ETag: the identity of what it serves, which
// its revision is not. The revision moves without the answers changing
// (a progress notification, an agent's status key elsewhere in etcd, a
// value put again as it was), and the answers change without the
// revision moving (a health grace window ending, a boost reaching its
// expires_at: the mirror rebuilds the table by the clock alone).

// etagEntry caches the ETag of one table, and whether its table JSON
// holds a character EscapeControls escapes.
type etagEntry struct {
	t   *routing.Table
	tag string
	// controls: the table JSON holds DEL or a C1 control (a key an origin
	// named with one, among the skipped), which /v1/table escapes; a
	// table without (every table, in practice) is served as rendered.
	controls bool
}

// etagCache holds the ETag of the last table asked about, so the ETag is
// computed once per table, not per request.
type etagCache struct{ last atomic.Pointer[etagEntry] }

// of returns the entry of t at now: that of t.At(now), the table whose
// answers are served at now (the same as t's but once a grace window or a
// boost has ended by the clock and the mirror has not yet rebuilt it).
func (c *etagCache) of(t *routing.Table, now time.Time) *etagEntry {
	t = t.At(now)
	if e := c.last.Load(); e != nil && e.t == t {
		return e
	}
	tag, controls := contentTag(t, now)
	e := &etagEntry{t: t, tag: tag, controls: controls}
	c.last.Store(e)
	return e
}

// contentTag is a weak ETag, W/"<16 hex digits>", digesting what t
// renders in the table JSON but for its header's revision, written_at and
// synced_at (the members routing.Table.SameContent leaves out): the pools,
// routes, policy, effective entries, skipped keys and live overrides, and
// the epoch, stale and cluster_id. Two tables for which SameContent holds
// have the same tag; a change of any answer of /v1/resolve (a Decision's
// pool, host, attrs, route, fallback_depth or degraded reasons; a
// NoRoute's reasons; an explain's steps) or of the table JSON's content
// changes it. It is weak: the table JSON's header differs at every render.
// It also reports whether the table JSON holds DEL or a C1 control
// (hasControls), read in the same pass.
func contentTag(t *routing.Table, now time.Time) (string, bool) {
	segs, _, err := t.JSONSegmentsWith(nil, nil, routing.JSONHeader{WrittenAt: now})
	d := xxhash.New()
	var hd [64]byte
	h := strconv.AppendInt(hd[:0], t.Epoch(), 10)
	h = strconv.AppendBool(append(h, ' '), t.Stale())
	h = strconv.AppendUint(append(h, ' '), t.ClusterID(), 10)
	d.Write(append(h, 0))
	controls := false
	if err != nil {
		// The table does not render (its /v1/table answer is a 500): the
		// tag still moves with what the effective entries answer.
		d.WriteString("checksum ")
		d.WriteString(strconv.FormatUint(t.Checksum(), 16))
	} else {
		for _, s := range segs[1:] { // segs[0] is the header
			d.Write(s)
		}
		// The header holds numbers and times only, but it is scanned
		// too; segments end at JSON tokens, never inside a character.
		controls = slices.ContainsFunc(segs, hasControls)
	}
	var b [24]byte
	out := append(b[:0], `W/"`...)
	sum := d.Sum64()
	for i := 60; i >= 0; i -= 4 {
		out = append(out, "0123456789abcdef"[sum>>uint(i)&0xf])
	}
	return string(append(out, '"')), controls
}

// matchesETag reports whether an If-None-Match header value (a list of
// entity tags, or *) matches tag by weak comparison (RFC 9110 13.1.2: the
// opaque tags equal, W/ ignored on either side).
func matchesETag(header, tag string) bool {
	header = strings.TrimSpace(header)
	if header == "*" {
		return true
	}
	opaque := strings.TrimPrefix(tag, "W/")
	for _, c := range strings.Split(header, ",") {
		if strings.TrimPrefix(strings.TrimSpace(c), "W/") == opaque {
			return true
		}
	}
	return false
}

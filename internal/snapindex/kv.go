package snapindex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/regiond/regiond/routing"
)

// KV export formats (regionctl export kv --format).
const (
	// KVFormatCloudflare is the array `wrangler kv bulk put` takes:
	// [{"key":"PL","value":"<value JSON as a string>"},…].
	KVFormatCloudflare = "cloudflare"
	// KVFormatMap is one JSON object: key → value object.
	KVFormatMap = "map"
)

// KVValue is one key of the KV export: a country code the table knows (an
// index slot of KindCountry) or routing.Unknown, and its value, the JSON
// object {"format":1,"revision","epoch","written_at","synced_at",
// "valid_until","stale","country","entry"} where entry is the country's
// index entry, byte for byte, and valid_until (absent when there is none)
// the first instant the table changes that entry by the clock alone. An
// edge worker normalizes the country header and reads that key; it reads
// routing.Unknown's only for a code no country is assigned (an assigned
// country's key missing is an error, 503: its class may not be the
// unknown country's; docs/snapshot-index.md).
type KVValue struct {
	// Key is the country code, or routing.Unknown.
	Key string
	// Value is the JSON object described above.
	Value []byte
}

// KVValues returns the KV export of t with health evaluated at h.WrittenAt
// (as Encode does): every country of routing.Countries() in order, then
// routing.Unknown. A value whose entry the table changes by the clock alone
// (a boost's expires_at, a health grace window's end) carries the first
// such instant as valid_until (see validUntil).
func KVValues(t *routing.Table, h routing.JSONHeader) ([]KVValue, error) {
	if t == nil {
		return nil, fmt.Errorf("snapindex: kv values: no table")
	}
	t = t.At(h.WrittenAt)
	cs := routing.Countries()
	entries := make([][]byte, len(cs)+1)
	for id := range entries {
		entries[id] = appendEntry(nil, entryOf(t, id))
	}
	until := validUntil(t, entries)
	out := make([]KVValue, 0, len(entries))
	for id, e := range entries {
		key := routing.Unknown
		if id < len(cs) {
			key = cs[id]
		}
		b := appendKVHeader(nil, t, h, until[id])
		b = append(b, `,"country":`...)
		b = strconv.AppendQuote(b, key) // codes and _unknown are plain ASCII
		b = append(b, `,"entry":`...)
		b = append(b, e...)
		out = append(out, KVValue{Key: key, Value: append(b, '}')})
	}
	return out, nil
}

// maxClockSteps bounds the changes by the clock validUntil follows.
const maxClockSteps = 64

// validUntil returns, for each slot id, the first instant t changes its
// entry (entries[id], t's) by the clock alone, or zero: it follows t's
// changes by the clock (ValidUntil, At) and compares each slot's entry.
// Past maxClockSteps, the slots not changed yet get the next change's
// instant (it may change them).
func validUntil(t *routing.Table, entries [][]byte) []time.Time {
	until := make([]time.Time, len(entries))
	left := len(entries)
	var buf []byte
	for step := 0; left > 0; step++ {
		at := t.ValidUntil()
		if at.IsZero() {
			break
		}
		if step == maxClockSteps {
			for id := range until {
				if until[id].IsZero() {
					until[id] = at
				}
			}
			break
		}
		t = t.At(at)
		for id, e := range entries {
			if !until[id].IsZero() {
				continue
			}
			if buf = appendEntry(buf[:0], entryOf(t, id)); !bytes.Equal(buf, e) {
				until[id], left = at, left-1
			}
		}
	}
	return until
}

// appendKVHeader appends the members of a value before country (without
// the closing brace): the index header's, without slots, and valid_until
// when not zero.
func appendKVHeader(b []byte, t *routing.Table, h routing.JSONHeader, validUntil time.Time) []byte {
	b = append(b, `{"format":`...)
	b = strconv.AppendInt(b, Version, 10)
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, t.Revision(), 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, t.Epoch(), 10)
	b = append(b, `,"written_at":"`...)
	b = h.WrittenAt.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if !h.SyncedAt.IsZero() {
		b = append(b, `,"synced_at":"`...)
		b = h.SyncedAt.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if !validUntil.IsZero() {
		// The value changes by the clock alone then: a worker marks its
		// decisions stale-table from then on, as nothing rewrites it.
		b = append(b, `,"valid_until":"`...)
		b = validUntil.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, `,"stale":`...)
	return strconv.AppendBool(b, t.Stale())
}

// AppendKV appends the export vs in format (KVFormatCloudflare or
// KVFormatMap) to b, with a final newline.
func AppendKV(b []byte, vs []KVValue, format string) ([]byte, error) {
	switch format {
	case KVFormatCloudflare:
		b = append(b, '[')
		for i, v := range vs {
			if i > 0 {
				b = append(b, ",\n"...)
			}
			b = append(b, `{"key":`...)
			b = strconv.AppendQuote(b, v.Key)
			b = append(b, `,"value":`...)
			s, err := json.Marshal(string(v.Value))
			if err != nil {
				return b, fmt.Errorf("snapindex: kv value %s: %w", v.Key, err)
			}
			b = append(b, s...)
			b = append(b, '}')
		}
		return append(b, "]\n"...), nil
	case KVFormatMap:
		b = append(b, '{')
		for i, v := range vs {
			if i > 0 {
				b = append(b, ",\n"...)
			}
			b = strconv.AppendQuote(b, v.Key)
			b = append(b, ':')
			b = append(b, v.Value...)
		}
		return append(b, "}\n"...), nil
	}
	return b, fmt.Errorf("snapindex: kv format %q: want %s or %s", format, KVFormatCloudflare, KVFormatMap)
}

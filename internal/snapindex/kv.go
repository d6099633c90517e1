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
// the table's ValidUntil. An edge worker normalizes the country header, reads that key, and
// reads routing.Unknown when the key is missing.
type KVValue struct {
	Key   string
	Value []byte
}

// KVValues returns the KV export of t with health evaluated at h.WrittenAt
// (as Encode does): every country of routing.Countries() in order, then
// routing.Unknown.
func KVValues(t *routing.Table, h routing.JSONHeader) ([]KVValue, error) {
	if t == nil {
		return nil, fmt.Errorf("snapindex: kv values: no table")
	}
	t = t.At(h.WrittenAt)
	head := appendKVHeader(nil, t, h)
	cs := routing.Countries()
	out := make([]KVValue, 0, len(cs)+1)
	for id := range len(cs) + 1 {
		key := routing.Unknown
		if id < len(cs) {
			key = cs[id]
		}
		b := append(bytes.Clone(head), `,"country":`...)
		b = strconv.AppendQuote(b, key) // codes and _unknown are plain ASCII
		b = append(b, `,"entry":`...)
		b = appendEntry(b, entryOf(t, id))
		out = append(out, KVValue{Key: key, Value: append(b, '}')})
	}
	return out, nil
}

// appendKVHeader appends the members of a value before country (without
// the closing brace): the index header's, without slots.
func appendKVHeader(b []byte, t *routing.Table, h routing.JSONHeader) []byte {
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
	if until := t.ValidUntil(); !until.IsZero() {
		// The export changes by the clock alone then (a boost's expires_at,
		// a health grace window's end): a worker marks its decisions
		// stale-table from then on, as nothing rewrites its values.
		b = append(b, `,"valid_until":"`...)
		b = until.UTC().AppendFormat(b, time.RFC3339Nano)
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

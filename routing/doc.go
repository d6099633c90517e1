// Package routing is regiond's policy model: the keys and values under
// <root>/routing/ (docs/keys-and-values.md), the whole-config checks
// regionctl enforces, the compiled table an agent serves, and the
// resolution of a viewer's country to a pool (docs/resolution.md).
//
// The way through it:
//
//   - Keys and values: ParseKey names a key's kind and parts (a key
//     outside the grammar is skipped, never guessed at); DecodeValue
//     decodes and checks one value (Pool, Route, Residency, Override,
//     health), refusing what is not UTF-8 JSON within the size and depth
//     limits; EncodeValue writes one as regionctl stores it.
//   - Whole configs: ParseConfig reads a config file (YAML 1.2 or JSON);
//     Validate and ValidateOverride enforce the invariants, each problem
//     a FieldError naming its key and field; Warnings names what is valid
//     but likely not what its author meant.
//   - Tables: Compile builds a Table from every key/value at one revision
//     (a refused value keeps the key's last good value and is listed in
//     Skipped); Update applies a watch's events to the previous table.
//     Table.Resolve answers one viewer (residency holds there whatever
//     is stored: a viewer of a class is only ever sent to a pool allowed
//     for it, else ErrNoRoute), Table.Explain shows its working,
//     Table.JSON renders the table JSON that the API and the snapshot
//     files carry, and LoadTableJSON reads one back (an agent's start
//     from its snapshot).
//
// Fast paths stand beside simple references they are tested against:
// the decoder (jsondec.go) against encoding/json (decoder_diff_test.go,
// FuzzDecoderMatchesReference), the effective entries' encoder
// (effjson.go) against encoding/json, Update and the memo engine
// (memo.go) against a Compile of the whole state (TestUpdateEqualsCompile).
// A Table is immutable once built and safe for concurrent use.
package routing

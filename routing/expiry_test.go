package routing

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// expiringStore is smallStore with two boosts that carry expires_at: PL
// to ams alone until t0+10s, and _default's attrs until t0+20s.
var expiringStore = smallStore.
	with("overrides/pl-ams", `{"route":"PL","targets":[{"pool":"ams","weight":100}],"attrs":{"banner":"boost"},"expires_at":"2026-03-01T12:00:10Z"}`).
	with("overrides/def-attrs", `{"route":"_default","attrs":{"lang":"en-GB"},"expires_at":"2026-03-01T12:00:20Z"}`)

// sameJSON fails unless a and b render the same table JSON at at.
func sameJSON(t *testing.T, what string, a, b *Table, at time.Time) {
	t.Helper()
	ja, err := a.JSON(at)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := b.JSON(at)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ja, jb) {
		t.Errorf("%s: the table JSON differs from a fresh Compile's:\n%s\n%s", what, ja, jb)
	}
}

// TestOverrideExpiresByTheClock: a table applies an override until its
// expires_at, whatever etcd's lease says, and is built again without it
// then: At, Update and Resolve at or after expires_at all give the table a
// fresh Compile at that time gives (the reference), with no etcd event.
func TestOverrideExpiresByTheClock(t *testing.T) {
	kvs := expiringStore.kvs(nil)
	tbl := Compile(20, kvs, nil, CompileOptions{Now: t0})
	if r, _ := tbl.Route("PL"); !reflect.DeepEqual(r.Targets, tg("ams", 100)) || len(tbl.Overrides()) != 2 {
		t.Fatalf("before expiry: PL %+v, overrides %v", r, tbl.Overrides())
	}
	if got := tbl.ValidUntil(); !got.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("ValidUntil %v, want the first expires_at %v", got, t0.Add(10*time.Second))
	}
	if tbl.At(t0.Add(9*time.Second)) != tbl {
		t.Errorf("At before the first expires_at must return the table itself")
	}
	if d, _ := tbl.Resolve("PL", "v", t0.Add(9*time.Second)); d.Pool != "ams" || d.Attrs["banner"] != "boost" {
		t.Errorf("PL before expiry resolves to %+v", d)
	}

	at10 := t0.Add(10 * time.Second)
	after := tbl.At(at10)
	if r, _ := after.Route("PL"); !reflect.DeepEqual(r.Targets, tg("fra", 70, "ams", 30)) || r.Attrs["banner"] != "" {
		t.Errorf("PL at its boost's expires_at: %+v, want the stored route", r)
	}
	if _, ok := after.Overrides()["pl-ams"]; ok || len(after.Overrides()) != 1 {
		t.Errorf("overrides at t0+10s: %v, want def-attrs alone", after.Overrides())
	}
	if got := after.ValidUntil(); !got.Equal(t0.Add(20 * time.Second)) {
		t.Errorf("ValidUntil after the first expiry %v, want the next %v", got, t0.Add(20*time.Second))
	}
	sameJSON(t, "At(expires_at)", after, Compile(20, kvs, nil, CompileOptions{Now: at10}), at10)
	// Resolve on the table built before the expiry answers without it.
	for i := range 20 {
		if d, err := tbl.Resolve("PL", string(rune('a'+i)), at10); err != nil || d.Attrs["banner"] != "" {
			t.Fatalf("PL resolved after expiry on the table built before: %+v, %v", d, err)
		}
	}
	// Explain's steps agree with its decision: no expired boost listed.
	if ex := tbl.Explain("PL", "v", at10); len(ex.Routes) == 0 || len(ex.Routes[0].Overrides) != 0 {
		t.Errorf("Explain after expiry on the table built before lists %+v", ex.Routes)
	}
	// So does the what-if of a table built before the expiry.
	if wd := tbl.WithDown([]string{"iad"}, at10); len(wd.Overrides()) != 1 {
		t.Errorf("WithDown after expiry keeps overrides %v", wd.Overrides())
	}
	// The snapshot's JSON, rendered after the expiry, is without it.
	if j, _ := tbl.JSON(at10); bytes.Contains(j, []byte("pl-ams")) {
		t.Errorf("the table JSON at expires_at still lists pl-ams")
	}

	// Update at a time past an expiry, for an event about something else.
	at25 := t0.Add(25 * time.Second)
	ev := Event{KV: KV{Key: "pools/iad", Value: []byte(`{"host":"edge-iad-2.example.net","residency":"us"}`), ModRevision: 21}}
	up := Update(tbl, 21, []Event{ev}, CompileOptions{Now: at25})
	if len(up.Overrides()) != 0 || !up.ValidUntil().IsZero() {
		t.Errorf("Update past both expiries: overrides %v, valid until %v", up.Overrides(), up.ValidUntil())
	}
	ref := Compile(21, expiringStore.with("pools/iad", string(ev.Value)).kvs(map[string]int64{"pools/iad": 21}), nil, CompileOptions{Now: at25})
	sameJSON(t, "Update past expires_at", up, ref, at25)

	// The wall clock steps back (NTP) to before an expiry: the next update
	// applies the override again, as a fresh Compile at that time does.
	at15, at5 := t0.Add(15*time.Second), t0.Add(5*time.Second)
	back := Update(Compile(20, kvs, nil, CompileOptions{Now: at15}), 21, []Event{ev}, CompileOptions{Now: at5})
	ref = Compile(21, expiringStore.with("pools/iad", string(ev.Value)).kvs(map[string]int64{"pools/iad": 21}), nil, CompileOptions{Now: at5})
	sameJSON(t, "Update after the clock stepped back", back, ref, at5)

	// A store put after its expiry is never applied, and a table without
	// an expiring override is never rebuilt for one.
	late := Compile(22, kvs, nil, CompileOptions{Now: at25})
	if len(late.Overrides()) != 0 || !late.ValidUntil().IsZero() {
		t.Errorf("compiled after both expiries: overrides %v, valid until %v", late.Overrides(), late.ValidUntil())
	}
	plain := Compile(22, smallStore.with("overrides/x", `{"route":"PL","attrs":{"a":"b"}}`).kvs(nil), nil, CompileOptions{Now: t0})
	if !plain.ValidUntil().IsZero() || plain.At(t0.Add(1000*time.Hour)) != plain {
		t.Errorf("an override without expires_at gave the table an end: %v", plain.ValidUntil())
	}
}

// TestOverrideLiveAgainWhenTheClockStepsBack: a table built while the
// wall clock was ahead (a bad NTP server, a resumed VM) left a boost out
// as expired; the clock stepped back before its expires_at, the boost is
// live again with no etcd event: At (the agent's clock loop) and Resolve
// give what a fresh Compile at that time gives, on their own table too
// (the clock review: a quiet fleet kept it off until some other change).
func TestOverrideLiveAgainWhenTheClockStepsBack(t *testing.T) {
	kvs := expiringStore.kvs(nil)
	ahead, back := t0.Add(2*time.Hour), t0.Add(5*time.Second)
	dropped := Compile(20, kvs, nil, CompileOptions{Now: ahead})
	if len(dropped.Overrides()) != 0 || !dropped.ValidUntil().IsZero() {
		t.Fatalf("compiled past both expiries: overrides %v, valid until %v", dropped.Overrides(), dropped.ValidUntil())
	}
	if dropped.At(ahead.Add(time.Minute)) != dropped {
		t.Errorf("At with the clock still past both expiries must return the table itself")
	}
	if d, _ := dropped.Resolve("PL", "v", back); d.Pool != "ams" || d.Attrs["banner"] != "boost" {
		t.Errorf("PL resolved on the dropped table after the clock stepped back: %+v, want the boost's ams", d)
	}
	again := dropped.At(back)
	if again == dropped || len(again.Overrides()) != 2 || !again.ValidUntil().Equal(t0.Add(10*time.Second)) {
		t.Fatalf("At after the clock stepped back: overrides %v, valid until %v", again.Overrides(), again.ValidUntil())
	}
	sameJSON(t, "At after the clock stepped back", again, Compile(20, kvs, nil, CompileOptions{Now: back}), back)
	if again.At(back.Add(time.Second)) != again {
		t.Errorf("At once more at the stepped-back clock must return the table itself")
	}
	// Back to between the two expiries: only _default's attrs are live.
	mid := t0.Add(15 * time.Second)
	sameJSON(t, "At after the clock stepped back between the expiries", dropped.At(mid), Compile(20, kvs, nil, CompileOptions{Now: mid}), mid)
	// An update keeps what was left out: the step is still seen after it.
	ev := Event{KV: KV{Key: "pools/iad", Value: []byte(`{"host":"edge-iad-2.example.net","residency":"us"}`), ModRevision: 21}}
	up := Update(dropped, 21, []Event{ev}, CompileOptions{Now: ahead.Add(time.Second)})
	ref := Compile(21, expiringStore.with("pools/iad", string(ev.Value)).kvs(map[string]int64{"pools/iad": 21}), nil, CompileOptions{Now: back})
	sameJSON(t, "At after an update, the clock stepped back", up.At(back), ref, back)
}

// TestOverrideExpiresAtRefused: an expires_at that is not an RFC 3339
// time is refused, named, and the last good value kept.
func TestOverrideExpiresAtRefused(t *testing.T) {
	good := Compile(20, expiringStore.kvs(nil), nil, CompileOptions{Now: t0})
	bad := Compile(21, expiringStore.with("overrides/pl-ams", `{"route":"PL","targets":[{"pool":"ams","weight":100}],"expires_at":"tomorrow"}`).kvs(nil), good, CompileOptions{Now: t0})
	sk := bad.Skipped()
	if len(sk) != 1 || sk[0].Key != "overrides/pl-ams" || !strings.Contains(sk[0].Error, `expires_at: not an RFC 3339 time: "tomorrow"`) {
		t.Fatalf("skipped %v", sk)
	}
	if r, _ := bad.Route("PL"); !reflect.DeepEqual(r.Targets, tg("ams", 100)) || !bad.ValidUntil().Equal(t0.Add(10*time.Second)) {
		t.Errorf("the last good boost is not kept: PL %+v, valid until %v", r, bad.ValidUntil())
	}
}

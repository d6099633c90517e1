package routing

import (
	"reflect"
	"testing"
	"unsafe"
)

// memoOnly names the fields of Effective and Candidate that record how an
// entry was computed and encoded, not what it answers: equalEffective
// ignores them. Every other field is part of the answer.
var memoOnly = map[string]bool{
	"Effective.js": true, "Effective.routeDeps": true, "Effective.poolDeps": true,
	"Effective.mask": true, "Candidate.pad": true,
}

// TestEqualEffectiveSeesEveryField: changing any answer field of an entry,
// or of its candidate, makes equalEffective report the entries differ, so
// a field added to Effective or Candidate without equalEffective fails
// here instead of a changed entry being reused after Update.
func TestEqualEffectiveSeesEveryField(t *testing.T) {
	base := func() *Effective {
		return &Effective{Route: "PL", FallbackDepth: 1, Affinity: AffinitySticky, Attrs: map[string]string{"a": "1"},
			Degraded:   []string{"pool-down:x"},
			Candidates: []Candidate{{Pool: "fra", Host: "h", Weight: 10, attrs: map[string]string{"a": "1"}}}}
	}
	if !equalEffective(base(), base()) {
		t.Fatal("equal entries reported different")
	}
	for _, typ := range []reflect.Type{reflect.TypeOf(Effective{}), reflect.TypeOf(Candidate{})} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if memoOnly[typ.Name()+"."+f.Name] {
				continue
			}
			e := base()
			v := reflect.ValueOf(e).Elem()
			if typ.Name() == "Candidate" {
				v = v.FieldByName("Candidates").Index(0)
			}
			fv := v.Field(i)
			fv = reflect.NewAt(fv.Type(), unsafe.Pointer(fv.UnsafeAddr())).Elem()
			if !perturb(fv) {
				t.Fatalf("%s.%s: the test cannot change a %s; teach perturb", typ.Name(), f.Name, f.Type)
			}
			if equalEffective(base(), e) {
				t.Errorf("%s.%s changed, equalEffective still reports the entries equal", typ.Name(), f.Name)
			}
		}
	}
}

// perturb changes v and reports whether it could.
func perturb(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int:
		v.SetInt(v.Int() + 1)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for _, k := range v.MapKeys() {
			m.SetMapIndex(k, v.MapIndex(k))
		}
		m.SetMapIndex(reflect.ValueOf("new"), reflect.ValueOf("v"))
		v.Set(m)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
	default:
		return false
	}
	return true
}

// TestChecksumSeesEntries: Checksum, computed from the entries when
// called, differs between tables that answer differently and agrees with
// a rebuild from scratch; VerifyChecksum fails once an entry is changed
// after it was built (its JSON, made then, no longer matches it).
func TestChecksumSeesEntries(t *testing.T) {
	a := Compile(10, smallStore.kvs(nil), nil, CompileOptions{Now: t0})
	b := Compile(11, smallStore.with("pools/ams", `{"host":"edge-ams-1.example.net","residency":"eu","status":"draining"}`).kvs(nil), a, CompileOptions{Now: t0})
	if again := Compile(12, smallStore.kvs(nil), nil, CompileOptions{Now: t0}); again.Checksum() != a.Checksum() {
		t.Errorf("the same store compiled twice: checksums %x and %x", a.Checksum(), again.Checksum())
	}
	if a.Checksum() == b.Checksum() {
		t.Errorf("ams draining: checksum %x unchanged", a.Checksum())
	}
	if !a.VerifyChecksum() || !b.VerifyChecksum() {
		t.Fatal("VerifyChecksum fails on tables as built")
	}
	sum := b.Checksum()
	b.Effective("PL").Route = "changed after build"
	if b.VerifyChecksum() {
		t.Error("an entry changed after it was built: VerifyChecksum still true")
	}
	if b.Checksum() == sum {
		t.Error("an entry changed after it was built: Checksum unchanged")
	}
}

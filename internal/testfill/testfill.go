// Package testfill fills values by reflection for tests that must see
// every field of a type (a hand-written encoder checked against
// encoding/json): a field added to the type is filled, never skipped.
package testfill

import (
	"reflect"
	"strconv"
	"testing"
)

// NonZero sets v, and every exported field of a struct in it (but those
// skip reports, when skip is not nil), to a non-zero value made from path:
// strings name their path, numbers are non-zero and differ by path, bools
// are true, slices and maps hold two filled elements. A kind it does not
// know fails the test, so that a field of a new kind is filled rather
// than skipped.
func NonZero(t testing.TB, v reflect.Value, path string, skip func(reflect.StructField) bool) {
	t.Helper()
	n := 1 // a number of its own for each path
	for i := 0; i < len(path); i++ {
		n = (n*31 + int(path[i])) % 1000
	}
	n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("v-" + path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(n) + 0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		NonZero(t, v.Elem(), path, skip)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && (skip == nil || !skip(f)) {
				NonZero(t, v.Field(i), path+"."+f.Name, skip)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			NonZero(t, s.Index(i), path+"["+strconv.Itoa(i)+"]", skip)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for _, k := range []string{"b", "a"} {
			key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			NonZero(t, key, path+"."+k, skip)
			NonZero(t, val, path+"["+k+"]", skip)
			m.SetMapIndex(key, val)
		}
		v.Set(m)
	default:
		t.Fatalf("%s: testfill.NonZero cannot fill a %s; teach it", path, v.Type())
	}
}

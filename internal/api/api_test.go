package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestIsLoopbackHost: the Host names a browser sends for the loopback
// interface pass; names an attacker's DNS resolves (the way of a DNS
// rebinding attack) and non-loopback addresses do not.
func TestIsLoopbackHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"LOCALHOST", true},
		{"LocalHost:7420", true},
		{"localhost.", true},
		{"localhost.:7420", true},
		{"127.0.0.1", true},
		{"127.0.0.1:7420", true},
		{"127.8.9.10:80", true},
		{"[::1]", true},
		{"[::1]:80", true},
		{"::1", true}, // a listen address's host after net.SplitHostPort
		{"", false},
		{"localhost.evil", false},
		{"localhost.evil:7420", false},
		{"localhost.attacker.example", false},
		{"localhostevil", false},
		{"evil.localhost.example", false},
		{"localhost..", false},
		{"127.0.0.1.nip.io", false},
		{"127.0.0.1.nip.io:7420", false},
		{"0x7f000001", false},
		{"0.0.0.0", false},
		{"10.0.0.1:7420", false},
		{"[::]:80", false},
		{"[::1", false},
		{"::1]", false},
		{"[localhost]", false},
		{"[localhost]:80", false},
		{"[127.0.0.1]:80", false},
		{"::1:80", false}, // an IPv6 address that is not ::1, not ::1 port 80
		{"example.com", false},
	} {
		if got := IsLoopbackHost(tc.host); got != tc.want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

// TestWriteJSONWritesCharactersAsTheyAre: an answer quoting what the
// client sent shows it as sent (no \u003c or \u0026 for a reader of curl's
// output to decode), on one line, and still decodes to the same value.
func TestWriteJSONWritesCharactersAsTheyAre(t *testing.T) {
	rec := httptest.NewRecorder()
	msg := "explain=<b>&x: want 1 or true"
	writeError(rec, http.StatusBadRequest, CodeBadParam, msg)
	body := rec.Body.String()
	if want := `{"error":"explain=<b>&x: want 1 or true","code":"bad_param"}` + "\n"; body != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d, Content-Type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var back errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &back); err != nil || back.Error != msg {
		t.Fatalf("decoded %+v, %v; want %q", back, err, msg)
	}
}

// TestHasControlsFindsWhatEscapeControlsEscapes: the byte scan that
// decides whether a JSON document is escaped (hasControls) finds DEL and
// each C1 control, wherever it stands, and nothing else: not the Latin-1
// characters sharing their lead byte 0xc2 (U+00A0 to U+00BF), nor a lone
// 0xc2. A document without them comes back from EscapeControls as itself,
// not a copy.
func TestHasControlsFindsWhatEscapeControlsEscapes(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{`{"k":"plain"}`, false},
		{`{"k":"caf\u00e9 \u00a9 \u00a0 \u00bf"}`, false},
		{"{\"k\":\"\u0080\"}", true},
		{"{\"k\":\"\u009b31m\"}", true},
		{"{\"k\":\"\u00a0\u009f\"}", true},
		{"\u009f", true},
		{"x\x7f", true},
		{"x\xc2", false},
		{"x\xc2\xc2\x9b", true},
		{"\xc3\x9b", false}, // U+00DB, its second byte a C1's
	} {
		if got := hasControls([]byte(tc.s)); got != tc.want {
			t.Errorf("hasControls(%q) = %v, want %v", tc.s, got, tc.want)
		}
		in := []byte(tc.s)
		if out := EscapeControls(in); !tc.want && &out[0] != &in[0] {
			t.Errorf("EscapeControls(%q) copied a document with nothing to escape", tc.s)
		} else if tc.want && hasControls(out) {
			t.Errorf("EscapeControls(%q) = %q, still holding a control", tc.s, out)
		}
	}
}

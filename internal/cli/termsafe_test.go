package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestTermSafe: control characters come out escaped, text and UTF-8 as
// they are; JSON stays valid and decodes to the same string; the count
// written is the input's.
func TestTermSafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain é 視聴者\tcol\n", "plain é 視聴者\tcol\n"},
		{"a\x1b[31mb\r\x07", `a\x1b[31mb\x0d\x07`},
		{"del\x7f c1\u0085 osc\u009d", `del\u007f c1\u0085 osc\u009d`},
		{"lone \x9b byte, valid \xc3\xa9", `lone \x9b byte, valid é`},
		{"shard=eu-3\u202e\u200b", `shard=eu-3\u202e\u200b`}, // format characters: a right-to-left override, a zero-width space
	} {
		var b bytes.Buffer
		n, err := termSafe{&b}.Write([]byte(tc.in))
		if err != nil || n != len(tc.in) || b.String() != tc.want {
			t.Errorf("termSafe(%q) = %q, %d, %v; want %q, %d", tc.in, b.String(), n, err, tc.want, len(tc.in))
		}
	}
	in, _ := json.Marshal(map[string]string{"v": "x\x7f\u0085y"})
	var b bytes.Buffer
	if _, err := (termSafe{&b}).Write(in); err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if err := json.Unmarshal(b.Bytes(), &out); err != nil || out["v"] != "x\x7f\u0085y" {
		t.Errorf("JSON through termSafe: %s → %q, %v; want the same value", b.Bytes(), out["v"], err)
	}
}

// TestYAMLOutputEscapesControls: a value from etcd holding a control
// character (a health key's addr an origin wrote) is written escaped in
// -o yaml, as in the table output: the YAML encoder refused it, and the
// whole output failed.
func TestYAMLOutputEscapesControls(t *testing.T) {
	var b bytes.Buffer
	err := printer{format: "yaml", w: termSafe{&b}}.print(map[string]any{"addr": "\x1b]52;c;ZXZpbA==\x07", "count": 3, "k\x1b": []string{"ok", "\u202e"}}, nil)
	if err != nil {
		t.Fatalf("yaml of a value with control characters: %v", err)
	}
	for _, want := range []string{`addr: \x1b]52;c;ZXZpbA==\x07`, "count: 3", `k\x1b:`, `- \u202e`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("yaml output lacks %q:\n%s", want, b.String())
		}
	}
	if firstControl(b.Bytes()) >= 0 {
		t.Errorf("a control character reached the output:\n%q", b.String())
	}
}

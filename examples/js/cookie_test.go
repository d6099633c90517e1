package js_test

import (
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/regiond/regiond/internal/testprog"
)

// TestWorkerCookieMatchesPHP: the worker's sticky key is the viewer
// cookie's bytes as PHP's $_COOKIE gives them, so a viewer keeps one pool
// whichever front door sees it. PHP decodes cookie values with its raw URL
// decoding (rawurldecode: '+' kept, a malformed escape kept, %FF a byte; a
// php-cgi run with HTTP_COOKIE='viewer=a+b%2Bc%41%zz%FF' gives
// "a+b+cA%zz\xFF"). The worker used decodeURIComponent, which throws on
// %FF and %zz (the raw text was hashed then) and so sent such viewers to
// other pools than PHP did. The key is the same whether the runtime gives
// the header as Latin-1 (the Fetch standard, Node) or decoded as UTF-8
// (Cloudflare's workerd), for cookies that are UTF-8 text.
func TestWorkerCookieMatchesPHP(t *testing.T) {
	node(t)
	php, err := exec.LookPath("php")
	if err != nil {
		testprog.Missing(t, "php not found in PATH (the reference decoding)", "apt-get install php-cli")
	}
	cookies := []string{"", "abc", "a+b%2Bc%41%zz%FF", "id%FF2", "id%E9", "%", "%4", "%41", "%4g", "%%41", "caf%C3%A9", "café",
		"50%25off", "%7e%7E", "trailing%", "a%20b+c"}
	r := rand.New(rand.NewPCG(2026, 12))
	const alphabet = "%+aZ09fF-_.~ %é"
	for range 200 {
		var b strings.Builder
		for range 1 + r.IntN(12) {
			b.WriteString(string([]rune(alphabet)[r.IntN(len([]rune(alphabet)))]))
		}
		cookies = append(cookies, b.String())
	}
	in := make([]string, len(cookies))
	for i, c := range cookies {
		in[i] = hex.EncodeToString([]byte(c))
	}
	var both [][2]string // given as Latin-1, given UTF-8 decoded (workerd)
	if err := json.Unmarshal(runNode(t, in, "cookie"), &both); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, b := range both {
		got = append(got, b[0])
		if b[1] != b[0] { // the cookies here are UTF-8 text: no byte lost to decoding
			t.Errorf("cookie %q: key %s given as Latin-1, %s given UTF-8 decoded", cookies[i], b[0], b[1])
		}
	}
	stdin, _ := json.Marshal(in)
	cmd := exec.Command(php, "-r", `$o = []; foreach (json_decode(stream_get_contents(STDIN)) as $h) { $o[] = bin2hex(rawurldecode(hex2bin($h))); } echo json_encode($o);`)
	cmd.Stdin = strings.NewReader(string(stdin))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("php: %v: %s", err, out)
	}
	var want []string
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		for i := range cookies {
			if i < len(got) && i < len(want) && got[i] != want[i] {
				t.Errorf("cookie %q: worker key %s, PHP's %s", cookies[i], got[i], want[i])
			}
		}
		t.Fatalf("%d keys from the worker, %d from PHP", len(got), len(want))
	}
}

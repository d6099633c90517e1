package cli

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// termSafe writes what regionctl prints with the control characters of
// the text escaped: values from etcd (a reason, an attr, a stored value, an
// agent's version or node name) reach the operator's terminal, where an
// escape sequence could rewrite the screen or, with OSC 52, the clipboard.
// regionctl itself writes none but newline and tab. ASCII controls become
// \x1b (raw ones never appear in JSON or YAML output: both escape them),
// DEL and the C1 controls \u007f and \u0085, which JSON reads as the same
// characters (encoding/json writes them raw). So are Unicode's format
// characters (category Cf: right-to-left overrides U+202E, zero-width
// spaces U+200B, …), which make what a terminal shows differ from what is
// stored.
type termSafe struct{ w io.Writer }

// Write writes p escaped; it reports len(p) on success.
func (t termSafe) Write(p []byte) (int, error) {
	i := firstControl(p)
	if i < 0 {
		return t.w.Write(p)
	}
	written := len(p)
	out := make([]byte, 0, len(p)+16)
	for len(p) > 0 {
		if i < 0 {
			out = append(out, p...)
			break
		}
		out = append(out, p[:i]...)
		r, n := utf8.DecodeRune(p[i:])
		switch {
		case r < 0x20:
			out = fmt.Appendf(out, `\x%02x`, r)
		case r == utf8.RuneError && n == 1: // a lone byte of the C1 range
			out = fmt.Appendf(out, `\x%02x`, p[i])
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		p = p[i+n:]
		i = firstControl(p)
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return written, nil
}

// firstControl returns the index of the first control character in p
// other than newline and tab (ASCII, DEL, C1 in UTF-8, or a byte of the C1
// range that is no UTF-8: a terminal reading Latin-1 takes it for one),
// or -1.
func firstControl(p []byte) int {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c < 0x20 && c != '\n' && c != '\t', c == 0x7f:
			return i
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			return i
		case c >= 0x80:
			r, n := utf8.DecodeRune(p[i:])
			if r == utf8.RuneError && n == 1 && c <= 0x9f || unicode.Is(unicode.Cf, r) {
				return i
			}
			i += n - 1
		}
	}
	return -1
}

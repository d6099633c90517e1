package routing

// validJSON reports whether b is one valid JSON value with optional
// whitespace around it: exactly what encoding/json's Valid reports
// (FuzzValidJSONMatchesEncodingJSON), including its acceptance of bytes
// that are not UTF-8 inside strings and its limit of 10,000 nested
// objects and lists. It is a plain recursive descent, several times
// faster than Valid's state machine, which took a third of the decoding of
// a value (every value read from etcd is checked before it is split).
// Bytes that are not UTF-8 are refused before it runs (decodeKind).
func validJSON(b []byte) bool {
	ok, _ := validJSONDepth(b)
	return ok
}

// validJSONDepth is validJSON, also returning the deepest nesting of
// objects and lists met (0 for a scalar).
func validJSONDepth(b []byte) (bool, int) {
	ok, depth, _ := validJSONCheck(b)
	return ok, depth
}

// validJSONCheck is validJSONDepth, also returning the offset in b of the
// first \u escape of a UTF-16 surrogate without its other half
// ("\ud800" alone, or "\udc00" first), or -1 when there is none. JSON's
// grammar, and encoding/json, accept such an escape (decoding it as
// U+FFFD), but it encodes no character, and readers such as PHP's
// json_decode refuse a whole document holding one. It is looked for only
// at escapes: a value without any is checked as fast as before.
func validJSONCheck(b []byte) (ok bool, depth, lone int) {
	v := jsonValidator{b: b, lone: -1}
	i, ok := v.value(v.ws(0), 0)
	return ok && v.ws(i) == len(b), v.deepest, v.lone
}

// maxJSONDepth is encoding/json's limit on nesting.
const maxJSONDepth = 10000

// jsonValidator checks the JSON in b.
type jsonValidator struct {
	b       []byte
	deepest int // the deepest nesting met
	lone    int // the offset of the first escape of a lone surrogate, or -1
}

// ws returns the index of the first byte at or after i that is not
// whitespace.
func (v *jsonValidator) ws(i int) int {
	for i < len(v.b) {
		switch v.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value checks the value starting at i (no whitespace before it) at
// nesting depth, and returns where it ends.
func (v *jsonValidator) value(i, depth int) (int, bool) {
	if i >= len(v.b) {
		return i, false
	}
	switch c := v.b[i]; {
	case c == '{':
		return v.object(i, depth+1)
	case c == '[':
		return v.array(i, depth+1)
	case c == '"':
		return v.str(i)
	case c == '-' || c >= '0' && c <= '9':
		return v.number(i)
	case c == 't':
		return v.literal(i, "true")
	case c == 'f':
		return v.literal(i, "false")
	case c == 'n':
		return v.literal(i, "null")
	}
	return i, false
}

func (v *jsonValidator) literal(i int, lit string) (int, bool) {
	if len(v.b)-i < len(lit) || string(v.b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

func (v *jsonValidator) object(i, depth int) (int, bool) {
	if depth > maxJSONDepth {
		return i, false
	}
	v.deepest = max(v.deepest, depth)
	i = v.ws(i + 1)
	if i < len(v.b) && v.b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(v.b) || v.b[i] != '"' {
			return i, false
		}
		var ok bool
		if i, ok = v.str(i); !ok {
			return i, false
		}
		if i = v.ws(i); i >= len(v.b) || v.b[i] != ':' {
			return i, false
		}
		if i, ok = v.value(v.ws(i+1), depth); !ok {
			return i, false
		}
		var closed bool
		if i, closed, ok = v.next(i, '}'); closed || !ok {
			return i, ok
		}
	}
}

// next reads what follows a member or item at i: a comma (then it returns
// where the next one starts) or the closing byte (closed, and where the
// object or list ends).
func (v *jsonValidator) next(i int, closing byte) (int, bool, bool) {
	if i = v.ws(i); i >= len(v.b) {
		return i, false, false
	}
	switch v.b[i] {
	case ',':
		return v.ws(i + 1), false, true
	case closing:
		return i + 1, true, true
	}
	return i, false, false
}

func (v *jsonValidator) array(i, depth int) (int, bool) {
	if depth > maxJSONDepth {
		return i, false
	}
	v.deepest = max(v.deepest, depth)
	i = v.ws(i + 1)
	if i < len(v.b) && v.b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = v.value(i, depth); !ok {
			return i, false
		}
		var closed bool
		if i, closed, ok = v.next(i, ']'); closed || !ok {
			return i, ok
		}
	}
}

// str checks the string starting at i (a quote).
func (v *jsonValidator) str(i int) (int, bool) {
	b := v.b
	for i = plainRun(b, i+1); i < len(b); i = plainRun(b, i+1) {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			if i++; i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i <= 4 {
					return i, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return i, false
					}
				}
				if r := hex4(b[i+1 : i+5]); r >= 0xd800 && r <= 0xdfff {
					if low := i + 7; r < 0xdc00 && len(b)-low >= 4 && b[i+5] == '\\' && b[i+6] == 'u' && isHex4(b[low:low+4]) &&
						hex4(b[low:low+4]) >= 0xdc00 && hex4(b[low:low+4]) <= 0xdfff {
						i += 6 // the pair's second half, read with the first
					} else if v.lone < 0 {
						v.lone = i - 1
					}
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// isHex4 reports whether h is four hex digits.
func isHex4(h []byte) bool { return isHex(h[0]) && isHex(h[1]) && isHex(h[2]) && isHex(h[3]) }

// hex4 returns the value of four hex digits.
func hex4(h []byte) int {
	n := 0
	for _, c := range h[:4] {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		default:
			n = n<<4 | int(c-'A'+10)
		}
	}
	return n
}

// number checks the number starting at i: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *jsonValidator) number(i int) (int, bool) {
	b := v.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

// digits returns the index of the first byte at or after i that is not
// a decimal digit.
func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// Package didyoumean finds the names near a mistyped one: a flag, a
// field, a pool id. One edit distance for every "did you mean" of the
// project; no dependencies, so that the routing package can use it.
package didyoumean

import "strings"

// Distance is the Levenshtein distance of a and b (bytes).
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// maxNear is the longest name Near looks for names near: the distance
// costs len(name) × len(other), and a name longer than any id the
// grammar allows is near none.
const maxNear = 128

// Near returns the names within two edits of name, their case aside, in
// the order of names: the "did you mean" of a mistyped pool, route or
// key. Two names of two bytes or less are never near each other (every
// pair of country codes is within two edits), and a name longer than 128
// bytes is near none.
func Near(name string, names []string) []string {
	if len(name) > maxNear {
		return nil
	}
	lower := strings.ToLower(name)
	var near []string
	for _, n := range names {
		if len(name) <= 2 && len(n) <= 2 {
			continue
		}
		if Distance(lower, strings.ToLower(n)) <= 2 {
			near = append(near, n)
		}
	}
	return near
}

// stem is how many leading bytes a mistyped value must share with a
// value of a fixed set for NearValue to name it whatever its distance.
const stem = 4

// NearValue returns the values of a fixed set (an enum: a status, an
// output format, a section) near name, their case aside, in the order of
// values: those Near finds, and those sharing name's first four bytes or
// more ("drained" is three edits from "draining", but the same word).
func NearValue(name string, values []string) []string {
	if len(name) > maxNear {
		return nil
	}
	lower := strings.ToLower(name)
	var near []string
	for _, v := range values {
		lv := strings.ToLower(v)
		if len(lower) >= stem && len(lv) >= stem && lower[:stem] == lv[:stem] {
			near = append(near, v)
			continue
		}
		if len(name) <= 2 && len(v) <= 2 {
			continue
		}
		if Distance(lower, lv) <= 2 {
			near = append(near, v)
		}
	}
	return near
}

package main

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

// series is one sample of a Prometheus text exposition: the metric name,
// its labels and its value.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// parseProm parses the samples of a Prometheus text exposition whose names
// start with one of prefixes (all when none is given). Comments, malformed
// lines and samples with a timestamp are skipped.
func parseProm(b []byte, prefixes ...string) []series {
	var out []series
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !hasAnyPrefix(line, prefixes) {
			continue
		}
		if s, ok := parseSample(line); ok {
			out = append(out, s)
		}
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// parseSample parses `name{k="v",…} value`; label values with escaped
// quotes are not needed here and not supported.
func parseSample(line string) (series, bool) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return series{}, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return series{}, false
	}
	head := line[:i]
	s := series{value: v, labels: map[string]string{}}
	name, rest, hasLabels := strings.Cut(head, "{")
	s.name = name
	if !hasLabels {
		return s, !strings.ContainsAny(name, " \t")
	}
	rest, ok := strings.CutSuffix(rest, "}")
	if !ok {
		return series{}, false
	}
	for rest != "" {
		k, after, ok := strings.Cut(rest, `="`)
		if !ok {
			return series{}, false
		}
		val, after, ok := strings.Cut(after, `"`)
		if !ok {
			return series{}, false
		}
		s.labels[k] = val
		rest = strings.TrimPrefix(after, ",")
	}
	return s, true
}

// sumBy sums the samples named name by the value of label (all into ""
// when label is empty).
func sumBy(ss []series, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		if s.name == name {
			out[s.labels[label]] += s.value
		}
	}
	return out
}

// sumOf returns the sum of the samples named name.
func sumOf(ss []series, name string) float64 {
	return sumBy(ss, name, "")[""]
}

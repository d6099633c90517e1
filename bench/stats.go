package main

import (
	"math"
	"sort"
	"time"
)

// Dist is the distribution of one latency, in milliseconds.
type Dist struct {
	// N is the number of samples; 0 leaves the rest 0.
	N int `json:"n"`
	// P50 is the median, nearest rank, in ms.
	P50 float64 `json:"p50_ms"`
	// P90 is the 90th percentile, nearest rank, in ms.
	P90 float64 `json:"p90_ms"`
	// P99 is the 99th percentile, nearest rank, in ms.
	P99 float64 `json:"p99_ms"`
	// Max is the largest sample, in ms.
	Max float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dist returns nearest-rank percentiles of samples.
func dist(samples []time.Duration) Dist {
	if len(samples) == 0 {
		return Dist{}
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return ms(s[max(0, min(i, len(s)-1))])
	}
	return Dist{N: len(s), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: ms(s[len(s)-1])}
}

// median returns the median of xs (the mean of the middle two for an even
// count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianDist returns the per-field median of several runs' distributions.
func medianDist(ds []Dist) Dist {
	pick := func(f func(Dist) float64) float64 {
		xs := make([]float64, len(ds))
		for i, d := range ds {
			xs[i] = f(d)
		}
		return median(xs)
	}
	out := Dist{P50: pick(func(d Dist) float64 { return d.P50 }), P90: pick(func(d Dist) float64 { return d.P90 }),
		P99: pick(func(d Dist) float64 { return d.P99 }), Max: pick(func(d Dist) float64 { return d.Max })}
	for _, d := range ds {
		out.N += d.N
	}
	return out
}

package bench

import (
	"math"
	"slices"
	"time"
)

// Percentiles summarise a sample. Values are in the unit of the field that holds them (the JSON names say
// which). An empty sample has N 0 and zeros elsewhere.
type Percentiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Percentile is the p-quantile (0 ≤ p ≤ 1) of a sorted sample, interpolating linearly between the two closest
// ranks (NumPy's default, "linear"): the 0.5-quantile of {1, 2, 3, 4} is 2.5. It is NaN for an empty sample.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	switch {
	case n == 0:
		return math.NaN()
	case p <= 0:
		return sorted[0]
	case p >= 1:
		return sorted[n-1]
	}
	pos := p * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	frac := pos - float64(lo)
	return sorted[lo] + (sorted[hi]-sorted[lo])*frac
}

// Summarize computes the percentiles of values (which it does not modify).
func Summarize(values []float64) Percentiles {
	if len(values) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Percentiles{
		N: len(s), Mean: sum / float64(len(s)),
		P50: Percentile(s, 0.5), P90: Percentile(s, 0.9), P99: Percentile(s, 0.99), Max: s[len(s)-1],
	}
}

// SummarizeDurations summarises durations in milliseconds.
func SummarizeDurations(ds []time.Duration) Percentiles {
	return Summarize(msOf(ds))
}

func msOf(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func mean(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	return sum / float64(len(values))
}

// round keeps a figure to a few significant digits, so that JSON files do not carry clock noise to 17
// digits.
func round(v float64, digits int) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	scale := math.Pow(10, float64(digits-1-int(math.Floor(math.Log10(math.Abs(v))))))
	return math.Round(v*scale) / scale
}

// rounded rounds every figure of p to 4 significant digits.
func (p Percentiles) rounded() Percentiles {
	return Percentiles{N: p.N, Mean: round(p.Mean, 4), P50: round(p.P50, 4), P90: round(p.P90, 4), P99: round(p.P99, 4), Max: round(p.Max, 4)}
}

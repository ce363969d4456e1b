package bench

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"median of an even sample interpolates", []float64{1, 2, 3, 4}, 0.5, 2.5},
		{"median of an odd sample", []float64{1, 2, 3}, 0.5, 2},
		{"p0 is the minimum", []float64{3, 5, 9}, 0, 3},
		{"p100 is the maximum", []float64{3, 5, 9}, 1, 9},
		{"p99 of 1..100", seq(100), 0.99, 99.01},
		{"p90 of 1..10", seq(10), 0.9, 9.1},
		{"one value", []float64{7}, 0.99, 7},
		{"below 0 clamps", []float64{1, 2}, -1, 1},
		{"above 1 clamps", []float64{1, 2}, 2, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Percentile(c.sorted, c.p); math.Abs(got-c.want) > 1e-9 {
				t.Errorf("Percentile(%v, %v) = %v, want %v", c.sorted, c.p, got, c.want)
			}
		})
	}
	if got := Percentile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("the percentile of nothing is %v, want NaN", got)
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	in := []float64{5, 1, 4, 2, 3}
	got := Summarize(in)
	want := Percentiles{N: 5, Mean: 3, P50: 3, P90: 4.6, P99: 4.96, Max: 5}
	if math.Abs(got.P90-want.P90) > 1e-9 || math.Abs(got.P99-want.P99) > 1e-9 || got.N != want.N || got.Mean != want.Mean || got.P50 != want.P50 || got.Max != want.Max {
		t.Errorf("Summarize(%v) = %+v, want %+v", in, got, want)
	}
	if in[0] != 5 {
		t.Errorf("Summarize sorted its input: %v", in)
	}
	if got := Summarize(nil); got != (Percentiles{}) {
		t.Errorf("Summarize(nil) = %+v, want zeros", got)
	}
	d := SummarizeDurations([]time.Duration{time.Millisecond, 3 * time.Millisecond})
	if d.P50 != 2 || d.Max != 3 {
		t.Errorf("SummarizeDurations in ms: %+v", d)
	}
}

func TestRound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v      float64
		digits int
		want   float64
	}{
		{123.456789, 4, 123.5},
		{0.000123456, 3, 0.000123},
		{98765, 2, 99000},
		{-1.23456, 3, -1.23},
		{0, 4, 0},
	} {
		if got := round(c.v, c.digits); math.Abs(got-c.want) > 1e-12*math.Max(1, math.Abs(c.want)) {
			t.Errorf("round(%v, %d) = %v, want %v", c.v, c.digits, got, c.want)
		}
	}
}

package model

import (
	"math"
	"testing"
)

// TestInvFreq checks each rope type against values computed independently (in Python from the formulas of
// transformers' modeling_rope_utils.py, in float64), at indices on both sides of every band edge.
func TestInvFreq(t *testing.T) {
	t.Parallel()
	llama31 := RopeSpec{Base: 500000, Type: RopeLlama3, RotaryDims: 128, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OrigMaxPos: 8192}
	yarn := RopeSpec{Base: 10000, Type: RopeYarn, RotaryDims: 64, Factor: 4, OrigMaxPos: 4096, Truncate: true}
	noTrunc := yarn
	noTrunc.Truncate = false
	mscale := yarn
	mscale.Factor, mscale.MScale, mscale.MScaleAllDim = 40, 1, 0.707
	explicit := noTrunc
	explicit.AttnFactor = 1.25
	for _, tc := range []struct {
		name string
		spec RopeSpec
		n    int // len(inv)
		want map[int]float64
		af   float64
	}{
		{"default", RopeSpec{Base: 10000, RotaryDims: 64}, 32, map[int]float64{0: 1, 8: 0.1, 16: 0.01, 31: math.Pow(10000, -62.0/64)}, 1},
		// partial rotary: the frequencies are those of a head of RotaryDims dims
		{"default/partial", RopeSpec{Base: 10000, RotaryDims: 32}, 16, map[int]float64{0: 1, 8: 0.01}, 1},
		{"linear", RopeSpec{Base: 10000, Type: RopeLinear, RotaryDims: 16, Factor: 8}, 8, map[int]float64{0: 0.125, 4: 0.00125}, 1},
		{"llama3", llama31, 64, map[int]float64{
			0: 1, 20: 0.016560440080994446, 29: 0.002166570763503359, 31: 0.0008567514129196321,
			34: 0.0001785078127679964, 35: 9.556212353964683e-05, 63: 3.068925988914511e-07,
		}, 1},
		// lo, hi = 10, 23 (rounded outwards from 10.47, 22.51)
		{"yarn", yarn, 32, map[int]float64{
			0: 1, 5: 0.23713737056616552, 10: 0.05623413251903491, 12: 0.02797399468610489,
			16: 0.006538461538461538, 20: 0.0013378867023789297, 31: 3.33380358040831e-05,
		}, 1.138629436111989},
		// lo, hi = 10.47, 22.51: an implementation that rounds anyway differs at 12, 16 and 20
		{"yarn/no-truncate", noTrunc, 32, map[int]float64{
			0: 1, 10: 0.05623413251903491, 12: 0.02861360881198889, 16: 0.006556971521129435,
			20: 0.0012856320307266882, 31: 3.33380358040831e-05,
		}, 1.138629436111989},
		{"yarn/mscale", mscale, 32, map[int]float64{12: 0.026879360111431223, 16: 0.0055, 31: 3.3338035804083097e-06}, 1.0857263992561355},
		{"yarn/attn-factor", explicit, 32, map[int]float64{16: 0.006556971521129435}, 1.25},
		{"yarn/base150k-factor32", RopeSpec{Base: 150000, Type: RopeYarn, RotaryDims: 64, Factor: 32, OrigMaxPos: 4096, BetaFast: 32, BetaSlow: 1},
			32, map[int]float64{0: 1, 5: 0.15532298948448497, 10: 0.01933500112654036, 12: 0.006794959489732219,
				16: 0.00045648391922324086, 20: 1.818833668168956e-05, 31: 3.0235114281192144e-07}, 1.3465735902799727},
		// lo = 0, hi = 0.61 (d = 12, orig 16): a range under one index
		{"yarn/tiny", RopeSpec{Base: 10000, Type: RopeYarn, RotaryDims: 12, Factor: 4, OrigMaxPos: 16}, 6,
			map[int]float64{0: 1, 5: 0.00011603972084031943}, 1.138629436111989},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, af := tc.spec.InvFreq()
			if len(inv) != tc.n {
				t.Fatalf("%d frequencies, want %d", len(inv), tc.n)
			}
			for i, w := range tc.want {
				if d := inv[i]/w - 1; math.Abs(d) > 1e-13 {
					t.Errorf("θ_%d = %.17g, want %.17g", i, inv[i], w)
				}
			}
			if math.Abs(af-tc.af) > 1e-15 {
				t.Errorf("attention factor %.17g, want %.17g", af, tc.af)
			}
		})
	}
}

// TestInvFreqLlama3Unchanged pins the llama3 and default frequencies bit for bit to the formula the CPU
// backend used before RopeSpec existed (the dense families' logits depend on every bit).
func TestInvFreqLlama3Unchanged(t *testing.T) {
	t.Parallel()
	for _, s := range []RopeSpec{
		{Base: 500000, RotaryDims: 128},
		{Base: 1e6, RotaryDims: 32},
		{Base: 500000, Type: RopeLlama3, RotaryDims: 128, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OrigMaxPos: 8192},
		{Base: 500000, Type: RopeLlama3, RotaryDims: 64, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OrigMaxPos: 8192},
		{Base: 10000, Type: RopeLlama3, RotaryDims: 16, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OrigMaxPos: 64},
	} {
		got, af := s.InvFreq()
		for i := range got {
			f := 1 / math.Pow(s.Base, float64(2*i)/float64(s.RotaryDims))
			if s.Type == RopeLlama3 {
				old := float64(s.OrigMaxPos)
				wl := 2 * math.Pi / f
				switch {
				case wl < old/s.HighFreqFactor:
				case wl > old/s.LowFreqFactor:
					f /= s.Factor
				default:
					sm := (old/wl - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
					f = (1-sm)*f/s.Factor + sm*f
				}
			}
			if math.Float64bits(got[i]) != math.Float64bits(f) {
				t.Fatalf("%+v: θ_%d = %v, want %v", s, i, got[i], f)
			}
		}
		if af != 1 {
			t.Fatalf("%+v: attention factor %v", s, af)
		}
	}
}

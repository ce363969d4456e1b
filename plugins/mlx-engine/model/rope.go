package model

import "math"

// InvFreq returns the rotary embedding's inverse frequencies θ_i for i < RotaryDims/2, in float64, and the
// factor that multiplies the rotated dims of q and k (cos and sin, in Hugging Face's form). It follows
// transformers' modeling_rope_utils.py, with d = RotaryDims:
//
//   - default: θ_i = Base^(-2i/d); attention factor 1.
//   - linear: θ_i / Factor.
//   - llama3: wavelengths 2π/θ_i shorter than OrigMaxPos/HighFreqFactor are kept, those longer than
//     OrigMaxPos/LowFreqFactor are divided by Factor, and the band between is interpolated smoothly.
//   - yarn: a ramp between the extrapolated θ_i and the interpolated θ_i/Factor over the correction range of
//     BetaFast and BetaSlow (32 and 1 when zero), rounded outwards when Truncate holds (the config's default,
//     which the family mapper sets); the attention factor is AttnFactor when set, else
//     m(Factor, MScale)/m(Factor, MScaleAllDim) when both are set, else m(Factor, 1), with
//     m(f, s) = 0.1·s·ln f + 1 (1 for f ≤ 1).
//
// Both backends and the float64 reference use these frequencies, so the angle pos·θ_i is the same everywhere.
func (r *RopeSpec) InvFreq() (inv []float64, attnFactor float64) {
	d := r.RotaryDims
	inv = make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(r.Base, float64(2*i)/float64(d))
	}
	switch r.Type {
	case RopeLinear:
		for i := range inv {
			inv[i] /= r.Factor
		}
	case RopeLlama3:
		old := float64(r.OrigMaxPos)
		lowWavelen, highWavelen := old/r.LowFreqFactor, old/r.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen:
			case wavelen > lowWavelen:
				inv[i] = f / r.Factor
			default:
				smooth := (old/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
				inv[i] = (1-smooth)*f/r.Factor + smooth*f
			}
		}
	case RopeYarn:
		return r.yarn(inv)
	}
	return inv, 1
}

// yarn applies YaRN's ramp to the default frequencies inv (_compute_yarn_parameters).
func (r *RopeSpec) yarn(inv []float64) ([]float64, float64) {
	d := float64(r.RotaryDims)
	fast, slow := r.BetaFast, r.BetaSlow
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	corr := func(rot float64) float64 {
		return d * math.Log(float64(r.OrigMaxPos)/(rot*2*math.Pi)) / (2 * math.Log(r.Base))
	}
	lo, hi := corr(fast), corr(slow)
	if r.Truncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = max(lo, 0), min(hi, d-1)
	if lo == hi {
		hi += 0.001
	}
	for i, extrap := range inv {
		ramp := min(max((float64(i)-lo)/(hi-lo), 0), 1)
		w := 1 - ramp // the extrapolation's weight
		inv[i] = extrap/r.Factor*(1-w) + extrap*w
	}
	af := r.AttnFactor
	if af == 0 {
		m := func(f, s float64) float64 {
			if f <= 1 {
				return 1
			}
			return 0.1*s*math.Log(f) + 1
		}
		if r.MScale != 0 && r.MScaleAllDim != 0 {
			af = m(r.Factor, r.MScale) / m(r.Factor, r.MScaleAllDim)
		} else {
			af = m(r.Factor, 1)
		}
	}
	return inv, af
}

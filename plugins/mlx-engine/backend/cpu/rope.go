package cpu

import (
	"math"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// ropeFrequencies returns the inverse frequencies θ_i = base^(-2i/d) of rotary embeddings for i < d/2, with
// Llama 3.1's frequency-dependent scaling applied when configured: wavelengths shorter than
// original_context/high_freq_factor are kept, those longer than original_context/low_freq_factor are divided by
// factor, and the band between is interpolated smoothly.
func ropeFrequencies(headDim int, base float64, s *model.RopeScaling) []float64 {
	half := headDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(base, float64(2*i)/float64(headDim))
	}
	if s == nil {
		return inv
	}
	old := float64(s.OriginalMaxPositionEmbeddings)
	lowWavelen, highWavelen := old/s.LowFreqFactor, old/s.HighFreqFactor
	for i, f := range inv {
		wavelen := 2 * math.Pi / f
		switch {
		case wavelen < highWavelen:
		case wavelen > lowWavelen:
			inv[i] = f / s.Factor
		default:
			smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			inv[i] = (1-smooth)*f/s.Factor + smooth*f
		}
	}
	return inv
}

// ropeTable fills cos and sin (each len(inv)) for one position.
func ropeTable(pos int, inv []float64, cos, sin []float32) {
	for i, f := range inv {
		s, c := math.Sincos(float64(pos) * f)
		cos[i], sin[i] = float32(c), float32(s)
	}
}

// applyRope rotates every head of x (heads×headDim values) in place, in the Hugging Face layout: element i of a
// head pairs with element i+headDim/2 ("rotate_half"), not with its neighbour.
func applyRope(x []float32, headDim int, cos, sin []float32) {
	half := headDim / 2
	for h := 0; h+headDim <= len(x); h += headDim {
		a := x[h : h+half : h+half]
		b := x[h+half : h+headDim : h+headDim]
		c, s := cos[:half:half], sin[:half:half]
		for i := range a {
			x1, x2 := a[i], b[i]
			a[i] = x1*c[i] - x2*s[i]
			b[i] = x2*c[i] + x1*s[i]
		}
	}
}

package cpu

import "math"

// ropeFreqs is one rotary embedding's frequencies (model.RopeSpec.InvFreq): θ_i for the RotaryDims/2 rotated
// pairs, and the factor that scales the rotated dims of q and k.
type ropeFreqs struct {
	inv        []float64
	attnFactor float64
}

// ropeTable fills cos and sin (each len(inv)) for one position, scaled by the attention factor: the angle
// pos·θ_i in float64, rounded once.
func ropeTable(pos int, r *ropeFreqs, cos, sin []float32) {
	af := r.attnFactor
	for i, f := range r.inv {
		s, c := math.Sincos(float64(pos) * f)
		cos[i], sin[i] = float32(c*af), float32(s*af)
	}
}

// applyRope rotates the first rotDims dims of every head of x (heads×headDim values) in place, in the Hugging
// Face layout: element i of a head pairs with element i+rotDims/2 ("rotate_half"), not with its neighbour. The
// dims past rotDims pass through.
func applyRope(x []float32, headDim, rotDims int, cos, sin []float32) {
	half := rotDims / 2
	for h := 0; h+headDim <= len(x); h += headDim {
		a := x[h : h+half : h+half]
		b := x[h+half : h+rotDims : h+rotDims]
		c, s := cos[:half:half], sin[:half:half]
		for i := range a {
			x1, x2 := a[i], b[i]
			a[i] = x1*c[i] - x2*s[i]
			b[i] = x2*c[i] + x1*s[i]
		}
	}
}

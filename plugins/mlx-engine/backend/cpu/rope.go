package cpu

import "math"

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

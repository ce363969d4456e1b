package sampling

import "math"

// exp32 is e^x in float32 precision for x <= 0, several times faster than math.Exp: softmax over a 100k-token
// vocabulary is one exp per token per step. It reduces x = n·ln2 + r with |r| <= ln2/2 and evaluates e^r with
// a degree-6 polynomial (relative error below 2e-7, float32's resolution); the result is exactly reproducible,
// which seeded sampling needs.
func exp32(x float32) float32 {
	if x < -87 {
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	v := x*log2e + 0.5
	ni := int32(v) // truncates toward zero: one less for negative non-integers gives the floor
	if float32(ni) > v {
		ni--
	}
	n := float32(ni)
	r := x - n*ln2hi - n*ln2lo
	p := float32(1.0 / 720)
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	return p * math.Float32frombits(uint32(ni+127)<<23)
}

package dtype

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// nearest16 is the obviously-correct reference: among all finite values of a 16-bit format (given by widen),
// pick the one nearest to f in float64, ties to the even bit pattern; beyond the largest finite value by at
// least half an ulp, an infinity.
type nearest16 struct {
	vals []float64
	bits []uint16
	max  float64 // largest finite value
	ulp  float64 // spacing at the top of the range
}

func newNearest16(widen func(uint16) float32, infBits uint16) *nearest16 {
	n := &nearest16{}
	type pair struct {
		v float64
		b uint16
	}
	var ps []pair
	for b := 0; b < 1<<15; b++ { // non-negative patterns
		v := float64(widen(uint16(b)))
		if math.IsInf(v, 0) || math.IsNaN(v) {
			continue
		}
		ps = append(ps, pair{v, uint16(b)})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].v < ps[j].v })
	for _, p := range ps {
		n.vals = append(n.vals, p.v)
		n.bits = append(n.bits, p.b)
	}
	n.max = n.vals[len(n.vals)-1]
	n.ulp = n.max - n.vals[len(n.vals)-2]
	_ = infBits
	return n
}

func (n *nearest16) round(f float32, infBits uint16) uint16 {
	x := float64(f)
	var sign uint16
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	if x >= n.max+n.ulp/2 {
		return sign | infBits
	}
	i := sort.SearchFloat64s(n.vals, x)
	if i == len(n.vals) {
		return sign | n.bits[len(n.bits)-1]
	}
	if n.vals[i] == x || i == 0 {
		return sign | n.bits[i]
	}
	lo, hi := n.vals[i-1], n.vals[i]
	switch {
	case x-lo < hi-x:
		return sign | n.bits[i-1]
	case x-lo > hi-x:
		return sign | n.bits[i]
	case n.bits[i-1]&1 == 0:
		return sign | n.bits[i-1]
	}
	return sign | n.bits[i]
}

func randomFloats(r *rand.Rand, n int) []float32 {
	fs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519.99, 65520, 6.1035156e-05, 5.9604645e-08,
		2.9802322e-08, 2.9802326e-08, 1e-10, 3.3895314e38, math.MaxFloat32, 1.0009765625, 1.00048828125}
	for len(fs) < n {
		switch r.IntN(3) {
		case 0: // any bit pattern
			f := math.Float32frombits(r.Uint32())
			if !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
				fs = append(fs, f)
			}
		case 1: // typical weights and activations
			fs = append(fs, float32(r.NormFloat64()*math.Pow(10, float64(r.IntN(9)-6))))
		case 2: // exact midpoints between 16-bit values stress ties-to-even
			h := uint16(r.IntN(0x7bff))
			a, b := float64(F16ToF32(h)), float64(F16ToF32(h+1))
			fs = append(fs, float32((a+b)/2))
		}
	}
	return fs
}

func TestFloat16AgainstNearestReference(t *testing.T) {
	t.Parallel()
	ref := newNearest16(F16ToF32, 0x7c00)
	for _, f := range randomFloats(rand.New(rand.NewPCG(1, 2)), 200000) {
		if got, want := F32ToF16(f), ref.round(f, 0x7c00); got != want {
			t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", f, got, want)
		}
	}
}

func TestBFloat16AgainstNearestReference(t *testing.T) {
	t.Parallel()
	ref := newNearest16(BF16ToF32, 0x7f80)
	for _, f := range randomFloats(rand.New(rand.NewPCG(3, 4)), 200000) {
		if got, want := F32ToBF16(f), ref.round(f, 0x7f80); got != want {
			t.Fatalf("F32ToBF16(%g) = %#04x, want %#04x", f, got, want)
		}
	}
}

func TestSixteenBitRoundTripIsExact(t *testing.T) {
	t.Parallel()
	for b := 0; b < 1<<16; b++ {
		h := uint16(b)
		if f := F16ToF32(h); !math.IsNaN(float64(f)) {
			if got := F32ToF16(f); got != h {
				t.Fatalf("float16 %#04x -> %g -> %#04x", h, f, got)
			}
		} else if !math.IsNaN(float64(F16ToF32(F32ToF16(f)))) {
			t.Fatalf("float16 NaN %#04x lost its NaN-ness", h)
		}
		if f := BF16ToF32(h); !math.IsNaN(float64(f)) {
			if got := F32ToBF16(f); got != h {
				t.Fatalf("bfloat16 %#04x -> %g -> %#04x", h, f, got)
			}
		} else if !math.IsNaN(float64(BF16ToF32(F32ToBF16(f)))) {
			t.Fatalf("bfloat16 NaN %#04x lost its NaN-ness", h)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	t.Parallel()
	src := []float32{0, 1.5, -2.25, 3.14159, 1e-3, 65504}
	for _, d := range []DType{Float32, Float16, BFloat16} {
		t.Run(string(d), func(t *testing.T) {
			buf := make([]byte, len(src)*d.Size())
			if err := Encode(d, buf, src); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(src))
			if err := Decode(d, got, buf); err != nil {
				t.Fatal(err)
			}
			for i := range src {
				if got[i] != d.Round(src[i]) {
					t.Errorf("element %d: decoded %g, want Round = %g", i, got[i], d.Round(src[i]))
				}
			}
			if err := Encode(d, buf[1:], src); err == nil {
				t.Error("Encode accepted a short buffer")
			}
			if err := Decode(d, got, buf[1:]); err == nil {
				t.Error("Decode accepted a short buffer")
			}
		})
	}
	if _, err := Parse("int8"); err == nil {
		t.Error("Parse accepted int8")
	}
	if d, err := Parse("bfloat16"); err != nil || d != BFloat16 {
		t.Errorf("Parse(bfloat16) = %q, %v", d, err)
	}
}

package kvwire_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/duet-ai/duet/sdk/kvwire"
)

func TestDTypeStrings(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		d    kvwire.DType
		size int
	}{
		"bfloat16": {kvwire.BFloat16, 2},
		"float16":  {kvwire.Float16, 2},
		"float32":  {kvwire.Float32, 4},
	}
	for s, tc := range tests {
		t.Run(s, func(t *testing.T) {
			d, err := kvwire.ParseDType(s)
			if err != nil || d != tc.d || d.String() != s || d.Size() != tc.size || !d.Valid() {
				t.Fatalf("ParseDType(%q) = %v (%q, %d), %v", s, d, d.String(), d.Size(), err)
			}
		})
	}
	for _, bad := range []string{"", "bf16", "Float32", "int8"} {
		if _, err := kvwire.ParseDType(bad); err == nil {
			t.Errorf("ParseDType(%q) accepted", bad)
		}
	}
	if d := kvwire.DType(0); d.Valid() || d.String() != "" || d.Size() != 0 {
		t.Error("the zero DType must be invalid")
	}
}

// Every 16-bit pattern widens exactly and narrows back to itself (NaNs to a NaN).
func TestHalfRoundTripExhaustive(t *testing.T) {
	t.Parallel()
	for i := range 1 << 16 {
		h := uint16(i)
		for _, tc := range []struct {
			name   string
			widen  func(uint16) float32
			narrow func(float32) uint16
			isNaN  func(uint16) bool
		}{
			{"bfloat16", kvwire.BFloat16ToFloat32, kvwire.Float32ToBFloat16, func(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }},
			{"float16", kvwire.Float16ToFloat32, kvwire.Float32ToFloat16, func(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }},
		} {
			f := tc.widen(h)
			back := tc.narrow(f)
			if tc.isNaN(h) {
				if !math.IsNaN(float64(f)) || !tc.isNaN(back) || back&0x8000 != h&0x8000 {
					t.Fatalf("%s NaN %04x -> %v -> %04x", tc.name, h, f, back)
				}
				continue
			}
			if back != h {
				t.Fatalf("%s %04x -> %v -> %04x", tc.name, h, f, back)
			}
		}
	}
}

// The float16 widening agrees with a formula that does not share its bit tricks.
func TestFloat16ToFloat32Values(t *testing.T) {
	t.Parallel()
	for i := range 1 << 15 {
		h := uint16(i)
		exp, mant := int(h>>10), float64(h&0x3ff)
		var want float64
		switch {
		case exp == 0:
			want = math.Ldexp(mant, -24)
		case exp == 31:
			continue
		default:
			want = math.Ldexp(1+mant/1024, exp-15)
		}
		if got := kvwire.Float16ToFloat32(h); float64(got) != want || float64(kvwire.Float16ToFloat32(h|0x8000)) != -want {
			t.Fatalf("%04x: got %v, want %v", h, got, want)
		}
	}
}

// reference rounds x to the nearest value of a sorted table of finite non-negative values (ties to the even bit
// pattern), or to infinity beyond half an ulp above the largest, independently of the bit-level code.
type reference struct {
	vals    []float64
	bits    []uint16
	overMax float64 // values at or above this round to infinity
	inf     uint16
}

func newReference(widen func(uint16) float32, expMask uint16) *reference {
	r := &reference{inf: expMask}
	for i := range int(expMask) { // every finite non-negative pattern
		r.vals = append(r.vals, float64(widen(uint16(i))))
		r.bits = append(r.bits, uint16(i))
	}
	sort.Sort(r)
	n := len(r.vals)
	r.overMax = r.vals[n-1] + (r.vals[n-1]-r.vals[n-2])/2
	return r
}

func (r *reference) Len() int           { return len(r.vals) }
func (r *reference) Less(i, j int) bool { return r.vals[i] < r.vals[j] }
func (r *reference) Swap(i, j int) {
	r.vals[i], r.vals[j] = r.vals[j], r.vals[i]
	r.bits[i], r.bits[j] = r.bits[j], r.bits[i]
}

func (r *reference) round(x float32) uint16 {
	sign := uint16(0)
	a := float64(x)
	if math.Signbit(a) {
		sign, a = 0x8000, -a
	}
	if a >= r.overMax {
		return sign | r.inf
	}
	i := sort.SearchFloat64s(r.vals, a)
	if i == len(r.vals) { // above the largest finite value but below the rounding threshold
		return sign | r.bits[i-1]
	}
	if r.vals[i] == a {
		return sign | r.bits[i]
	}
	lo, hi := i-1, i
	dlo, dhi := a-r.vals[lo], r.vals[hi]-a
	switch {
	case dlo < dhi:
		return sign | r.bits[lo]
	case dhi < dlo:
		return sign | r.bits[hi]
	case r.bits[lo]&1 == 0:
		return sign | r.bits[lo]
	}
	return sign | r.bits[hi]
}

func TestNarrowingRoundsToNearestEven(t *testing.T) {
	t.Parallel()
	refs := []struct {
		name   string
		ref    *reference
		narrow func(float32) uint16
		widen  func(uint16) float32
	}{
		{"bfloat16", newReference(kvwire.BFloat16ToFloat32, 0x7f80), kvwire.Float32ToBFloat16, kvwire.BFloat16ToFloat32},
		{"float16", newReference(kvwire.Float16ToFloat32, 0x7c00), kvwire.Float32ToFloat16, kvwire.Float16ToFloat32},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range refs {
		t.Run(tc.name, func(t *testing.T) {
			check := func(x float32) {
				if got, want := tc.narrow(x), tc.ref.round(x); got != want {
					t.Fatalf("%s(%g = %08x) = %04x, want %04x", tc.name, x, math.Float32bits(x), got, want)
				}
			}
			// Exact halfway points and their neighbours between consecutive representable values.
			for i := 0; i+1 < len(tc.ref.vals); i++ {
				mid := float32((tc.ref.vals[i] + tc.ref.vals[i+1]) / 2)
				check(mid)
				check(-mid)
				check(math.Nextafter32(mid, 0))
				check(math.Nextafter32(mid, float32(math.Inf(1))))
			}
			for range 2_000_000 {
				x := math.Float32frombits(rng.Uint32())
				if !math.IsNaN(float64(x)) {
					check(x)
				}
			}
			for _, x := range []float32{0, float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, 65504, 65519.99, 65520, 1e-8, 5.96e-8, 2.98e-8} {
				check(x)
			}
			if nan := tc.narrow(float32(math.NaN())); !math.IsNaN(float64(tc.widen(nan))) {
				t.Fatalf("NaN narrowed to %04x", nan)
			}
		})
	}
}

func TestConvert(t *testing.T) {
	t.Parallel()
	vals := []float32{0, 1, -2.5, 3.140625, 65504, 1e-5, float32(math.Copysign(0, -1)), 7, 1e-7, -65520, 0.333}
	enc := func(d kvwire.DType) []byte {
		b := make([]byte, len(vals)*d.Size())
		for i, v := range vals {
			switch d {
			case kvwire.Float32:
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
			case kvwire.BFloat16:
				binary.LittleEndian.PutUint16(b[2*i:], kvwire.Float32ToBFloat16(v))
			case kvwire.Float16:
				binary.LittleEndian.PutUint16(b[2*i:], kvwire.Float32ToFloat16(v))
			}
		}
		return b
	}
	all := []kvwire.DType{kvwire.BFloat16, kvwire.Float16, kvwire.Float32}
	for _, from := range all {
		for _, to := range all {
			t.Run(from.String()+"_to_"+to.String(), func(t *testing.T) {
				for k := range len(vals) + 1 { // every length, so word-at-a-time loops and their tails both run
					convertPrefix(t, vals[:k], enc(from)[:k*from.Size()], from, to)
				}
			})
		}
	}
	if err := kvwire.Convert(make([]byte, 4), kvwire.Float32, make([]byte, 3), kvwire.BFloat16); err == nil {
		t.Error("odd source length accepted")
	}
	if err := kvwire.Convert(make([]byte, 2), kvwire.Float32, make([]byte, 2), kvwire.BFloat16); err == nil {
		t.Error("short destination accepted")
	}
	if err := kvwire.Convert(nil, 0, nil, kvwire.Float32); err == nil {
		t.Error("invalid dtype accepted")
	}
}

func convertPrefix(t *testing.T, vals []float32, src []byte, from, to kvwire.DType) {
	t.Helper()
	dst := make([]byte, kvwire.ConvertedLen(len(src), from, to))
	if err := kvwire.Convert(dst, to, src, from); err != nil {
		t.Fatal(err)
	}
	// Converting through float32 once, by the scalar helpers, must give the same bytes.
	want := make([]byte, len(dst))
	le := binary.LittleEndian
	for i := range vals {
		var f float32
		switch from {
		case kvwire.Float32:
			f = math.Float32frombits(le.Uint32(src[4*i:]))
		case kvwire.BFloat16:
			f = kvwire.BFloat16ToFloat32(le.Uint16(src[2*i:]))
		case kvwire.Float16:
			f = kvwire.Float16ToFloat32(le.Uint16(src[2*i:]))
		}
		switch to {
		case kvwire.Float32:
			le.PutUint32(want[4*i:], math.Float32bits(f))
		case kvwire.BFloat16:
			le.PutUint16(want[2*i:], kvwire.Float32ToBFloat16(f))
		case kvwire.Float16:
			le.PutUint16(want[2*i:], kvwire.Float32ToFloat16(f))
		}
	}
	if string(dst) != string(want) {
		t.Fatalf("%d elements: got % x, want % x", len(vals), dst, want)
	}
}

func BenchmarkConvert(b *testing.B) {
	src := make([]byte, 1<<20)
	for _, tc := range []struct{ from, to kvwire.DType }{
		{kvwire.BFloat16, kvwire.Float32}, {kvwire.Float32, kvwire.BFloat16}, {kvwire.Float16, kvwire.BFloat16},
	} {
		b.Run(tc.from.String()+"_to_"+tc.to.String(), func(b *testing.B) {
			s := src[:len(src)/tc.from.Size()*tc.from.Size()]
			dst := make([]byte, kvwire.ConvertedLen(len(s), tc.from, tc.to))
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				kvwire.Convert(dst, tc.to, s, tc.from)
			}
		})
	}
}

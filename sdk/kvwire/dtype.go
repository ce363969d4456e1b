package kvwire

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// DType is the element type of KV tensors on the wire. The zero value is "unset" and is never valid on the wire.
// Elements are raw IEEE-754 (bfloat16: the upper 16 bits of a float32) in little-endian byte order, the native
// order of every platform exo and MLX run on.
type DType uint8

// The element types exo's protocol defines.
const (
	BFloat16 DType = iota + 1
	Float16
	Float32
)

// String returns the wire string ("bfloat16", "float16", "float32"), or "" for an unset or unknown DType.
func (d DType) String() string {
	switch d {
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	case Float32:
		return "float32"
	}
	return ""
}

// Size is the size of one element in bytes, or 0 for an unset or unknown DType.
func (d DType) Size() int {
	switch d {
	case BFloat16, Float16:
		return 2
	case Float32:
		return 4
	}
	return 0
}

// Valid reports whether d is one of the wire element types.
func (d DType) Valid() bool { return d.Size() != 0 }

// ParseDType maps a wire string to its DType.
func ParseDType(s string) (DType, error) {
	d := parseDType(s)
	if d == 0 {
		return 0, fmt.Errorf("kvwire: unknown dtype %q (want bfloat16, float16 or float32)", s)
	}
	return d, nil
}

func parseDType(s string) DType {
	switch s {
	case "bfloat16":
		return BFloat16
	case "float16":
		return Float16
	case "float32":
		return Float32
	}
	return 0
}

// ConvertedLen is the number of bytes that n bytes of from-elements take as to-elements, or -1 when n is not a
// whole number of from-elements or a DType is not valid.
func ConvertedLen(n int, from, to DType) int {
	if !from.Valid() || !to.Valid() || n < 0 || n%from.Size() != 0 {
		return -1
	}
	return n / from.Size() * to.Size()
}

// Convert converts the elements in src, of type from, into dst, of type to. dst must be exactly
// ConvertedLen(len(src), from, to) bytes; src and dst must not overlap unless from == to and they are the same
// slice. Widening conversions (bfloat16 or float16 to float32) are exact; narrowing ones round to nearest, ties
// to even, overflow to infinity, and keep NaNs NaN (quiet, sign and top payload bits preserved). bfloat16 and
// float16 convert through float32, which is exact on the way in, so each value is rounded once.
func Convert(dst []byte, to DType, src []byte, from DType) error {
	want := ConvertedLen(len(src), from, to)
	if want < 0 {
		return fmt.Errorf("kvwire: cannot convert %d bytes of %q to %q", len(src), from, to)
	}
	if len(dst) != want {
		return fmt.Errorf("kvwire: converting %d bytes of %s to %s needs %d bytes, dst has %d",
			len(src), from, to, want, len(dst))
	}
	// One loop per pair, with the scalar conversions called directly so the compiler can inline them.
	le := binary.LittleEndian
	n := len(src) / from.Size()
	switch {
	case from == to:
		copy(dst, src)
	case from == BFloat16 && to == Float32:
		// Four elements per step: each bfloat16 becomes the upper half of a float32.
		for len(src) >= 8 && len(dst) >= 16 {
			x := le.Uint64(src)
			le.PutUint64(dst, (x&0xffff)<<16|(x&0xffff0000)<<32)
			le.PutUint64(dst[8:], (x>>32&0xffff)<<16|(x>>48)<<48)
			src, dst = src[8:], dst[16:]
		}
		for i := range len(src) / 2 {
			le.PutUint32(dst[4*i:], uint32(le.Uint16(src[2*i:]))<<16)
		}
	case from == Float16 && to == Float32:
		table := float16Table()
		for i := range n {
			le.PutUint32(dst[4*i:], table[le.Uint16(src[2*i:])])
		}
	case from == Float32 && to == BFloat16:
		for i := range n {
			le.PutUint16(dst[2*i:], Float32ToBFloat16(math.Float32frombits(le.Uint32(src[4*i:]))))
		}
	case from == Float32 && to == Float16:
		for i := range n {
			le.PutUint16(dst[2*i:], Float32ToFloat16(math.Float32frombits(le.Uint32(src[4*i:]))))
		}
	case from == BFloat16: // to Float16
		for i := range n {
			le.PutUint16(dst[2*i:], Float32ToFloat16(BFloat16ToFloat32(le.Uint16(src[2*i:]))))
		}
	default: // Float16 to BFloat16
		table := float16Table()
		for i := range n {
			le.PutUint16(dst[2*i:], Float32ToBFloat16(math.Float32frombits(table[le.Uint16(src[2*i:])])))
		}
	}
	return nil
}

// float16Table maps every float16 bit pattern to its float32 bits (256 KiB, built on first use).
var float16Table = sync.OnceValue(func() *[1 << 16]uint32 {
	var t [1 << 16]uint32
	for i := range t {
		t[i] = math.Float32bits(Float16ToFloat32(uint16(i)))
	}
	return &t
})

// BFloat16ToFloat32 widens a bfloat16 (given by its bits) exactly.
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBFloat16 rounds f to the nearest bfloat16, ties to even, and returns its bits.
func Float32ToBFloat16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep sign and top payload bits, force quiet
		return uint16(u>>16) | 0x0040
	}
	// Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry into the exponent is correct
	// (it rounds up to the next binade, or to infinity).
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// Float16ToFloat32 widens an IEEE half (given by its bits) exactly, subnormals included.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: value is mant * 2^-24; normalise it.
	e := uint32(113) // float32 biased exponent of 2^-14
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// Float32ToFloat16 rounds f to the nearest IEEE half, ties to even, and returns its bits. Values beyond the
// largest half round to infinity; tiny ones to subnormals or zero.
func Float32ToFloat16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	abs := u & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN: keep the top payload bits, force quiet
		return sign | 0x7e00 | uint16(abs>>13)&0x3ff
	case abs >= 0x477ff000: // >= 65520, halfway between the largest half (65504) and 2^16: rounds to infinity
		return sign | 0x7c00
	case abs >= 0x38800000: // normal half range, >= 2^-14
		// Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a carry out of the
		// mantissa correctly bumps the exponent.
		abs -= 112 << 23
		abs += 0xfff + (abs>>13)&1
		return sign | uint16(abs>>13)
	case abs < 0x33000000: // < 2^-25: below half the smallest subnormal, rounds to zero (2^-25 itself ties to 0)
		return sign
	}
	// Subnormal half: the result is round(value * 2^24) with value = (1.mant) * 2^(e-127).
	e := abs >> 23
	mant := abs&0x7fffff | 0x800000 // 24 significant bits
	shift := 126 - e                // 14..24 for e in [102, 112]
	kept := mant >> shift
	rem := mant & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && kept&1 == 1 {
		kept++ // may carry into the smallest normal, which is the right answer
	}
	return sign | uint16(kept)
}

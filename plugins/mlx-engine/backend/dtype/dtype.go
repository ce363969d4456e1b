package dtype

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/duet-ai/duet/sdk/kvwire"
)

// DType is an element type, spelled as the KV wire protocol and MLX spell it.
type DType string

// The element types the engine computes and exchanges in.
const (
	Float32  DType = "float32"
	Float16  DType = "float16"
	BFloat16 DType = "bfloat16"
)

// Size is the number of bytes of one element, or 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// Valid reports whether d is one of the known element types.
func (d DType) Valid() bool { return d.Size() != 0 }

// Parse checks a wire name and returns it as a DType.
func Parse(s string) (DType, error) {
	d := DType(s)
	if !d.Valid() {
		return "", fmt.Errorf("dtype: unknown element type %q (want float32, float16 or bfloat16)", s)
	}
	return d, nil
}

// Round returns f rounded to the nearest value representable in d, as a float32. Storing Round(f) and later
// converting it to d's bytes is exact.
func (d DType) Round(f float32) float32 {
	switch d {
	case Float16:
		return F16ToF32(F32ToF16(f))
	case BFloat16:
		return BF16ToF32(F32ToBF16(f))
	}
	return f
}

// Encode writes src as d's little-endian bytes into dst, which must hold len(src)*d.Size() bytes.
func Encode(d DType, dst []byte, src []float32) error {
	if len(dst) != len(src)*d.Size() || !d.Valid() {
		return fmt.Errorf("dtype: encode %d %s elements into %d bytes", len(src), d, len(dst))
	}
	switch d {
	case Float32:
		for i, f := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
		}
	case Float16:
		for i, f := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(f))
		}
	case BFloat16:
		for i, f := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(f))
		}
	}
	return nil
}

// Decode reads d's little-endian bytes from src into dst, which must hold len(src)/d.Size() elements.
func Decode(d DType, dst []float32, src []byte) error {
	if len(src) != len(dst)*d.Size() || !d.Valid() {
		return fmt.Errorf("dtype: decode %d bytes of %s into %d elements", len(src), d, len(dst))
	}
	switch d {
	case Float32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case Float16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BFloat16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	}
	return nil
}

// The scalar conversions are the KV wire protocol's (sdk/kvwire), so that the bytes a backend stores and the
// bytes the wire carries are rounded by one and the same code.

// BF16ToF32 widens a bfloat16 (the top half of a float32) exactly.
func BF16ToF32(h uint16) float32 { return kvwire.BFloat16ToFloat32(h) }

// F32ToBF16 rounds a float32 to bfloat16, to nearest with ties to even; NaN stays a quiet NaN.
func F32ToBF16(f float32) uint16 { return kvwire.Float32ToBFloat16(f) }

// F16ToF32 widens an IEEE 754 binary16 exactly, subnormals included.
func F16ToF32(h uint16) float32 { return kvwire.Float16ToFloat32(h) }

// F32ToF16 rounds a float32 to IEEE 754 binary16, to nearest with ties to even; overflow gives an infinity,
// tiny values become subnormals or zero, NaN stays a quiet NaN.
func F32ToF16(f float32) uint16 { return kvwire.Float32ToFloat16(f) }

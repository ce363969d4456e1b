package safetensors

import "fmt"

// DType is a tensor element type as the safetensors header spells it.
type DType string

// The element types of the safetensors format.
const (
	Bool   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
	U16    DType = "U16"
	I16    DType = "I16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	U32    DType = "U32"
	I32    DType = "I32"
	F32    DType = "F32"
	U64    DType = "U64"
	I64    DType = "I64"
	F64    DType = "F64"
)

// Size is the number of bytes of one element, or 0 when d is not a safetensors dtype.
func (d DType) Size() int {
	switch d {
	case Bool, U8, I8, F8E4M3, F8E5M2:
		return 1
	case U16, I16, F16, BF16:
		return 2
	case U32, I32, F32:
		return 4
	case U64, I64, F64:
		return 8
	}
	return 0
}

func (d DType) check() error {
	if d.Size() == 0 {
		return fmt.Errorf("unknown dtype %q", string(d))
	}
	return nil
}

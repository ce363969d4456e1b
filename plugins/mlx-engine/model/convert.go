package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// ToFloat32 converts a F32, F16 or BF16 tensor into dst, which must hold NumElements values.
func ToFloat32(t *safetensors.Tensor, dst []float32) error {
	d, err := floatDType(t)
	if err != nil {
		return err
	}
	if len(dst) != t.NumElements() {
		return fmt.Errorf("tensor %q: %d elements into a buffer of %d", t.Name, t.NumElements(), len(dst))
	}
	return dtype.Decode(d, dst, t.Data)
}

// Vector returns a F32, F16 or BF16 tensor as a new []float32.
func Vector(t *safetensors.Tensor) ([]float32, error) {
	out := make([]float32, t.NumElements())
	return out, ToFloat32(t, out)
}

// Row writes row r of the matrix (dequantized when quantized) into dst, which must hold In values. It is how
// a backend looks up one embedding without converting the whole table.
func (l *Linear) Row(r int, dst []float32) {
	if r < 0 || r >= l.Out || len(dst) != l.In {
		panic(fmt.Sprintf("model: %s: row %d of %d into %d values", l.Name, r, l.Out, len(dst)))
	}
	if l.Quant == nil {
		sz := l.Weight.DType.Size()
		d, _ := floatDType(l.Weight)
		dtype.Decode(d, dst, l.Weight.Data[r*l.In*sz:(r+1)*l.In*sz])
		return
	}
	q := l.Quant
	groups := l.In / q.GroupSize
	if q.Mode == ModeMXFP4 {
		rowBytes := l.In / 2
		DequantizeMXFP4(dst, l.Weight.Data[r*rowBytes:(r+1)*rowBytes], q.Scales.Data[r*groups:(r+1)*groups])
		return
	}
	ssz := q.Scales.DType.Size()
	sd, _ := floatDType(q.Scales)
	var scales, biases [1024]float32 // groups per row: In <= 2^24, group >= 32 → chunk the groups
	rowBytes := l.In * q.Bits / 8
	packed := l.Weight.Data[r*rowBytes : (r+1)*rowBytes]
	for g0 := 0; g0 < groups; g0 += len(scales) {
		g1 := min(groups, g0+len(scales))
		n := g1 - g0
		off := (r*groups + g0) * ssz
		dtype.Decode(sd, scales[:n], q.Scales.Data[off:off+n*ssz])
		dtype.Decode(sd, biases[:n], q.Biases.Data[off:off+n*ssz])
		gb := q.GroupSize * q.Bits / 8
		Dequantize(dst[g0*q.GroupSize:g1*q.GroupSize], packed[g0*gb:g1*gb], scales[:n], biases[:n], q.Bits, q.GroupSize)
	}
}

// Float32 writes the whole matrix, [Out, In] row-major and dequantized, into dst.
func (l *Linear) Float32(dst []float32) {
	if len(dst) != l.Out*l.In {
		panic(fmt.Sprintf("model: %s: %d×%d matrix into %d values", l.Name, l.Out, l.In, len(dst)))
	}
	for r := 0; r < l.Out; r++ {
		l.Row(r, dst[r*l.In:(r+1)*l.In])
	}
}

// Affine is the value of an affine-quantized weight, scale·q + bias, with the product rounded before the add:
// the conversion forbids the compiler to fuse the two into a multiply-add (which it does on arm64 and GOAMD64=v3,
// depending on how it matched the surrounding code), so every caller gets the same bits on every architecture.
// Dequantize and the CPU backend's decode kernels both compute weights with it.
func Affine(scale, q, bias float32) float32 { return float32(scale*q) + bias }

// Dequantize expands MLX affine-quantized values: packed holds little-endian uint32 words, each carrying 32/bits
// values with the first in the lowest bits; value j of group g is scales[g]*q + biases[g].
//
// It runs on every decode step of a CPU model that keeps its weights stored, so the common widths have their
// own loops: 2 and 4 bits look each value up in the group's table of 4 or 16 expanded values, 8 bits unpacks a
// word at a time. Every path computes a value with Affine, so all give the same bits.
func Dequantize(dst []float32, packed []byte, scales, biases []float32, bits, groupSize int) {
	per := 32 / bits
	mask := uint32(1)<<bits - 1
	if len(dst) != len(scales)*groupSize || len(packed)*8 != len(dst)*bits || len(biases) != len(scales) {
		panic("model: Dequantize: inconsistent sizes")
	}
	gb := groupSize * bits / 8 // bytes per group
	switch {
	case bits == 4 || bits == 2:
		var lut [16]float32
		for g, s := range scales {
			b := biases[g]
			for q := range 1 << bits {
				lut[q] = Affine(s, float32(q), b)
			}
			out := dst[g*groupSize : (g+1)*groupSize]
			words := packed[g*gb : (g+1)*gb]
			for w := 0; w+4 <= len(words); w += 4 {
				word := binary.LittleEndian.Uint32(words[w:])
				o := out[w/4*per : w/4*per+per]
				for k := range o {
					o[k] = lut[word&mask&15]
					word >>= uint(bits)
				}
			}
		}
	case bits == 8:
		for g, s := range scales {
			b := biases[g]
			out := dst[g*groupSize : (g+1)*groupSize]
			words := packed[g*gb : (g+1)*gb]
			for i := 0; i+4 <= len(words); i += 4 {
				o := out[i : i+4 : i+4]
				o[0] = Affine(s, float32(words[i]), b)
				o[1] = Affine(s, float32(words[i+1]), b)
				o[2] = Affine(s, float32(words[i+2]), b)
				o[3] = Affine(s, float32(words[i+3]), b)
			}
		}
	default:
		for g, s := range scales {
			b := biases[g]
			out := dst[g*groupSize : (g+1)*groupSize]
			words := packed[g*gb:]
			for w := 0; w < groupSize/per; w++ {
				word := binary.LittleEndian.Uint32(words[4*w:])
				o := out[w*per : (w+1)*per]
				for k := range o {
					o[k] = Affine(s, float32(word&mask), b)
					word >>= uint(bits)
				}
			}
		}
	}
}

// Quantize produces the format Dequantize reads, with a plain min/max affine quantizer: per group, the bias is
// the group's minimum and the scale spreads the range over 2^bits-1 steps, both rounded by round to the dtype
// they will be stored in before the values are quantized against them, so the stored grid is the one used.
// (MLX's own quantizer anchors the grid on the larger-magnitude edge instead; the loader accepts either.)
func Quantize(src []float32, bits, groupSize int, round func(float32) float32) (packed []byte, scales, biases []float32) {
	if len(src)%groupSize != 0 || groupSize*bits%32 != 0 {
		panic("model: Quantize: size is not a multiple of the group size")
	}
	levels := float32(uint32(1)<<bits - 1)
	groups := len(src) / groupSize
	packed = make([]byte, len(src)*bits/8)
	scales, biases = make([]float32, groups), make([]float32, groups)
	per := 32 / bits
	for g := 0; g < groups; g++ {
		x := src[g*groupSize : (g+1)*groupSize]
		lo, hi := x[0], x[0]
		for _, v := range x {
			lo, hi = min(lo, v), max(hi, v)
		}
		s := round((hi - lo) / levels)
		if s == 0 {
			s = round(float32(math.SmallestNonzeroFloat32))
			if s == 0 {
				s = 1
			}
		}
		b := round(lo)
		scales[g], biases[g] = s, b
		for w := 0; w < groupSize/per; w++ {
			var word uint32
			for k := per - 1; k >= 0; k-- {
				q := float32(math.Round(float64((x[w*per+k] - b) / s)))
				q = min(max(q, 0), levels)
				word = word<<uint(bits) | uint32(q)
			}
			binary.LittleEndian.PutUint32(packed[(g*groupSize/per+w)*4:], word)
		}
	}
	return packed, scales, biases
}

// FP4 are the values of the fp4 (e2m1) codes: bit 3 is the sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
var FP4 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, float32(math.Copysign(0, -1)), -0.5, -1, -1.5, -2, -3, -4, -6}

// E8M0 is the value of an e8m0 scale byte, 2^(s-127) (a float32 subnormal for s = 0); 255 is NaN.
func E8M0(s byte) float32 {
	if s == 255 {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(s)-127))
}

// MXFP4 is the value of an mxfp4 weight: the code's fp4 value times its group's scale (E8M0). The product is
// exact in float32 (a value of at most 3 significant bits times a power of two) until it overflows to ±Inf for
// scales of 2^126 and up, which real weights never use; every path that computes a weight uses this function.
func MXFP4(code byte, scale float32) float32 { return FP4[code&15] * scale }

// DequantizeMXFP4 expands MLX mxfp4 values: packed holds 4-bit codes, two per byte with the first in the low
// nibble (the bytes of MLX's little-endian uint32 words and of openai's "_blocks" alike), in groups of 32 that
// share one e8m0 scale byte.
func DequantizeMXFP4(dst []float32, packed, scales []byte) {
	if len(dst) != 32*len(scales) || 2*len(packed) != len(dst) {
		panic("model: DequantizeMXFP4: inconsistent sizes")
	}
	for g, sb := range scales {
		s := E8M0(sb)
		out := dst[32*g : 32*g+32 : 32*g+32]
		in := packed[16*g : 16*g+16 : 16*g+16]
		for j, b := range in {
			out[2*j] = MXFP4(b, s)
			out[2*j+1] = MXFP4(b>>4, s)
		}
	}
}

// QuantizeMXFP4 produces the format DequantizeMXFP4 reads: per group of 32, the smallest power-of-two scale
// that brings the largest magnitude within fp4's 6, and each value rounded to the nearest fp4 value (ties to
// the smaller magnitude).
func QuantizeMXFP4(src []float32) (packed, scales []byte) {
	if len(src)%32 != 0 {
		panic("model: QuantizeMXFP4: size is not a multiple of 32")
	}
	packed, scales = make([]byte, len(src)/2), make([]byte, len(src)/32)
	for g := range scales {
		x := src[32*g : 32*g+32]
		var amax float64
		for _, v := range x {
			amax = max(amax, math.Abs(float64(v)))
		}
		e := -127
		if amax > 0 {
			e = max(-127, min(127, int(math.Ceil(math.Log2(amax/6)))))
		}
		scales[g] = byte(e + 127)
		s := float64(E8M0(scales[g]))
		for i, v := range x {
			t := float64(v) / s
			best, bestErr := byte(0), math.Inf(1)
			for c := byte(0); c < 16; c++ {
				if d := math.Abs(float64(FP4[c]) - t); d < bestErr {
					best, bestErr = c, d
				}
			}
			packed[16*g+i/2] |= best << (4 * uint(i%2))
		}
	}
	return packed, scales
}

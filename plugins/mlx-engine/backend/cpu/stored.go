package cpu

import (
	"encoding/binary"
	"math"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// Matrices kept as the file stores them (backend.WeightsStored). A prefill step expands a tile of rows with
// model.Linear.Row and runs the float32 kernels on it: the expansion is shared by every row of the step. A
// decode step (one input row, or a batch of up to storedVecRows) would pay for the expansion per weight and
// then read the tile back, so the common formats have kernels that widen or dequantize in registers instead,
// on every kernel path (the vector ones in simd.go). They keep the contract of the
// float32 kernels (one accumulator per output, summed in index order) and widen to the bits Row writes:
// 16-bit values exactly, quantized ones with model.Affine, which model.Dequantize uses too (a table of the
// group's values for 4 bits, one value at a time for 8 bits), mxfp4 ones with model.MXFP4, an exact product of
// the code's e2m1 value and the group's e8m0 scale. So a stored model gives the logits of the
// expanded one bit for bit, batched or not.

// storedKind says which decode kernel a stored matrix has.
type storedKind uint8

const (
	storedTile storedKind = iota // no kernel of its own: expanded by tiles whatever the step
	storedBF16
	storedF16
	storedQ4
	storedQ8
	storedMXFP4
)

// storedMatrix is the part of a linear that is kept as stored.
type storedMatrix struct {
	kind           storedKind
	raw            []byte    // the matrix as stored: 16-bit values, or packed quantized words
	scales, biases []float32 // quantized: [out, in/group], widened once at load (two values per group)
	group          int
}

func newStoredMatrix(l *model.Linear) (storedMatrix, error) {
	s := storedMatrix{raw: l.Weight.Data}
	q := l.Quant
	if q == nil {
		switch l.Weight.DType {
		case safetensors.BF16:
			s.kind = storedBF16
		case safetensors.F16:
			s.kind = storedF16
		}
		return s, nil
	}
	switch q.Mode {
	case model.ModeAffine:
	case model.ModeMXFP4:
		// The e8m0 scales widened once, exactly: a weight is then one table lookup (model.MXFP4).
		s.kind, s.group = storedMXFP4, q.GroupSize
		s.scales = make([]float32, len(q.Scales.Data))
		for i, b := range q.Scales.Data {
			s.scales[i] = model.E8M0(b)
		}
		return s, nil
	default:
		return s, nil // expanded by tiles with model.Linear.Row
	}
	switch q.Bits {
	case 4:
		s.kind = storedQ4
	case 8:
		s.kind = storedQ8
	default:
		return s, nil
	}
	var err error
	if s.scales, err = model.Vector(q.Scales); err != nil {
		return s, err
	}
	if s.biases, err = model.Vector(q.Biases); err != nil {
		return s, err
	}
	s.group = q.GroupSize
	return s, nil
}

// bytes is the memory the matrix reads per pass.
func (s *storedMatrix) bytes() int64 {
	return int64(len(s.raw)) + 4*int64(len(s.scales)+len(s.biases))
}

// vecOK says whether the matrix has a decode kernel on path k that sums as that path's float32 kernels do
// over the expanded rows (matmulRows). One without runs the tile expansion in decode too.
func (s *storedMatrix) vecOK(k kernelPath, in int) bool {
	if s.kind == storedTile {
		return false
	}
	if v := k.simd(in); v != nil {
		// The vector kernels take a register of weights at a time, within one quantization group.
		return s.group%v.lanes == 0
	}
	return true // the Go kernels; also a vector path's for rows that are not a multiple of its lanes long
}

// vecRows computes y[o] = Σ_k x[k]·W[o][k] for o in [o0, o1) of a stored matrix with path k's decode kernel
// (vecOK must hold).
func (s *storedMatrix) vecRows(k kernelPath, y, x []float32, in, o0, o1 int) {
	if v := k.simd(in); v != nil {
		v.vecRows(s, y, x, in, o0, o1)
		return
	}
	s.vecRowsGo(y, x, in, o0, o1)
}

// vecRowsBatch computes y[r][o] = Σ_k x[r][k]·W[o][k] for rows r < rows (x is [rows, in], y [rows, out]) and
// o in [o0, o1) with path k's decode kernels (vecOK must hold). On a vector path each weight is read once for
// all the rows; every output has the bits vecRows gives it.
func (s *storedMatrix) vecRowsBatch(k kernelPath, y, x []float32, rows, in, out, o0, o1 int) {
	if v := k.simd(in); v != nil {
		v.vecRowsBatch(s, y, x, rows, in, out, o0, o1)
		return
	}
	for r := range rows {
		s.vecRowsGo(y[r*out:(r+1)*out], x[r*in:(r+1)*in], in, o0, o1)
	}
}

// vecRowsGo is the Go decode kernel: four outputs at a time (independent accumulators hide the add latency),
// the rest one at a time.
func (s *storedMatrix) vecRowsGo(y, x []float32, in, o0, o1 int) {
	o := o0
	for ; o+4 <= o1; o += 4 {
		y[o], y[o+1], y[o+2], y[o+3] = s.dot4(x, in, o)
	}
	for ; o < o1; o++ {
		y[o] = s.dot1(x, in, o)
	}
}

func (s *storedMatrix) dot4(x []float32, in, o int) (a0, a1, a2, a3 float32) {
	x = x[:in]
	switch s.kind {
	case storedBF16:
		rb := 2 * in
		return dot4bf16(x, s.raw[o*rb:(o+1)*rb], s.raw[(o+1)*rb:(o+2)*rb], s.raw[(o+2)*rb:(o+3)*rb], s.raw[(o+3)*rb:(o+4)*rb])
	case storedF16:
		rb := 2 * in
		return dot4f16(x, s.raw[o*rb:(o+1)*rb], s.raw[(o+1)*rb:(o+2)*rb], s.raw[(o+2)*rb:(o+3)*rb], s.raw[(o+3)*rb:(o+4)*rb])
	case storedQ4:
		return s.dot4q4Rows(x, in, o, o+1, o+2, o+3)
	case storedMXFP4:
		return s.dot4mxfp4Rows(x, in, o, o+1, o+2, o+3)
	default: // storedQ8
		return s.dot4q8Rows(x, in, o, o+1, o+2, o+3)
	}
}

// dot1 is one output: the four-row kernels with the row repeated, so that it is the same sum.
func (s *storedMatrix) dot1(x []float32, in, o int) float32 {
	var a float32
	switch s.kind {
	case storedBF16:
		w := s.raw[2*in*o : 2*in*(o+1)]
		a, _, _, _ = dot4bf16(x[:in], w, w, w, w)
	case storedF16:
		w := s.raw[2*in*o : 2*in*(o+1)]
		a, _, _, _ = dot4f16(x[:in], w, w, w, w)
	case storedQ4:
		a, _, _, _ = s.dot4q4Rows(x, in, o, o, o, o)
	case storedQ8:
		a, _, _, _ = s.dot4q8Rows(x, in, o, o, o, o)
	case storedMXFP4:
		a, _, _, _ = s.dot4mxfp4Rows(x, in, o, o, o, o)
	}
	return a
}

// dot4bf16 returns the dot products of x with four bfloat16 rows.
func dot4bf16(x []float32, w0, w1, w2, w3 []byte) (a0, a1, a2, a3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:2*n], w1[:2*n], w2[:2*n], w3[:2*n]
	for k, v := range x {
		a0 += float32(v * math.Float32frombits(uint32(w0[2*k])<<16|uint32(w0[2*k+1])<<24))
		a1 += float32(v * math.Float32frombits(uint32(w1[2*k])<<16|uint32(w1[2*k+1])<<24))
		a2 += float32(v * math.Float32frombits(uint32(w2[2*k])<<16|uint32(w2[2*k+1])<<24))
		a3 += float32(v * math.Float32frombits(uint32(w3[2*k])<<16|uint32(w3[2*k+1])<<24))
	}
	return
}

// dot4f16 returns the dot products of x with four float16 rows, widened through the table the cache uses
// (exact, branch-free; weights cluster around a few exponents, so the entries in use stay in cache).
func dot4f16(x []float32, w0, w1, w2, w3 []byte) (a0, a1, a2, a3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:2*n], w1[:2*n], w2[:2*n], w3[:2*n]
	t := f16Table
	for k, v := range x {
		a0 += float32(v * t[uint16(w0[2*k])|uint16(w0[2*k+1])<<8])
		a1 += float32(v * t[uint16(w1[2*k])|uint16(w1[2*k+1])<<8])
		a2 += float32(v * t[uint16(w2[2*k])|uint16(w2[2*k+1])<<8])
		a3 += float32(v * t[uint16(w3[2*k])|uint16(w3[2*k+1])<<8])
	}
	return
}

// dot4q8Rows returns the dot products of x with four 8-bit rows (which may repeat).
func (s *storedMatrix) dot4q8Rows(x []float32, in, r0, r1, r2, r3 int) (a0, a1, a2, a3 float32) {
	groups := in / s.group
	p0, p1, p2, p3 := s.raw[r0*in:(r0+1)*in], s.raw[r1*in:(r1+1)*in], s.raw[r2*in:(r2+1)*in], s.raw[r3*in:(r3+1)*in]
	for g := range groups {
		s0, b0 := s.scales[r0*groups+g], s.biases[r0*groups+g]
		s1, b1 := s.scales[r1*groups+g], s.biases[r1*groups+g]
		s2, b2 := s.scales[r2*groups+g], s.biases[r2*groups+g]
		s3, b3 := s.scales[r3*groups+g], s.biases[r3*groups+g]
		lo, hi := g*s.group, (g+1)*s.group
		xg := x[lo:hi]
		q0, q1, q2, q3 := p0[lo:hi], p1[lo:hi], p2[lo:hi], p3[lo:hi]
		q0, q1, q2, q3 = q0[:len(xg)], q1[:len(xg)], q2[:len(xg)], q3[:len(xg)]
		for k, v := range xg {
			a0 += float32(v * model.Affine(s0, float32(q0[k]), b0))
			a1 += float32(v * model.Affine(s1, float32(q1[k]), b1))
			a2 += float32(v * model.Affine(s2, float32(q2[k]), b2))
			a3 += float32(v * model.Affine(s3, float32(q3[k]), b3))
		}
	}
	return
}

// dot4q4Rows returns the dot products of x with four 4-bit rows (which may repeat). Each group's 16 values per
// row are expanded into a table first, as model.Dequantize does, so a weight costs a shift, a mask and a load.
func (s *storedMatrix) dot4q4Rows(x []float32, in, r0, r1, r2, r3 int) (a0, a1, a2, a3 float32) {
	groups := in / s.group
	rb := in / 2
	p0, p1, p2, p3 := s.raw[r0*rb:(r0+1)*rb], s.raw[r1*rb:(r1+1)*rb], s.raw[r2*rb:(r2+1)*rb], s.raw[r3*rb:(r3+1)*rb]
	var t0, t1, t2, t3 [16]float32
	gb := s.group / 2
	for g := range groups {
		fill := func(t *[16]float32, r int) {
			sc, bi := s.scales[r*groups+g], s.biases[r*groups+g]
			for q := range t {
				t[q] = model.Affine(sc, float32(q), bi)
			}
		}
		fill(&t0, r0)
		fill(&t1, r1)
		fill(&t2, r2)
		fill(&t3, r3)
		xg := x[g*s.group : (g+1)*s.group]
		q0, q1, q2, q3 := p0[g*gb:(g+1)*gb], p1[g*gb:(g+1)*gb], p2[g*gb:(g+1)*gb], p3[g*gb:(g+1)*gb]
		for w := 0; w+4 <= gb; w += 4 {
			u0 := binary.LittleEndian.Uint32(q0[w:])
			u1 := binary.LittleEndian.Uint32(q1[w:])
			u2 := binary.LittleEndian.Uint32(q2[w:])
			u3 := binary.LittleEndian.Uint32(q3[w:])
			xs := xg[2*w : 2*w+8 : 2*w+8]
			for j := range xs {
				v := xs[j]
				a0 += float32(v * t0[u0&15])
				a1 += float32(v * t1[u1&15])
				a2 += float32(v * t2[u2&15])
				a3 += float32(v * t3[u3&15])
				u0, u1, u2, u3 = u0>>4, u1>>4, u2>>4, u3>>4
			}
		}
	}
	return
}

// dot4mxfp4Rows returns the dot products of x with four mxfp4 rows (which may repeat). Each group's 16 values
// per row go into a table first (model.MXFP4, the value Row writes), two codes a byte, low nibble first.
func (s *storedMatrix) dot4mxfp4Rows(x []float32, in, r0, r1, r2, r3 int) (a0, a1, a2, a3 float32) {
	groups := in / 32
	rb := in / 2
	p0, p1, p2, p3 := s.raw[r0*rb:(r0+1)*rb], s.raw[r1*rb:(r1+1)*rb], s.raw[r2*rb:(r2+1)*rb], s.raw[r3*rb:(r3+1)*rb]
	var t0, t1, t2, t3 [16]float32
	for g := range groups {
		fill := func(t *[16]float32, r int) {
			sc := s.scales[r*groups+g]
			for c := range t {
				t[c] = model.MXFP4(byte(c), sc)
			}
		}
		fill(&t0, r0)
		fill(&t1, r1)
		fill(&t2, r2)
		fill(&t3, r3)
		xg := x[32*g : 32*g+32 : 32*g+32]
		q0, q1, q2, q3 := p0[16*g:16*g+16], p1[16*g:16*g+16], p2[16*g:16*g+16], p3[16*g:16*g+16]
		for j := range 16 {
			lo, hi := xg[2*j], xg[2*j+1]
			b0, b1, b2, b3 := q0[j], q1[j], q2[j], q3[j]
			a0 += float32(lo * t0[b0&15])
			a1 += float32(lo * t1[b1&15])
			a2 += float32(lo * t2[b2&15])
			a3 += float32(lo * t3[b3&15])
			a0 += float32(hi * t0[b0>>4])
			a1 += float32(hi * t1[b1>>4])
			a2 += float32(hi * t2[b2>>4])
			a3 += float32(hi * t3[b3>>4])
		}
	}
	return
}

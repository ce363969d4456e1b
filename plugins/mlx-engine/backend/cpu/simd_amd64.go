package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

// hasAVX2 says whether the AVX2 kernels can run: they use AVX2, FMA and (for float16 weights) F16C.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// matmulRowsAVX2 is matmulRows on the AVX2 path (in a positive multiple of 8). One input row (decode) runs
// eight weight rows at a time; more rows run tiles of 4 weight rows × 3 input rows (12 accumulators), each
// quad of weight rows staying in L1 while every input row passes. All tiles sum an output the same way.
func matmulRowsAVX2(y, x, w []float32, rows, in, out, o0, o1 int) {
	if rows <= 0 || o1 <= o0 {
		return
	}
	// The kernels read and write through pointers: check the extent of every operand once.
	_ = w[(o1-o0)*in-1]
	_ = x[rows*in-1]
	_ = y[(rows-1)*out+o1-1]
	if rows == 1 {
		xp := &x[0]
		o := o0
		for ; o+8 <= o1; o += 8 {
			f32Dot8x1(&y[o], 0, xp, &w[(o-o0)*in], in)
		}
		for ; o+4 <= o1; o += 4 {
			f32Dot4x1(&y[o], 0, xp, &w[(o-o0)*in], in)
		}
		for ; o < o1; o++ {
			f32Dot1x1(&y[o], 0, xp, &w[(o-o0)*in], in)
		}
		return
	}
	o := o0
	for ; o+4 <= o1; o += 4 {
		wp := &w[(o-o0)*in]
		r := 0
		for ; r+3 <= rows; r += 3 {
			f32Dot4x3(&y[r*out+o], out, &x[r*in], wp, in)
		}
		switch rows - r {
		case 2:
			f32Dot4x2(&y[r*out+o], out, &x[r*in], wp, in)
		case 1:
			f32Dot4x1(&y[r*out+o], 0, &x[r*in], wp, in)
		}
	}
	for ; o < o1; o++ {
		wp := &w[(o-o0)*in]
		for r := range rows {
			f32Dot1x1(&y[r*out+o], 0, &x[r*in], wp, in)
		}
	}
}

// vecRowsAVX2 is vecRows on the AVX2 path for a matrix that vecOK accepts: four rows at a time, the last
// ones with a row repeated (stride 0), widened or dequantized in registers.
func (s *storedMatrix) vecRowsAVX2(y, x []float32, in, o0, o1 int) {
	o := o0
	for ; o+4 <= o1; o += 4 {
		s.dot4AVX2(y[o:o+4], x, in, o, 1)
	}
	var t [4]float32
	for ; o < o1; o++ {
		s.dot4AVX2(t[:], x, in, o, 0)
		y[o] = t[0]
	}
}

// dot4AVX2 writes the dot products of x with rows o, o+stride, o+2·stride and o+3·stride into dst[:4].
func (s *storedMatrix) dot4AVX2(dst, x []float32, in, o, stride int) {
	_ = dst[3]
	_ = x[in-1]
	switch s.kind {
	case storedBF16, storedF16:
		rb := 2 * in
		_ = s.raw[(o+3*stride+1)*rb-1]
		if s.kind == storedBF16 {
			bf16Dot4x1(&dst[0], &x[0], &s.raw[o*rb], stride*rb, in)
		} else {
			f16Dot4x1(&dst[0], &x[0], &s.raw[o*rb], stride*rb, in)
		}
	case storedQ4, storedQ8:
		rb := in / 2 // bytes per row
		if s.kind == storedQ8 {
			rb = in
		}
		groups := in / s.group
		_ = s.raw[(o+3*stride+1)*rb-1]
		_ = s.scales[(o+3*stride+1)*groups-1]
		_ = s.biases[(o+3*stride+1)*groups-1]
		if s.kind == storedQ4 {
			q4Dot4x1(&dst[0], &x[0], &s.raw[o*rb], stride*rb, &s.scales[o*groups], &s.biases[o*groups], 4*stride*groups, in, s.group)
		} else {
			q8Dot4x1(&dst[0], &x[0], &s.raw[o*rb], stride*rb, &s.scales[o*groups], &s.biases[o*groups], 4*stride*groups, in, s.group)
		}
	}
}

// readAll reads every byte of b (but a tail under 128 bytes) with vector loads: see readBandwidth.
func readAll(b []byte) uint64 {
	if n := len(b) &^ 127; n > 0 {
		return readBytes(&b[0], n)
	}
	return 0
}

// attendHeadAVX2 is attendHead on the AVX2 path (head_dim a multiple of 8): scores with the decode kernel
// (the keys are rows of a matrix), the softmax as on the Go path, the weighted sum of values with f32Axpy.
func attendHeadAVX2(out, q, k, v, scores []float32, scale float32) {
	hd, n := len(q), len(scores)
	matmulRowsAVX2(scores, q, k, 1, hd, n, 0, n)
	mx := float32(math.Inf(-1))
	for i := range scores {
		scores[i] *= scale
		mx = max(mx, scores[i])
	}
	var sum float32
	for i, sc := range scores {
		e := float32(math.Exp(float64(sc - mx)))
		scores[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range scores {
		scores[i] *= inv
	}
	_ = v[n*hd-1]
	_ = out[hd-1]
	d := 0
	for ; d+32 <= hd; d += 32 {
		f32Axpy32(&out[d], &v[d], hd, &scores[0], n)
	}
	for ; d < hd; d += 8 {
		f32Axpy8(&out[d], &v[d], hd, &scores[0], n)
	}
}

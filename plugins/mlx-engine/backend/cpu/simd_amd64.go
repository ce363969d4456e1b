package cpu

import "golang.org/x/sys/cpu"

// simdKernels holds the vector paths this CPU can run, chosen once from its features.
var simdKernels = func() (k [3]simdSet) {
	x := cpu.X86
	if !x.HasAVX2 || !x.HasFMA || !x.HasF16C {
		return k
	}
	k[pathAVX2] = simdSet{
		lanes: 8,
		dot:   []func(*float32, int, *float32, *float32, int){f32Dot4x1, f32Dot4x2, f32Dot4x3},
		dot8:  f32Dot8x1, dot1: f32Dot1x1,
		bf16: bf16Dot4x1, f16: f16Dot4x1, q8: q8Dot4x1, q4: q4Dot4x1,
		axpyWide: 32, wide: f32Axpy32, narrow: f32Axpy8, silu: f32SiLU, exp: f32ExpShift,
		delta4: f32DeltaRows4, delta1: f32DeltaRows1,
		bf16x: []func(*float32, int, *float32, *byte, int){
			bf16Dot1x1, bf16Dot1x2, bf16Dot1x3, bf16Dot1x4, bf16Dot1x5, bf16Dot1x6, bf16Dot1x7, bf16Dot1x8},
		f16x: []func(*float32, int, *float32, *byte, int){
			f16Dot1x1, f16Dot1x2, f16Dot1x3, f16Dot1x4, f16Dot1x5, f16Dot1x6, f16Dot1x7, f16Dot1x8},
		q8x: []func(*float32, int, *float32, *byte, *float32, *float32, int, int){
			q8Dot1x1, q8Dot1x2, q8Dot1x3, q8Dot1x4, q8Dot1x5, q8Dot1x6, q8Dot1x7, q8Dot1x8},
		q4x: []func(*float32, int, *float32, *byte, *float32, *float32, int, int){
			q4Dot1x1, q4Dot1x2, q4Dot1x3, q4Dot1x4, q4Dot1x5, q4Dot1x6, q4Dot1x7, q4Dot1x8},
		fp4: fp4Dot4x1,
		fp4x: []func(*float32, int, *float32, *byte, *float32, *float32, int, int){
			fp4Dot1x1, fp4Dot1x2, fp4Dot1x3, fp4Dot1x4, fp4Dot1x5, fp4Dot1x6, fp4Dot1x7, fp4Dot1x8},
	}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VBMI {
		k[pathAVX512] = simdSet{
			lanes: 16,
			dot: []func(*float32, int, *float32, *float32, int){
				f32Dot4x1Z, f32Dot4x2Z, f32Dot4x3Z, f32Dot4x4Z, f32Dot4x5Z, f32Dot4x6Z},
			dot8: f32Dot8x1Z, dot1: f32Dot1x1Z,
			bf16: bf16Dot4x1Z, f16: f16Dot4x1Z, q8: q8Dot4x1Z, q4quads: q4Dot4x1Z,
			axpyWide: 32, wide: f32Axpy32Z, narrow: f32Axpy16Z, silu: f32SiLUZ, exp: f32ExpShiftZ,
			// The AVX2 kernel: a state row (Dk = 128) is 8 ymm loads, and a zmm version would only halve a
			// loop that the reductions and the row's stores already share with.
			delta4: f32DeltaRows4, delta1: f32DeltaRows1,
			bf16x: []func(*float32, int, *float32, *byte, int){
				bf16Dot1x1Z, bf16Dot1x2Z, bf16Dot1x3Z, bf16Dot1x4Z, bf16Dot1x5Z, bf16Dot1x6Z, bf16Dot1x7Z, bf16Dot1x8Z},
			f16x: []func(*float32, int, *float32, *byte, int){
				f16Dot1x1Z, f16Dot1x2Z, f16Dot1x3Z, f16Dot1x4Z, f16Dot1x5Z, f16Dot1x6Z, f16Dot1x7Z, f16Dot1x8Z},
			q8x: []func(*float32, int, *float32, *byte, *float32, *float32, int, int){
				q8Dot1x1Z, q8Dot1x2Z, q8Dot1x3Z, q8Dot1x4Z, q8Dot1x5Z, q8Dot1x6Z, q8Dot1x7Z, q8Dot1x8Z},
			q4x: []func(*float32, int, *float32, *byte, *float32, *float32, int, int){
				q4Dot1x1Z, q4Dot1x2Z, q4Dot1x3Z, q4Dot1x4Z, q4Dot1x5Z, q4Dot1x6Z, q4Dot1x7Z, q4Dot1x8Z},
			fp4: fp4Dot4x1Z,
			fp4x: []func(*float32, int, *float32, *byte, *float32, *float32, int, int){
				fp4Dot1x1Z, fp4Dot1x2Z, fp4Dot1x3Z, fp4Dot1x4Z, fp4Dot1x5Z, fp4Dot1x6Z, fp4Dot1x7Z, fp4Dot1x8Z},
		}
	}
	return k
}()

// readAll reads every byte of b (but a tail under 128 bytes) with vector loads: see readBandwidth.
func readAll(b []byte) uint64 {
	if n := len(b) &^ 127; n > 0 && simdKernels[pathAVX2].lanes > 0 {
		return readBytes(&b[0], n)
	}
	return readAllGo(b)
}

// widenBF16 widens src into dst (as long) with bf16Widen on a vector path, and reports whether it did (the
// Go path, and lengths that are not a multiple of 8, widen in Go: the same bits).
func widenBF16(k kernelPath, dst []float32, src []uint16) bool {
	n := len(src)
	if k == pathGo || n%8 != 0 || simdKernels[pathAVX2].lanes == 0 {
		return false
	}
	if n > 0 {
		_ = dst[n-1]
		bf16Widen(&dst[0], &src[0], n)
	}
	return true
}

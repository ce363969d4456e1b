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
		axpyWide: 32, wide: f32Axpy32, narrow: f32Axpy8,
	}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VBMI {
		k[pathAVX512] = simdSet{
			lanes: 16,
			dot: []func(*float32, int, *float32, *float32, int){
				f32Dot4x1Z, f32Dot4x2Z, f32Dot4x3Z, f32Dot4x4Z, f32Dot4x5Z, f32Dot4x6Z},
			dot8: f32Dot8x1Z, dot1: f32Dot1x1Z,
			bf16: bf16Dot4x1Z, f16: f16Dot4x1Z, q8: q8Dot4x1Z, q4: q4Dot4x1Z,
			axpyWide: 32, wide: f32Axpy32Z, narrow: f32Axpy16Z,
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

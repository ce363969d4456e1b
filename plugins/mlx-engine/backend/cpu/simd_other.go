//go:build !amd64

package cpu

import "encoding/binary"

const hasAVX2 = false

func matmulRowsAVX2(y, x, w []float32, rows, in, out, o0, o1 int) { panic("cpu: no AVX2 kernels here") }

func (s *storedMatrix) vecRowsAVX2(y, x []float32, in, o0, o1 int) {
	panic("cpu: no AVX2 kernels here")
}

// readAll reads every byte of b (but a tail under 8 bytes), 64 bits at a time: see readBandwidth.
func readAll(b []byte) uint64 {
	var s uint64
	for i := 0; i+8 <= len(b); i += 8 {
		s ^= binary.LittleEndian.Uint64(b[i:])
	}
	return s
}

func attendHeadAVX2(out, q, k, v, scores []float32, scale float32) {
	panic("cpu: no AVX2 kernels here")
}

//go:build !amd64

package cpu

const hasAVX2 = false

func matmulRowsAVX2(y, x, w []float32, rows, in, out, o0, o1 int) { panic("cpu: no AVX2 kernels here") }

func (s *storedMatrix) vecRowsAVX2(y, x []float32, in, o0, o1 int) {
	panic("cpu: no AVX2 kernels here")
}

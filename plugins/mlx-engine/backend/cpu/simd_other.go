//go:build !amd64

package cpu

// simdKernels is empty: only the Go kernels run here.
var simdKernels [3]simdSet

// readAll reads every byte of b (but a tail under 8 bytes): see readBandwidth.
func readAll(b []byte) uint64 { return readAllGo(b) }

// widenBF16 reports false: bfloat16 values are widened in Go here.
func widenBF16(kernelPath, []float32, []uint16) bool { return false }

package cpu

import (
	"fmt"
	"testing"
)

func BenchmarkMatmulKernel(b *testing.B) {
	for _, tc := range []struct{ rows, in, out int }{{1, 4096, 4096}, {4, 4096, 4096}, {64, 768, 2048}} {
		b.Run(fmt.Sprintf("%dx%dx%d", tc.rows, tc.in, tc.out), func(b *testing.B) {
			x := make([]float32, tc.rows*tc.in)
			w := make([]float32, tc.in*tc.out)
			y := make([]float32, tc.rows*tc.out)
			for i := range w {
				w[i] = float32(i%7) * 0.1
			}
			for i := range x {
				x[i] = float32(i%5) * 0.1
			}
			b.SetBytes(int64(len(w)) * 4)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				matmulRows(y, x, w, tc.rows, tc.in, tc.out, 0, tc.out)
			}
			b.ReportMetric(float64(tc.rows*tc.in*tc.out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}

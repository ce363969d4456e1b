package cpu

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
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
				matmulRowsGo(y, x, w, tc.rows, tc.in, tc.out, 0, tc.out)
			}
			b.ReportMetric(float64(tc.rows*tc.in*tc.out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}

// BenchmarkWeightFormats is the measurement behind keeping every matrix as float32: a matrix-vector product
// over the same 4096×4096 matrix stored as float32 (the backend's kernel), as bfloat16 widened in the inner
// loop, and as MLX 4-bit groups of 32 unpacked in the inner loop. Compare GMAC/s (compute per core) with
// MB/s (bytes of weights streamed): the 16- and 4-bit loops read fewer bytes but do more work per weight.
// GMAC/cpu-s divides by the thread's CPU time instead of the wall clock, which stays meaningful on a busy machine.
func BenchmarkWeightFormats(b *testing.B) {
	const in, out = 4096, 4096
	x := make([]float32, in)
	for i := range x {
		x[i] = float32(i%5) * 0.1
	}
	y := make([]float32, out)
	f32 := make([]float32, in*out)
	bf16 := make([]uint16, in*out)
	q4 := make([]uint32, in*out/8)
	scales, biases := make([]float32, in*out/32), make([]float32, in*out/32)
	for i := range f32 {
		f32[i] = float32(i%7) * 0.1
		bf16[i] = uint16(math.Float32bits(f32[i]) >> 16)
	}
	for i := range q4 {
		q4[i] = uint32(i) * 2654435761
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu0 time.Duration
	report := func(b *testing.B, bytes int) {
		b.SetBytes(int64(bytes))
		b.ReportMetric(float64(in*out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		if cpu := threadCPUTime() - cpu0; cpu > 0 {
			b.ReportMetric(float64(in*out)*float64(b.N)/cpu.Seconds()/1e9, "GMAC/cpu-s")
		}
	}
	b.Run("float32", func(b *testing.B) {
		runtime.LockOSThread()
		cpu0 = threadCPUTime()
		for i := 0; i < b.N; i++ {
			matmulRowsGo(y, x, f32, 1, in, out, 0, out)
		}
		report(b, 4*in*out)
	})
	b.Run("bfloat16", func(b *testing.B) {
		runtime.LockOSThread()
		cpu0 = threadCPUTime()
		for i := 0; i < b.N; i++ {
			for o := 0; o < out; o++ {
				w := bf16[o*in : (o+1)*in]
				var s0, s1, s2, s3 float32
				for k := 0; k+4 <= in; k += 4 {
					ws, xs := w[k:k+4:k+4], x[k:k+4:k+4]
					s0 += xs[0] * math.Float32frombits(uint32(ws[0])<<16)
					s1 += xs[1] * math.Float32frombits(uint32(ws[1])<<16)
					s2 += xs[2] * math.Float32frombits(uint32(ws[2])<<16)
					s3 += xs[3] * math.Float32frombits(uint32(ws[3])<<16)
				}
				y[o] = s0 + s1 + s2 + s3
			}
		}
		report(b, 2*in*out)
	})
	b.Run("q4-g32", func(b *testing.B) {
		// Σ_k x_k (s·q_k + b) = s·Σ x_k q_k + b·Σ x_k, with Σ x_k per group computed once per input.
		xsum := make([]float32, in/32)
		runtime.LockOSThread()
		cpu0 = threadCPUTime()
		for i := 0; i < b.N; i++ {
			for g := range xsum {
				var s float32
				for _, v := range x[g*32 : g*32+32] {
					s += v
				}
				xsum[g] = s
			}
			for o := 0; o < out; o++ {
				words := q4[o*in/8 : (o+1)*in/8]
				var acc float32
				for g := 0; g < in/32; g++ {
					var s0, s1 float32
					xs := x[g*32 : g*32+32 : g*32+32]
					ws := words[g*4 : g*4+4 : g*4+4]
					for j, w := range ws {
						xx := xs[j*8 : j*8+8 : j*8+8]
						s0 += xx[0]*float32(w&15) + xx[2]*float32(w>>8&15) + xx[4]*float32(w>>16&15) + xx[6]*float32(w>>24&15)
						s1 += xx[1]*float32(w>>4&15) + xx[3]*float32(w>>12&15) + xx[5]*float32(w>>20&15) + xx[7]*float32(w>>28)
					}
					acc += scales[o*in/32+g]*(s0+s1) + biases[o*in/32+g]*xsum[g]
				}
				y[o] = acc
			}
		}
		report(b, in*out/2+2*4*in*out/32)
	})
}

// BenchmarkStoredKernels measures the decode kernels of each stored format on each path this CPU has, at 1
// and 8 input rows, on a 2048×768 matrix (an MLP projection of the 100M model) that stays in L2: the
// kernels' compute rate (GMAC/cpu-s), apart from memory bandwidth.
//
//	go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench StoredKernels
func BenchmarkStoredKernels(b *testing.B) {
	const in, out, group = 768, 2048, 64
	x := make([]float32, storedVecRows*in)
	for i := range x {
		x[i] = float32(i%5) * 0.1
	}
	y := make([]float32, storedVecRows*out)
	f32 := make([]float32, out*in)
	for i := range f32 {
		f32[i] = float32(i%7) * 0.1
	}
	mats := map[string]storedMatrix{
		"bf16":  {kind: storedBF16, raw: make([]byte, 2*out*in)},
		"q8":    {kind: storedQ8, raw: make([]byte, out*in), group: group},
		"q4":    {kind: storedQ4, raw: make([]byte, out*in/2), group: group},
		"mxfp4": {kind: storedMXFP4, raw: make([]byte, out*in/2), group: 32},
	}
	for name, m := range mats {
		for i := range m.raw {
			m.raw[i] = byte(i * 131)
		}
		if m.group > 0 {
			m.scales, m.biases = make([]float32, out*in/m.group), make([]float32, out*in/m.group)
			for i := range m.scales {
				m.scales[i], m.biases[i] = 0.01, -0.05
			}
		}
		mats[name] = m
	}
	for _, k := range kernelPaths() {
		for _, rows := range []int{1, storedVecRows} {
			for _, name := range []string{"f32", "bf16", "q8", "q4", "mxfp4"} {
				b.Run(fmt.Sprintf("%s/rows=%d/%s", k, rows, name), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					m := mats[name]
					cpu0 := threadCPUTime()
					for range b.N {
						if name == "f32" {
							matmulRows(k, y, x, f32, rows, in, out, 0, out)
						} else {
							m.vecRowsBatch(k, y, x, rows, in, out, 0, out)
						}
					}
					if cpu := threadCPUTime() - cpu0; cpu > 0 {
						b.ReportMetric(float64(rows*in*out)*float64(b.N)/cpu.Seconds()/1e9, "GMAC/cpu-s")
					}
				})
			}
		}
	}
}

// BenchmarkQ4Stream measures the 4-bit decode kernels where decode runs them: on matrices of MoE2B's shapes
// (an expert's gate/up 512×1024 and down 1024×512, the dense model's MLP 2048×1024 and 1024×2048), group 64,
// streamed from memory (copies of the matrix adding up to 128 MB, each read once per op), split over the
// threads in tasks of 32 weight rows as matmul splits them. Each op is paired with a read of as many bytes
// with as many threads right before it (readAll, the bound of BenchmarkMoE): GB/s is the kernel's rate in
// bytes of the matrix as stored (packed weights, scales and biases), of-read its ratio to the paired read.
//
//	flock /tmp/duet-heavy.lock go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench Q4Stream -benchtime 20x
func BenchmarkQ4Stream(b *testing.B) {
	const total, group = 128 << 20, 64
	buf := make([]byte, total)
	for i := range buf {
		buf[i] = byte(i * 131)
	}
	for _, k := range kernelPaths()[1:] {
		for _, sh := range []struct {
			name    string
			out, in int
		}{{"expert-up-512x1024", 512, 1024}, {"expert-down-1024x512", 1024, 512}, {"dense-up-2048x1024", 2048, 1024}, {"dense-down-1024x2048", 1024, 2048}} {
			per := sh.out * sh.in / 2
			mats := make([]storedMatrix, total/(per+per/4))
			for i := range mats {
				raw := buf[i*per : (i+1)*per]
				sc := make([]float32, sh.out*sh.in/group)
				bi := make([]float32, len(sc))
				for j := range sc {
					sc[j], bi[j] = 0.01*float32(j%7+1), -0.05
				}
				mats[i] = storedMatrix{kind: storedQ4, raw: raw, scales: sc, biases: bi, group: group}
			}
			bytes := int64(len(mats)) * mats[0].bytes()
			for _, threads := range []int{1, 2} {
				for _, rows := range []int{1, 4} {
					b.Run(fmt.Sprintf("%s/%s/threads=%d/rows=%d", k, sh.name, threads, rows), func(b *testing.B) {
						p := newPool(threads)
						defer p.close()
						x := make([]float32, rows*sh.in)
						for i := range x {
							x[i] = float32(i%5) * 0.1
						}
						ys := make([][]float32, threads)
						for i := range ys {
							ys[i] = make([]float32, rows*sh.out)
						}
						const chunk = 32
						tasks := sh.out / chunk
						var kern, read time.Duration
						for range b.N {
							r0 := time.Now()
							p.run(threads, 1, func(_, lo, _ int) { readAll(buf[lo*total/threads : (lo+1)*total/threads][:bytes/int64(threads)]) })
							k0 := time.Now()
							p.run(len(mats)*tasks, 1, func(w, lo, hi int) {
								for t := lo; t < hi; t++ {
									m, o0 := &mats[t/tasks], t%tasks*chunk
									m.vecRowsBatch(k, ys[w], x, rows, sh.in, sh.out, o0, o0+chunk)
								}
							})
							read += k0.Sub(r0)
							kern += time.Since(k0)
						}
						b.ReportMetric(float64(bytes)*float64(b.N)/kern.Seconds()/1e9, "GB/s")
						b.ReportMetric(float64(bytes)*float64(b.N)/read.Seconds()/1e9, "read-GB/s")
						b.ReportMetric(read.Seconds()/kern.Seconds(), "of-read")
					})
				}
			}
		}
	}
}

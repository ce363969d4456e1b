package cpu

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// BenchmarkModel measures prefill and decode throughput of the embedded model and a generated ~100M-parameter
// float32 model, and compares decode with the machine's memory-bandwidth bound measured in the same run:
//
//	bound (tokens/s) = read bandwidth (bytes read per second, all threads) / bytes of weights read per token
//
// Decode is memory-bound: each step streams every weight matrix once (the float32 matrices the backend holds,
// whatever the file's dtype). The read bandwidth is measured right before each decode measurement, with as
// many threads as the backend uses, so that the ratio holds even on a machine whose load changes. Metrics:
// tok/s, bound-tok/s, of-bound (the ratio; the target is >= 0.9 for float32), read-GB/s, weights-MB,
// GMAC/cpu-s (matrix work per CPU-second over all threads: efficiency independent of machine load) and
// peak-RSS-MB (the process's resident high-water mark during that sub-benchmark: weights, caches,
// activations and the Go runtime; Linux only).
//
//	go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench Model -benchtime 3s
func BenchmarkModel(b *testing.B) {
	for _, tc := range backendtest.BenchModels() {
		b.Run(tc.Name, func(b *testing.B) {
			bm := backendtest.Load(b, Backend{}, backendtest.Generate(b, tc.Options), backend.Options{})
			weights := weightBytesPerToken(bm.(*cpuModel))
			macs := float64(weights / 4) // multiply-adds per token in the matrix products
			p := tc.BenchPrompt(bm.VocabSize())

			b.Run(fmt.Sprintf("prefill-%d", tc.Prefill), func(b *testing.B) {
				var cpu0 time.Duration
				backendtest.BenchPrefill(b, bm, p[:tc.Prefill], func() {
					resetPeakRSS()
					cpu0 = processCPUTime()
				})
				reportCPU(b, cpu0, float64(tc.Prefill*b.N)*macs)
				b.ReportMetric(peakRSSMB(), "peak-RSS-MB")
			})
			for _, batch := range []int{1, 8} {
				b.Run(fmt.Sprintf("decode-batch%d", batch), func(b *testing.B) {
					var readBW float64
					var cpu0 time.Duration
					tps, _ := backendtest.BenchDecode(b, bm, p, batch, func() {
						readBW = readBandwidth(runtime.GOMAXPROCS(0))
						resetPeakRSS()
						cpu0 = processCPUTime()
					})
					reportCPU(b, cpu0, float64(batch*b.N)*macs)
					if batch == 1 {
						bound := readBW / float64(weights)
						b.ReportMetric(bound, "bound-tok/s")
						b.ReportMetric(tps/bound, "of-bound")
						b.ReportMetric(readBW/1e9, "read-GB/s")
						b.ReportMetric(float64(weights)/1e6, "weights-MB")
					}
					b.ReportMetric(peakRSSMB(), "peak-RSS-MB")
				})
			}
		})
	}
}

// reportCPU reports the matrix multiply-adds done per second of CPU time (all threads): how efficiently the
// backend computes, independent of how much of a shared machine it got.
func reportCPU(b *testing.B, cpu0 time.Duration, macs float64) {
	if cpu := processCPUTime() - cpu0; cpu > 0 {
		b.ReportMetric(macs/cpu.Seconds()/1e9, "GMAC/cpu-s")
	}
}

// weightBytesPerToken is what one decode step reads: every matrix once, as the backend holds it (norm vectors
// are negligible; the embedding lookup reads one row).
func weightBytesPerToken(m *cpuModel) int64 {
	size := func(w linear) int64 {
		if w.src == nil {
			return 4 * int64(len(w.w))
		}
		if w.st.kind != storedTile {
			return w.st.bytes()
		}
		n := int64(len(w.src.Weight.Data))
		if q := w.src.Quant; q != nil {
			n += int64(len(q.Scales.Data) + len(q.Biases.Data))
		}
		return n
	}
	n := size(m.lmHead)
	for _, l := range m.layers {
		for _, w := range tokenMatrices(l) {
			n += size(w)
		}
	}
	return n
}

// tokenMatrices are the matrices of layer l that one token reads: attention's or the linear block's
// projections, and the MLP's or the active experts' (absent ones are zero-sized).
func tokenMatrices(l layer) []linear {
	ws := []linear{l.q, l.k, l.v, l.o, l.gate, l.up, l.down}
	if l.lin != nil {
		for _, p := range []linProj{l.lin.qkv, l.lin.z, l.lin.b, l.lin.a} {
			ws = append(ws, p.parts...)
		}
		ws = append(ws, l.lin.out)
	}
	return append(ws, activeExperts(l.moe)...)
}

// activeExperts are the matrices of a sparse block that one token reads: the router, TopK experts' (all of a
// size: the first ones stand for any) and the shared expert.
func activeExperts(e *moeLayer) []linear {
	if e == nil {
		return nil
	}
	ws := []linear{e.router}
	for i := range e.spec.TopK {
		ws = append(ws, e.gate[i], e.up[i], e.down[i])
	}
	if e.shared != nil {
		ws = append(ws, e.shared[:]...)
	}
	if e.sharedGate != nil {
		ws = append(ws, *e.sharedGate)
	}
	return ws
}

// macsPerToken is the multiply-adds of one token's matrix products.
func macsPerToken(m *cpuModel) int64 {
	n := int64(m.lmHead.out * m.lmHead.in)
	for _, l := range m.layers {
		for _, w := range tokenMatrices(l) {
			n += int64(w.out * w.in)
		}
	}
	return n
}

// BenchmarkWeights compares the two ways of holding 16-bit and quantized matrices (backend.Weights) on the
// ~100M-parameter model stored as bfloat16 and as MLX 4-bit: expanded to float32 at load, or stored and expanded
// a tile at a time in every product. Metrics: tok/s, GMAC/cpu-s and weights-MB: the matrices as the backend
// holds them, which is both the memory they take (heap for float32 copies, the mapped file for stored ones)
// and what a decode step reads. Stored reads 2× (16-bit) to ~6× (4-bit) fewer bytes per token for more work
// per weight, so which one decodes faster depends on how many cores share a memory channel; the memory it
// saves does not. (Peak RSS is left out: sub-benchmarks share a process, so it mixes them.)
//
//	go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench Weights -benchtime 3s
func BenchmarkWeights(b *testing.B) {
	for _, tc := range []struct {
		name string
		mod  func(*modelgen.Options)
	}{
		{"bench100m-bf16", func(o *modelgen.Options) { o.DType = dtype.BFloat16 }},
		{"bench100m-f16", func(o *modelgen.Options) { o.DType = dtype.Float16 }},
		{"bench100m-q8g64", func(o *modelgen.Options) {
			o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 8, GroupSize: 64}
		}},
		{"bench100m-q4g64", func(o *modelgen.Options) {
			o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 4, GroupSize: 64}
		}},
	} {
		o := modelgen.Bench100M()
		tc.mod(&o)
		m := backendtest.Generate(b, o)
		for _, w := range []backend.Weights{backend.WeightsFloat32, backend.WeightsStored} {
			b.Run(tc.name+"/"+string(w), func(b *testing.B) {
				bm := backendtest.Load(b, Backend{}, m, backend.Options{Weights: w})
				weights := weightBytesPerToken(bm.(*cpuModel))
				macs := float64(macsPerToken(bm.(*cpuModel)))
				p := (backendtest.BenchModel{Prefill: 128}).BenchPrompt(bm.VocabSize())
				b.Run("prefill-128", func(b *testing.B) {
					var cpu0 time.Duration
					backendtest.BenchPrefill(b, bm, p[:128], func() { cpu0 = processCPUTime() })
					reportCPU(b, cpu0, float64(128*b.N)*macs)
				})
				b.Run("decode-batch1", func(b *testing.B) {
					var cpu0 time.Duration
					backendtest.BenchDecode(b, bm, p, 1, func() { cpu0 = processCPUTime() })
					reportCPU(b, cpu0, float64(b.N)*macs)
					b.ReportMetric(float64(weights)/1e6, "weights-MB")
				})
			})
		}
	}
}

// resetPeakRSS restarts the resident-set high-water mark (Linux: writing 5 to /proc/self/clear_refs).
func resetPeakRSS() {
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSSMB reads the process's resident-set high-water mark (Linux; 0 elsewhere).
func peakRSSMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

package cpu

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// BenchmarkModel measures prefill and decode throughput of the embedded model and a generated ~100M-parameter
// float32 model, and compares decode with the machine's memory-bandwidth bound measured in the same run:
//
//	bound (tokens/s) = copy bandwidth (bytes copied per second, all cores) / bytes of weights read per token
//
// Decode is memory-bound: each step streams every weight matrix once (the float32 matrices the backend holds,
// whatever the file's dtype). The copy bandwidth is measured right before each decode measurement, with as
// many threads as the backend uses, so that the ratio holds even on a machine whose load changes. Metrics:
// tok/s, bound-tok/s, of-bound (the ratio; the target is >= 0.5 for float32), copy-GB/s, weights-MB,
// GMAC/cpu-s (matrix work per CPU-second over all threads: efficiency independent of machine load) and
// peak-RSS-MB (the process's resident high-water mark during that sub-benchmark: weights, caches,
// activations and the Go runtime; Linux only).
//
//	go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench Model -benchtime 3s
func BenchmarkModel(b *testing.B) {
	for _, tc := range []struct {
		name    string
		opts    modelgen.Options
		prefill int
	}{
		{"embedded-bf16", modelgen.Embedded(), 256},
		{"bench100m-f32", modelgen.Bench100M(), 128},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			if err := modelgen.Generate(dir, tc.opts); err != nil {
				b.Fatal(err)
			}
			m, err := model.Load(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			bm, err := Backend{}.Load(m, backend.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer bm.Close()
			weights := weightBytesPerToken(bm.(*cpuModel))
			macs := float64(weights / 4) // multiply-adds per token in the matrix products
			p := prompt(tc.prefill, bm.VocabSize(), 1)
			logits := make([]float32, bm.VocabSize())

			b.Run(fmt.Sprintf("prefill-%d", tc.prefill), func(b *testing.B) {
				c, _ := bm.NewCache()
				defer c.Release()
				resetPeakRSS()
				cpu0 := processCPUTime()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					c.Truncate(0)
					if err := bm.Forward([]backend.Seq{{Cache: c, Tokens: p, Logits: logits}}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(tc.prefill*b.N)/b.Elapsed().Seconds(), "tok/s")
				reportCPU(b, cpu0, float64(tc.prefill*b.N)*macs)
				b.ReportMetric(peakRSSMB(), "peak-RSS-MB")
			})
			for _, batch := range []int{1, 8} {
				b.Run(fmt.Sprintf("decode-batch%d", batch), func(b *testing.B) {
					// Each sequence holds 64 positions; every step decodes one token per sequence and is then
					// truncated back, so the context stays fixed.
					seqs := make([]backend.Seq, batch)
					for i := range seqs {
						c, _ := bm.NewCache()
						defer c.Release()
						if err := bm.Forward([]backend.Seq{{Cache: c, Tokens: p[:64]}}); err != nil {
							b.Fatal(err)
						}
						seqs[i] = backend.Seq{Cache: c, Tokens: []int32{p[64+i]}, Logits: make([]float32, bm.VocabSize())}
					}
					copyBW := copyBandwidth(runtime.GOMAXPROCS(0))
					resetPeakRSS()
					cpu0 := processCPUTime()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := bm.Forward(seqs); err != nil {
							b.Fatal(err)
						}
						for _, s := range seqs {
							s.Cache.Truncate(64)
						}
					}
					tps := float64(batch*b.N) / b.Elapsed().Seconds()
					b.ReportMetric(tps, "tok/s")
					reportCPU(b, cpu0, float64(batch*b.N)*macs)
					if batch == 1 {
						bound := copyBW / float64(weights)
						b.ReportMetric(bound, "bound-tok/s")
						b.ReportMetric(tps/bound, "of-bound")
						b.ReportMetric(copyBW/1e9, "copy-GB/s")
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

// weightBytesPerToken is what one decode step reads: every float32 matrix once (norm vectors are negligible;
// the embedding lookup reads one row).
func weightBytesPerToken(m *cpuModel) int64 {
	n := int64(len(m.lmHead.w))
	for _, l := range m.layers {
		for _, w := range []linear{l.q, l.k, l.v, l.o, l.gate, l.up, l.down} {
			n += int64(len(w.w))
		}
	}
	return 4 * n
}

// copyBandwidth measures how many bytes per second threads goroutines copy between two 128 MiB buffers (far
// beyond the caches; best of five), counted as `copy` benchmarks count: each byte once, though it is read and
// written. The buffers are returned to the OS afterwards so they do not count towards peak RSS.
func copyBandwidth(threads int) float64 {
	defer debug.FreeOSMemory()
	const size = 128 << 20
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in
	best := 0.0
	for r := 0; r < 5; r++ {
		start := time.Now()
		var wg sync.WaitGroup
		part := size / threads
		for t := 0; t < threads; t++ {
			wg.Add(1)
			go func(lo, hi int) {
				defer wg.Done()
				copy(dst[lo:hi], src[lo:hi])
			}(t*part, min((t+1)*part, size))
		}
		wg.Wait()
		best = max(best, float64(size)/time.Since(start).Seconds())
	}
	return best
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

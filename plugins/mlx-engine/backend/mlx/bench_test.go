//go:build mlx

package mlx

import (
	"fmt"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
)

// BenchmarkModel measures the MLX backend on the embedded model and a generated ~100M-parameter float32 model:
// prefill and decode throughput, MLX's peak memory during the sub-benchmark, and the share of a step spent
// outside MLX. The pure-Go backend runs the same decode in the same process, for a ratio.
//
// Metrics: tok/s; mlx-peak-MB (MLX's allocator high-water mark during the sub-benchmark: weights, caches,
// activations); host-us/step and host-% (time per Forward during which the calling side was not blocked in
// mlx_eval: building the graph through cgo, the hand-over to the MLX thread, copying the logits out, freeing
// the step's arrays; with pipelining MLX computes during part of it, so it is an upper bound of what the
// host adds to a step); vs-cpu (tokens/s over the pure-Go backend's in this run).
//
//	go test -tags mlx ./plugins/mlx-engine/backend/mlx -run '^$' -bench Model -benchtime 3s
func BenchmarkModel(b *testing.B) {
	for _, tc := range backendtest.BenchModels() {
		b.Run(tc.Name, func(b *testing.B) {
			src := backendtest.Generate(b, tc.Options)
			bm := load(b, src, backend.Options{})
			m := bm.(*mlxModel)
			p := tc.BenchPrompt(bm.VocabSize())
			ref := loadCPU(b, src, backend.Options{})

			var cpuPrefill float64
			b.Run(fmt.Sprintf("prefill-%d-cpu", tc.Prefill), func(b *testing.B) {
				cpuPrefill = backendtest.BenchPrefill(b, ref, p[:tc.Prefill], nil)
			})
			b.Run(fmt.Sprintf("prefill-%d", tc.Prefill), func(b *testing.B) {
				tps := backendtest.BenchPrefill(b, bm, p[:tc.Prefill], func() { startMeasure(b, m) })
				reportMemory(b)
				b.ReportMetric(tps/cpuPrefill, "vs-cpu")
			})
			var cpuTPS float64
			b.Run("decode-batch1-cpu", func(b *testing.B) {
				cpuTPS, _ = backendtest.BenchDecode(b, ref, p, 1, nil)
			})
			for _, v := range []struct {
				name     string
				batch    int
				pipeline bool
			}{{"decode-batch1", 1, true}, {"decode-batch1-nopipeline", 1, false}, {"decode-batch8", 8, true}} {
				b.Run(v.name, func(b *testing.B) {
					m.pipeline = v.pipeline
					defer func() { m.pipeline = true }()
					tps, wall := backendtest.BenchDecode(b, m, p, v.batch, func() { startMeasure(b, m) })
					reportHost(b, m, wall)
					if v.batch == 1 && cpuTPS > 0 {
						b.ReportMetric(tps/cpuTPS, "vs-cpu")
					}
				})
			}
		})
	}
}

// reportHost reports where the time of m's Forward calls (wall in all) went: the part the calling side spent
// not waiting for MLX to compute, and the part of that not inside MLX's graph construction either.
func reportHost(b *testing.B, m *mlxModel, wall time.Duration) {
	b.Helper()
	m.mu.Lock()
	tm := m.timing
	m.mu.Unlock()
	host := wall - tm.wait - tm.async // the calling side not waiting for MLX to compute
	goCgo := host - tm.inC            // ... nor inside MLX's graph construction
	perStep := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(perStep(host), "host-us/step")
	b.ReportMetric(100*host.Seconds()/wall.Seconds(), "host-%")
	b.ReportMetric(perStep(goCgo), "go-cgo-us/step")
	b.ReportMetric(100*goCgo.Seconds()/wall.Seconds(), "go-cgo-%")
	reportMemory(b)
}

// startMeasure resets MLX's peak memory and m's timings.
func startMeasure(b *testing.B, m *mlxModel) {
	b.Helper()
	if err := ResetPeakMemory(); err != nil {
		b.Fatal(err)
	}
	m.mu.Lock()
	m.timing = timing{}
	m.timed = true
	m.mu.Unlock()
}

func reportMemory(b *testing.B) {
	b.Helper()
	st, err := Memory()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.Peak)/(1<<20), "mlx-peak-MB")
}

//go:build mlx

package mlx

import (
	"fmt"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
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
			src, err := model.Load(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			bm, err := Backend{}.Load(src, backend.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer bm.Close()
			m := bm.(*mlxModel)
			p := prompt(tc.prefill+8, bm.VocabSize(), 1)
			logits := make([]float32, bm.VocabSize())

			ref := loadCPU(b, src, backend.Options{})
			var cpuPrefill float64
			for _, bk := range []struct {
				suffix string
				m      backend.Model
			}{{"-cpu", ref}, {"", bm}} {
				b.Run(fmt.Sprintf("prefill-%d%s", tc.prefill, bk.suffix), func(b *testing.B) {
					c, _ := bk.m.NewCache()
					defer c.Release()
					if bk.m == bm {
						startMeasure(b, m)
					} else {
						b.ResetTimer()
					}
					for i := 0; i < b.N; i++ {
						c.Truncate(0)
						if err := bk.m.Forward([]backend.Seq{{Cache: c, Tokens: p[:tc.prefill], Logits: logits}}); err != nil {
							b.Fatal(err)
						}
					}
					tps := float64(tc.prefill*b.N) / b.Elapsed().Seconds()
					b.ReportMetric(tps, "tok/s")
					if bk.m == bm {
						reportMemory(b)
						b.ReportMetric(tps/cpuPrefill, "vs-cpu")
					} else {
						cpuPrefill = tps
					}
				})
			}
			var cpuTPS float64
			b.Run("decode-batch1-cpu", func(b *testing.B) {
				cpuTPS = decodeSteps(b, ref, p, 1)
			})
			for _, v := range []struct {
				name     string
				batch    int
				pipeline bool
			}{{"decode-batch1", 1, true}, {"decode-batch1-nopipeline", 1, false}, {"decode-batch8", 8, true}} {
				b.Run(v.name, func(b *testing.B) {
					m.pipeline = v.pipeline
					defer func() { m.pipeline = true }()
					tps := decodeSteps(b, bm, p, v.batch)
					if v.batch == 1 && cpuTPS > 0 {
						b.ReportMetric(tps/cpuTPS, "vs-cpu")
					}
				})
			}
		})
	}
}

// decodeSteps measures steps that decode one token for each of batch sequences holding 64 positions (truncated back
// after every step, so the context stays fixed) and returns tokens per second.
func decodeSteps(b *testing.B, bm backend.Model, p []int32, batch int) float64 {
	b.Helper()
	seqs := make([]backend.Seq, batch)
	for i := range seqs {
		c, err := bm.NewCache()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Release()
		if err := bm.Forward([]backend.Seq{{Cache: c, Tokens: p[:64]}}); err != nil {
			b.Fatal(err)
		}
		seqs[i] = backend.Seq{Cache: c, Tokens: []int32{p[64+i]}, Logits: make([]float32, bm.VocabSize())}
	}
	m, isMLX := bm.(*mlxModel)
	if isMLX {
		startMeasure(b, m)
	} else {
		b.ResetTimer()
	}
	var wall time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := bm.Forward(seqs); err != nil {
			b.Fatal(err)
		}
		wall += time.Since(t0)
		for _, s := range seqs {
			s.Cache.Truncate(64)
		}
	}
	tps := float64(batch*b.N) / b.Elapsed().Seconds()
	b.ReportMetric(tps, "tok/s")
	if isMLX {
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
	return tps
}

// startMeasure resets the timer, MLX's peak memory and m's timings.
func startMeasure(b *testing.B, m *mlxModel) {
	b.Helper()
	if err := ResetPeakMemory(); err != nil {
		b.Fatal(err)
	}
	m.mu.Lock()
	m.timing = timing{}
	m.timed = true
	m.mu.Unlock()
	b.ResetTimer()
}

func reportMemory(b *testing.B) {
	b.Helper()
	st, err := Memory()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.Peak)/(1<<20), "mlx-peak-MB")
}

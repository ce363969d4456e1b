package cpu

import (
	"runtime"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// BenchmarkMoE measures a mixture of experts at a realistic shape (modelgen.MoE2B: 2.51B parameters, 0.23B
// active, 4-bit, generated into a temporary directory, 1.4 GB) against what bounds it:
//
//   - decode-batch1: tok/s against the read-bandwidth bound of the bytes one token reads (attention, router, 4
//     experts per layer, output layer), each step paired with a read of as many bytes (of-bound, as in
//     BenchmarkThroughput; the target is ≥ 0.8);
//   - prefill-512: tok/s of a 512-token prompt, next to the dense model of the same active size
//     (modelgen.MoE2BDense) prefilling the same prompt: the experts' rows are grouped so each chosen expert is
//     read once per chunk, so the ratio shows what the routing and the smaller per-expert products cost.
//
// Threads are GOMAXPROCS; weights are kept as stored (the 4-bit kernels).
//
//	flock /tmp/duet-heavy.lock go test ./plugins/mlx-engine/backend/cpu -run '^$' -bench MoE -benchtime 20x -timeout 30m
func BenchmarkMoE(b *testing.B) {
	n := runtime.GOMAXPROCS(0)
	for _, tc := range []struct {
		name string
		o    modelgen.Options
	}{{"moe2b-q4", modelgen.MoE2B()}, {"dense-active-q4", modelgen.MoE2BDense()}} {
		m, cm := loadBenchModel(b, tc.name, tc.o, n)
		weights, macs := weightBytesPerToken(cm), float64(macsPerToken(cm))
		p := backendtest.BenchModel{Prefill: 512}.BenchPrompt(cm.VocabSize())
		b.Run(tc.name+"/decode-batch1", func(b *testing.B) { benchDecodeVsRead(b, cm, p, n, weights, 0, macs, 0) })
		b.Run(tc.name+"/prefill-512", func(b *testing.B) { benchPrefillCPU(b, cm, p[:512], macs) })
		cm.Close()
		m.Close()
	}
}

// loadBenchModel generates o into a temporary directory (logging its size) and loads it with the weights as
// stored on threads threads.
func loadBenchModel(b *testing.B, name string, o modelgen.Options, threads int) (*model.Model, *cpuModel) {
	b.Helper()
	t0 := time.Now()
	m := backendtest.Generate(b, o)
	b.Logf("%s: generated in %v: %.2fB parameters, %.3fB active, %.0f MB", name, time.Since(t0).Round(time.Second),
		float64(m.NumParams())/1e9, float64(m.ActiveParams())/1e9, float64(m.WeightBytes())/1e6)
	bm := backendtest.Load(b, Backend{}, m, backend.Options{Weights: backend.WeightsStored, Threads: threads})
	return m, bm.(*cpuModel)
}

// benchPrefillCPU is backendtest.BenchPrefill of tokens with GMAC/cpu-s for macs per token.
func benchPrefillCPU(b *testing.B, m *cpuModel, tokens []int32, macs float64) {
	var cpu0 time.Duration
	backendtest.BenchPrefill(b, m, tokens, func() { cpu0 = processCPUTime() })
	reportCPU(b, cpu0, float64(len(tokens)*b.N)*macs)
}

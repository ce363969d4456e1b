package backendtest

import (
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// BenchModel is a model the backends' benchmarks run on, with the prompt length of its prefill measurement.
type BenchModel struct {
	Name    string
	Options modelgen.Options
	Prefill int
}

// BenchModels are the models every backend's BenchmarkModel measures, so that their figures compare: the
// embedded model (bfloat16, ~13M parameters) and a ~100M-parameter float32 one.
func BenchModels() []BenchModel {
	return []BenchModel{
		{"embedded-bf16", modelgen.Embedded(), 256},
		{"bench100m-f32", modelgen.Bench100M(), 128},
	}
}

// BenchContext is how many positions each sequence of BenchDecode holds.
const BenchContext = 64

// BenchPrompt is the prompt of a BenchModel's measurements: Prefill tokens for BenchPrefill, and enough for
// BenchDecode's context and a batch of 8.
func (bm BenchModel) BenchPrompt(vocab int) []int32 {
	return Prompt(max(bm.Prefill, BenchContext)+8, vocab, 1)
}

// BenchPrefill measures Forward over tokens into a cache truncated back to empty before each call, reports
// tok/s and returns it. start, when not nil, runs right before the timer starts (to reset the backend's own
// measurements).
func BenchPrefill(b *testing.B, m backend.Model, tokens []int32, start func()) float64 {
	b.Helper()
	c, err := m.NewCache()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Release()
	logits := make([]float32, m.VocabSize())
	if start != nil {
		start()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Truncate(0)
		if err := m.Forward([]backend.Seq{{Cache: c, Tokens: tokens, Logits: logits}}); err != nil {
			b.Fatal(err)
		}
	}
	tps := float64(len(tokens)*b.N) / b.Elapsed().Seconds()
	b.ReportMetric(tps, "tok/s")
	return tps
}

// BenchDecode measures Forward steps that decode one token for each of batch sequences holding BenchContext
// positions of p (truncated back after every step, so the context stays fixed). It reports tok/s and returns
// it with the time spent inside Forward (the loop's wall time without the truncations). start, when not nil,
// runs right before the timer starts.
func BenchDecode(b *testing.B, m backend.Model, p []int32, batch int, start func()) (tps float64, inForward time.Duration) {
	b.Helper()
	seqs := make([]backend.Seq, batch)
	for i := range seqs {
		c, err := m.NewCache()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Release()
		if err := m.Forward([]backend.Seq{{Cache: c, Tokens: p[:BenchContext]}}); err != nil {
			b.Fatal(err)
		}
		seqs[i] = backend.Seq{Cache: c, Tokens: []int32{p[BenchContext+i]}, Logits: make([]float32, m.VocabSize())}
	}
	if start != nil {
		start()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := m.Forward(seqs); err != nil {
			b.Fatal(err)
		}
		inForward += time.Since(t0)
		for _, s := range seqs {
			s.Cache.Truncate(BenchContext)
		}
	}
	tps = float64(batch*b.N) / b.Elapsed().Seconds()
	b.ReportMetric(tps, "tok/s")
	return tps, inForward
}

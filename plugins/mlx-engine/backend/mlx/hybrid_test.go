//go:build mlx

package mlx

import (
	"math"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// TestHybridMatchesReference runs the tiny hybrid models (Gated DeltaNet layers and gated attention) on MLX
// against the float64 reference: a 300-token prompt prefilled in steps of 128 (the delta rule's chunked form
// across several 64-position chunks, the last one partial, and state carried between steps), then greedy
// decoding with the recurrence. Every greedy token must be the reference's argmax and the logits within
// hybridTolerance of it. The cpu backend's distance to the reference on the same tokens is logged beside it.
func TestHybridMatchesReference(t *testing.T) {
	const prompt, steps = 300, 24
	for _, v := range backendtest.HybridVariants() {
		t.Run(v.Name, func(t *testing.T) {
			m := backendtest.Generate(t, v.Options)
			ref := backendtest.NewReference(t, m)
			p := backendtest.Prompt(prompt, m.Config.VocabSize, 17)
			bm := loadFloat32(t, m, backend.Options{PrefillChunk: 128})
			c := backendtest.NewCache(t, bm)
			toks, logits := backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, p...), steps)
			want := ref.Logits(append(slices.Clone(p), toks...))
			cm := loadCPU(t, m, backend.Options{PrefillChunk: 128})
			cc := backendtest.NewCache(t, cm)
			cpuToks, cpuLogits := backendtest.Greedy(t, cm, cc, backendtest.Forward(t, cm, cc, p...), steps)
			cpuWorst := 0.0
			for i := range cpuLogits[:len(cpuToks)] {
				w := want[len(p)-1+i]
				d, mx := 0.0, 1.0
				for j := range w {
					d = math.Max(d, math.Abs(float64(cpuLogits[i][j])-w[j]))
					mx = math.Max(mx, math.Abs(w[j]))
				}
				cpuWorst = max(cpuWorst, d/mx)
			}
			t.Logf("cpu backend: same tokens %v, max relative |Δlogit| against the reference %.2e", slices.Equal(cpuToks, toks), cpuWorst)
			worst := 0.0
			for i, got := range logits[:len(toks)] {
				w := want[len(p)-1+i]
				d, mx := 0.0, 1.0
				for j := range got {
					d = math.Max(d, math.Abs(float64(got[j])-w[j]))
					mx = math.Max(mx, math.Abs(w[j]))
				}
				worst = max(worst, d/mx)
				if r := backendtest.Argmax(w); r != toks[i] {
					t.Fatalf("step %d: greedy token %d, reference %d", i, toks[i], r)
				}
			}
			t.Logf("max relative |Δlogit| against the reference over %d steps = %.2e (tolerance %.0e); %d distinct tokens",
				len(toks), worst, hybridTolerance(m.DType), distinct(toks))
			if worst > hybridTolerance(m.DType) {
				t.Errorf("MLX differs from the reference by %.3e > %.0e", worst, hybridTolerance(m.DType))
			}
		})
	}
}

// hybridTolerance is refTolerance for hybrid models. With a 16-bit cache, conv windows and keys and values are
// rounded to the cache dtype, and a float32 difference that straddles a rounding boundary moves an element by
// one 16-bit ulp (2⁻⁸ of it in bfloat16); in a linear layer that element then feeds the recurrent state of
// every later position rather than one key. Measured on the bf16 q4 variant over 24 steps after a 300-token
// prompt: typically 2e-4 to 9e-4 per step, 2.4e-3 at worst (the cpu backend: 6.3e-4 at worst).
func hybridTolerance(d dtype.DType) float64 {
	if d == dtype.Float32 {
		return refTolerance(d)
	}
	return 5e-3
}

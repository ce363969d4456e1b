package cpu

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// hybridVariants are the tiny hybrid models (modelgen.TinyFamily: 6 layers, Gated DeltaNet layers with Nv = 2·Nk
// and Dk ≠ Dv, gated full attention on layers 2 and 5 with 4 of 16 rotary dims, experts with a gated shared
// expert) in both checkpoint layouts, float32 and 4-bit.
func hybridVariants() []backendtest.Variant {
	var out []backendtest.Variant
	for _, f := range []model.Family{model.Qwen3Next, model.Qwen35MoE} {
		out = append(out,
			backendtest.TinyVariant(string(f)+"/hf/f32", func(o *modelgen.Options) {
				o.Family, o.DType, o.Layout = f, dtype.Float32, modelgen.LayoutHF
			}),
			backendtest.TinyVariant(string(f)+"/mlx/f32", func(o *modelgen.Options) {
				o.Family, o.DType, o.Layout = f, dtype.Float32, modelgen.LayoutMLX
			}),
			backendtest.TinyVariant(string(f)+"/mlx/bf16/q4g32", func(o *modelgen.Options) {
				o.Family, o.DType, o.Layout = f, dtype.BFloat16, modelgen.LayoutMLX
				o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
			}),
		)
	}
	return out
}

// hybridTolerance is the largest difference from the float64 reference allowed for a hybrid model's logits,
// relative to the largest logit (at least 1). The delta rule carries float32 rounding through a state that every
// position updates, so the error could grow with the sequence; docs/hybrid-design.md §5.1 allows 2e-3 over 300
// positions. Measured over 324 positions it stays at 2e-6…9e-6 for float32 models on every kernel path, so 1e-4
// keeps a tenfold margin and still catches a term computed wrongly (which shows at 1e-3 and up). A 16-bit cache
// rounds keys, values and conv windows to bfloat16 in both, and where a float32 value lands on the other side of
// a rounding step from the float64 one the difference is a whole bfloat16 step (2^-8): measured 3.5e-3, allowed
// 1e-2.
func hybridTolerance(d dtype.DType) float64 {
	if d == dtype.Float32 {
		return 1e-4
	}
	return 1e-2
}

// TestHybridGreedyMatchesReference: on every kernel path, with matrices expanded and kept as stored, a 300-token
// prompt (prefilled in chunks of 64, so chunks start mid-sequence) and 24 greedy steps of every tiny hybrid model
// choose at every step the token the float64 reference chooses, with logits within hybridTolerance; stored
// weights give the expanded ones' bits, and every path decodes the same tokens.
func TestHybridGreedyMatchesReference(t *testing.T) {
	t.Parallel()
	for _, v := range hybridVariants() {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			m := backendtest.Generate(t, v.Options)
			// 324 positions of 4 routers meet closer calls than gpt-oss's 72; the float32 logits' error stays
			// below 1e-5 (measured), so only a closer call could route differently.
			greedyMatchesReference(t, m, greedyCheck{
				opts:   backend.Options{PrefillChunk: 64, Threads: 3},
				prompt: backendtest.Prompt(300, m.Config.VocabSize, 23), steps: 24,
				minRouter: 1e-5, tol: hybridTolerance(m.DType),
			})
		})
	}
}

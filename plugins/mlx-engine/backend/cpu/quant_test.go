package cpu

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// TestQuantizedCloseToFloat compares each quantized model with the float model generated from the same seed
// (the quantized weights are the float weights, quantized). The metric is the relative RMS error of the logits
// over every position of a prompt, ‖q − f‖ / ‖f‖. Stated tolerances: 3% for 8-bit, 30% for 4-bit. Why those:
// affine quantization of a group spanning ~4σ adds noise of range/((2^bits−1)·√12) per weight, about 0.45% of
// σ at 8 bits and 7.7% at 4 bits, and a logit passes through ~6 quantized matrices (embedding, attention, MLP,
// output), so about √6 times that: measured 1.0–1.3% and 17–22%. A packing or scaling bug gives ~100%.
func TestQuantizedCloseToFloat(t *testing.T) {
	t.Parallel()
	base := func(mod func(*modelgen.Options)) modelgen.Options {
		o := modelgen.Tiny()
		o.HiddenSize, o.IntermediateSize, o.NumHeads, o.NumKVHeads = 128, 256, 4, 2
		if mod != nil {
			mod(&o)
		}
		return o
	}
	for _, tc := range []struct {
		name string
		opts modelgen.Options
		q    modelgen.Quantization
		tol  float64
	}{
		{"llama/f32/8bit-g64", base(nil), modelgen.Quantization{Bits: 8, GroupSize: 64}, 0.03},
		{"llama/f32/4bit-g32", base(nil), modelgen.Quantization{Bits: 4, GroupSize: 32}, 0.30},
		{"llama/f32/4bit-g128", base(nil), modelgen.Quantization{Bits: 4, GroupSize: 128}, 0.30},
		{"qwen3/bf16/4bit-g64", base(func(o *modelgen.Options) { o.Family, o.DType = model.Qwen3, dtype.BFloat16 }), modelgen.Quantization{Bits: 4, GroupSize: 64}, 0.30},
		{"qwen2/f16/8bit-g32", base(func(o *modelgen.Options) { o.Family, o.DType = model.Qwen2, dtype.Float16 }), modelgen.Quantization{Bits: 8, GroupSize: 32}, 0.03},
		{"mistral/bf16/8bit-g128", base(func(o *modelgen.Options) { o.Family, o.DType = model.Mistral, dtype.BFloat16 }), modelgen.Quantization{Bits: 8, GroupSize: 128}, 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fm := load(t, backendtest.Generate(t, tc.opts), backend.Options{})
			qo := tc.opts
			qo.Quantization = &tc.q
			qm := load(t, backendtest.Generate(t, qo), backend.Options{})
			p := backendtest.Prompt(24, fm.VocabSize(), 7)
			fc, qc := backendtest.NewCache(t, fm), backendtest.NewCache(t, qm)
			var num, den float64
			agree := 0
			for _, tok := range p {
				f, q := backendtest.Forward(t, fm, fc, tok), backendtest.Forward(t, qm, qc, tok)
				for i := range f {
					d := float64(q[i] - f[i])
					num += d * d
					den += float64(f[i]) * float64(f[i])
				}
				if backendtest.Argmax(f) == backendtest.Argmax(q) {
					agree++
				}
			}
			rel := math.Sqrt(num / den)
			t.Logf("relative RMS logit error %.4f (tolerance %.2f); greedy token agrees at %d/%d positions", rel, tc.tol, agree, len(p))
			if rel > tc.tol {
				t.Errorf("quantized logits are %.3f away from the float model's, more than %.2f", rel, tc.tol)
			}
		})
	}
}

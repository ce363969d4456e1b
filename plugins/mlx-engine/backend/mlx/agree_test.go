//go:build mlx

package mlx

import (
	"fmt"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// variants are the generated models the MLX backend is checked on against the pure-Go one: every family in
// float32, bfloat16 and 4-bit (bfloat16 scales), plus the shapes that exercise the rest of the forward pass
// (llama3 RoPE scaling, float16, explicit head_dim, MHA, tied embeddings, 8- and 2-bit, per-module overrides,
// quantized tied embeddings used as the output layer).
var variants = func() []backendtest.Variant {
	var vs []backendtest.Variant
	add := func(name string, mod func(*modelgen.Options)) {
		vs = append(vs, backendtest.TinyVariant(name, mod))
	}
	for i, f := range model.Families {
		seed := uint64(3 + i) // the families differ in config, not in weights: give each its own
		add(fmt.Sprintf("%s/f32", f), func(o *modelgen.Options) { o.Family, o.Seed = f, seed })
		add(fmt.Sprintf("%s/bf16", f), func(o *modelgen.Options) { o.Family, o.Seed, o.DType = f, seed, dtype.BFloat16 })
		add(fmt.Sprintf("%s/bf16/q4g32", f), func(o *modelgen.Options) {
			o.Family, o.Seed, o.DType = f, seed, dtype.BFloat16
			o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
		})
	}
	add("llama/bf16/rope-llama3", func(o *modelgen.Options) {
		o.DType = dtype.BFloat16
		o.RopeScaling = &model.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 64}
	})
	add("llama/f16/sharded", func(o *modelgen.Options) { o.DType = dtype.Float16; o.Shards = 3 })
	add("qwen2/bf16/tied", func(o *modelgen.Options) { o.Family, o.DType, o.TieWordEmbeddings = model.Qwen2, dtype.BFloat16, true })
	add("qwen3/f32/head_dim", func(o *modelgen.Options) { o.Family, o.HeadDim = model.Qwen3, 32 })
	add("qwen3/f16/mha", func(o *modelgen.Options) { o.Family, o.DType, o.NumKVHeads = model.Qwen3, dtype.Float16, 4 })
	add("llama/f32/q4g64", func(o *modelgen.Options) { o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 64} })
	add("llama/bf16/q8g64", func(o *modelgen.Options) {
		o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 8, GroupSize: 64}
	})
	add("qwen3/bf16/q4g64/overrides", func(o *modelgen.Options) {
		o.Family, o.DType = model.Qwen3, dtype.BFloat16
		o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 64, Overrides: map[string]*model.QuantParams{
			"lm_head":                      nil,
			"model.layers.1.mlp.down_proj": {Bits: 8, GroupSize: 32},
			// Projections that cannot be joined with their neighbours (see fuse): layer 0 runs q, k, v and
			// gate, up separately, layer 1 joined.
			"model.layers.0.self_attn.k_proj": {Bits: 8, GroupSize: 32},
			"model.layers.0.mlp.up_proj":      nil,
		}}
	})
	add("qwen2/f16/q2g32/tied", func(o *modelgen.Options) {
		o.Family, o.DType, o.TieWordEmbeddings = model.Qwen2, dtype.Float16, true
		o.Quantization = &modelgen.Quantization{Bits: 2, GroupSize: 32}
	})
	add("llama/bf16/mxfp4", func(o *modelgen.Options) {
		o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Mode: model.ModeMXFP4, Bits: 4, GroupSize: 32}
	})
	add("qwen3_moe/f32/mxfp4", func(o *modelgen.Options) {
		o.Family, o.Quantization = model.Qwen3MoE, &modelgen.Quantization{Mode: model.ModeMXFP4, Bits: 4, GroupSize: 32}
	})
	add("qwen3_moe/bf16/mxfp4/mlx", func(o *modelgen.Options) {
		o.Family, o.DType, o.Layout = model.Qwen3MoE, dtype.BFloat16, modelgen.LayoutMLX
		o.Quantization = &modelgen.Quantization{Mode: model.ModeMXFP4, Bits: 4, GroupSize: 32}
	})
	add("mistral/f32/q8g128", func(o *modelgen.Options) {
		o.Family, o.HiddenSize, o.IntermediateSize = model.Mistral, 128, 256
		o.Quantization = &modelgen.Quantization{Bits: 8, GroupSize: 128}
	})
	return vs
}()

// Tolerances of MLX against the pure-Go backend, as max |Δlogit| relative to max(1, max |logit|). Both
// compute in float32 but sum in different orders (BLAS, MLX's kernels, float32 RoPE angles): measured under
// 1e-6 with float32 caches. 16-bit caches round keys and values to 8 or 11 bits, so a float32 difference that
// straddles a rounding boundary moves an element by one ulp of the 16-bit type: measured up to 7e-5.
func tolerance(d dtype.DType) float64 {
	if d == dtype.Float32 {
		return 2e-5
	}
	return 1e-3
}

// agreeTolerance is tolerance(mod.DType), but hybridAgreeTolerance for a model with Gated DeltaNet layers.
func agreeTolerance(mod *model.Model) float64 {
	for i := range mod.Layers {
		if mod.Layers[i].DeltaNet != nil {
			return hybridAgreeTolerance(mod.DType)
		}
	}
	return tolerance(mod.DType)
}

// hybridAgreeTolerance: each backend rounds the pre-conv rows to the cache dtype, and where their float32 values
// straddle a rounding step the two conv windows hold elements a whole 16-bit ulp apart, which the recurrent
// state carries to every later position rather than to one key; in float32 the two delta rules' different
// summation orders accumulate in that state alike. Measured over the 95 positions of TestAgreesWithCPU: up to
// 9.8e-3 in bfloat16 (qwen3_5_moe/bf16) and 4.2e-5 in float32 (qwen3_5_moe/f32), with the greedy tokens equal.
func hybridAgreeTolerance(d dtype.DType) float64 {
	if d == dtype.Float32 {
		return 1e-4
	}
	return 2e-2
}

const greedySteps = 64

// TestAgreesWithCPU runs every variant on both backends, for two prompts: 30 tokens prefilled in chunks of 7,
// then 64 greedy steps decoded by each backend on its own. The tokens must be identical and the logits close
// at every step.
func TestAgreesWithCPU(t *testing.T) {
	for _, v := range variants {
		for _, seed := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/prompt%d", v.Name, seed), func(t *testing.T) {
				agree(t, v.Options, seed)
			})
		}
	}
}

func agree(t *testing.T, opts modelgen.Options, seed int) {
	t.Helper()
	mod := backendtest.Generate(t, opts)
	ml := loadFloat32(t, mod, backend.Options{PrefillChunk: 7})
	ref := loadCPU(t, mod, backend.Options{})
	p := backendtest.Prompt(30, mod.Config.VocabSize, seed)
	mc, rc := backendtest.NewCache(t, ml), backendtest.NewCache(t, ref)
	mlTokens, mlLogits := backendtest.Greedy(t, ml, mc, backendtest.Forward(t, ml, mc, p...), greedySteps)
	refTokens, refLogits := backendtest.Greedy(t, ref, rc, backendtest.Forward(t, ref, rc, p...), greedySteps)
	worst := 0.0
	for i := range mlLogits {
		worst = max(worst, backendtest.RelDiff(mlLogits[i], refLogits[i]))
	}
	tol := agreeTolerance(mod)
	t.Logf("max relative |Δlogit| over %d steps = %.2e (tolerance %.0e); %d distinct tokens",
		len(mlLogits), worst, tol, distinct(refTokens))
	if worst > tol {
		t.Errorf("MLX differs from the pure-Go backend by %.3e > %.0e", worst, tol)
	}
	if !slices.Equal(mlTokens, refTokens) {
		t.Errorf("greedy tokens differ:\nmlx %v\ncpu %v", mlTokens, refTokens)
	}
}

func distinct(toks []int32) int {
	seen := map[int32]bool{}
	for _, t := range toks {
		seen[t] = true
	}
	return len(seen)
}

// TestFusedProjections: q|k|v and gate|up are joined where their formats match and left apart where an override
// makes them differ (the overrides variant above); both paths are what TestAgreesWithCPU checks.
func TestFusedProjections(t *testing.T) {
	var v backendtest.Variant
	for _, x := range variants {
		if x.Name == "qwen3/bf16/q4g64/overrides" {
			v = x
		}
	}
	m := load(t, backendtest.Generate(t, v.Options), backend.Options{}).(*mlxModel)
	l0, l1 := &m.layers[0], &m.layers[1]
	if l0.qkv.out != 0 || l0.gateUp.out != 0 || l0.k.out == 0 || l0.up.out == 0 {
		t.Errorf("layer 0 (k_proj 8-bit, up_proj float) was joined: qkv %d, gate|up %d", l0.qkv.out, l0.gateUp.out)
	}
	c := m.cfg
	if want := (c.NumHeads + 2*c.NumKVHeads) * c.HeadDim; l1.qkv.out != want || l1.q.out != 0 {
		t.Errorf("layer 1: q|k|v has %d outputs, want %d joined", l1.qkv.out, want)
	}
	if l1.gateUp.out != 2*c.IntermediateSize || l1.gate.out != 0 {
		t.Errorf("layer 1: gate|up has %d outputs, want %d joined", l1.gateUp.out, 2*c.IntermediateSize)
	}
}

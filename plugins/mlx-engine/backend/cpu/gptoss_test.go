package cpu

import (
	"math"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// gptossVariants are tiny gpt-oss models (modelgen.TinyFamily: windows of 8 on every other layer, sinks, yarn,
// a router tie in every token, clamping) in the layouts people download: openai's with mxfp4 experts (fused,
// interleaved gate_up), transformers' float experts, and mlx-community's with stacked mxfp4 experts beside
// affine 4-bit attention, embeddings and head.
var gptossVariants = []backendtest.Variant{
	backendtest.TinyVariant("gpt_oss/hf/bf16/mxfp4", func(o *modelgen.Options) {
		o.Family, o.DType, o.Layout, o.ExpertsMXFP4 = model.GptOSS, dtype.BFloat16, modelgen.LayoutHF, true
	}),
	backendtest.TinyVariant("gpt_oss/hf/f32", func(o *modelgen.Options) {
		o.Family, o.DType, o.Layout = model.GptOSS, dtype.Float32, modelgen.LayoutHF
	}),
	backendtest.TinyVariant("gpt_oss/mlx/bf16/mxfp4+q4g32", func(o *modelgen.Options) {
		o.Family, o.DType, o.Layout, o.ExpertsMXFP4 = model.GptOSS, dtype.BFloat16, modelgen.LayoutMLX, true
		o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
	}),
}

// TestGptOSSGreedyMatchesReference: on every kernel path, with matrices expanded and kept as stored, 72
// positions of a tiny gpt-oss (a chunked prefill of 12, then 60 greedy steps: the windows of 8 crossed many
// times) choose at every step the token the float64 reference chooses after the same sequence, with logits
// within the tolerance; stored weights give the expanded ones' bits; every path decodes the same tokens.
func TestGptOSSGreedyMatchesReference(t *testing.T) {
	t.Parallel()
	for _, v := range gptossVariants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			m := backendtest.Generate(t, v.Options)
			if m.Layers[0].MoE == nil || m.Layers[0].Spec.Attn.Window != 8 || !m.Layers[0].Spec.Attn.Sinks {
				t.Fatal("not a windowed gpt-oss with sinks and experts")
			}
			greedyMatchesReference(t, m, greedyCheck{
				opts:   backend.Options{PrefillChunk: 5, Threads: 2},
				prompt: backendtest.Prompt(12, m.Config.VocabSize, 21), steps: 60,
				minRouter: 1e-4, tol: tolerance(m.DType),
			})
		})
	}
}

// TestGptOSSLayoutsAgree: openai's fused, interleaved gate_up experts and mlx-lm's sanitize of them (separate,
// stacked gate and up) give the same bits, mxfp4 and float, expanded and stored.
func TestGptOSSLayoutsAgree(t *testing.T) {
	t.Parallel()
	for _, mxfp4 := range []bool{false, true} {
		name := "float"
		if mxfp4 {
			name = "mxfp4"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gen := func(l modelgen.Layout) *model.Model {
				return backendtest.Generate(t, backendtest.Tiny(func(o *modelgen.Options) {
					o.Family, o.DType, o.Layout, o.ExpertsMXFP4 = model.GptOSS, dtype.BFloat16, l, mxfp4
				}))
			}
			hf, mlx := gen(modelgen.LayoutHF), gen(modelgen.LayoutMLX)
			if hf.Layers[0].MoE.GateUp == nil || mlx.Layers[0].MoE.GateUp != nil {
				t.Fatal("the layouts did not load as fused and separate")
			}
			sameBits(t, hf, mlx, "fused", "separate")
		})
	}
}

// TestRouteTopK: the k largest logits with ties to the lower index, softmaxed over those k, ascending order.
func TestRouteTopK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		logits  []float32
		ids     []int32
		weights []float32
	}{
		{"distinct", []float32{0, 3, 1, 3 - float32(math.Log(3))}, []int32{1, 3}, []float32{0.75, 0.25}},
		{"tie at the boundary goes to the lower index", []float32{1, 5, 1, 1}, []int32{0, 1}, nil},
		{"all tied", []float32{-2, -2, -2, -2}, []int32{0, 1, 2}, []float32{1.0 / 3, 1.0 / 3, 1.0 / 3}},
		{"negative logits", []float32{-9, -1, -3, -1}, []int32{1, 3}, []float32{0.5, 0.5}},
		{"one expert", []float32{0.5, 2, 7, 1}, []int32{2}, []float32{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, w := make([]int32, len(tc.ids)), make([]float32, len(tc.ids))
			routeTopK(tc.logits, ids, w)
			if !slices.Equal(ids, tc.ids) {
				t.Fatalf("ids %v, want %v", ids, tc.ids)
			}
			for i := range tc.weights {
				if math.Abs(float64(w[i]-tc.weights[i])) > 1e-6 {
					t.Errorf("weights %v, want %v", w, tc.weights)
				}
			}
		})
	}
}

// TestSplitGateUp: interleaved rows are gate, up, gate, up, ...; otherwise I gate rows then I up rows; the
// bias follows its row.
func TestSplitGateUp(t *testing.T) {
	t.Parallel()
	gu, b := []float32{1, 2, 3, 4, 5, 6}, []float32{10, 20, 30, 40, 50, 60}
	g, u := make([]float32, 3), make([]float32, 3)
	splitGateUp(g, u, gu, b, true)
	if !slices.Equal(g, []float32{11, 33, 55}) || !slices.Equal(u, []float32{22, 44, 66}) {
		t.Errorf("interleaved: gate %v, up %v", g, u)
	}
	splitGateUp(g, u, gu, nil, false)
	if !slices.Equal(g, []float32{1, 2, 3}) || !slices.Equal(u, []float32{4, 5, 6}) {
		t.Errorf("halves: gate %v, up %v", g, u)
	}
}

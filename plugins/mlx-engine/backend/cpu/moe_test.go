package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// moeVariants are the mixture-of-experts models of the exactness checks: each family, a routing tie in every
// token, more experts than a decode step reads, quantized stacked experts and a gated shared expert.
var moeVariants = []backendtest.Variant{
	backendtest.TinyVariant("qwen3_moe/f32/e8k3/ties", func(o *modelgen.Options) {
		o.Family, o.NumExperts, o.TopK, o.NormTopK, o.RouterTies = model.Qwen3MoE, 8, 3, true, true
	}),
	backendtest.TinyVariant("qwen2_moe/bf16/q4g32/mlx/shared", func(o *modelgen.Options) {
		o.Family, o.DType, o.Layout, o.SparseStep, o.RouterTies = model.Qwen2MoE, dtype.BFloat16, modelgen.LayoutMLX, 1, true
		o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
	}),
	backendtest.TinyVariant("mixtral/f16/q8g64/e8", func(o *modelgen.Options) {
		o.Family, o.DType, o.NumExperts = model.Mixtral, dtype.Float16, 8
		o.Quantization = &modelgen.Quantization{Bits: 8, GroupSize: 64}
	}),
}

// TestBackendConformanceMoE runs the conformance suite (batched = unbatched, chunked = one-shot, KV transfer)
// on mixtures of experts, with matrices expanded at load and kept as stored.
func TestBackendConformanceMoE(t *testing.T) {
	t.Parallel()
	for name, b := range map[string]backend.Backend{"float32": Backend{}, "stored": stored{}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			backendtest.Run(t, b, backendtest.Options{Exact: true, Parallel: true, Variants: moeVariants})
		})
	}
}

// TestBackendConformanceGptOSS runs the conformance suite on gpt-oss's layouts (windows, sinks, fused and
// mxfp4 experts), expanded and stored. The suite's KV transfer exports every position of every layer, which a
// sliding layer no longer holds; SlidingWindows and the engine's TestPDExact move gpt-oss's KV.
func TestBackendConformanceGptOSS(t *testing.T) {
	t.Parallel()
	for name, b := range map[string]backend.Backend{"float32": Backend{}, "stored": stored{}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			backendtest.Run(t, b, backendtest.Options{Exact: true, Parallel: true, Windows: true, Variants: gptossVariants,
				Skip: map[string]string{"KVTransferIsExact": "exports positions a sliding layer no longer holds"}})
		})
	}
}

// TestThreadsDoNotChangeResultsMoE: the grouping of rows by expert and the tasks over experts do not change a
// row's bits, whatever the number of workers, in a prefill and in a batched decode step.
func TestThreadsDoNotChangeResultsMoE(t *testing.T) {
	t.Parallel()
	for _, v := range append(slices.Clone(moeVariants), gptossVariants...) {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			mod := backendtest.Generate(t, v.Options)
			var want [][]float32
			for _, n := range []int{1, 3, 8} {
				bm := load(t, mod, backend.Options{Threads: n, PrefillChunk: 16})
				a, b := backendtest.NewCache(t, bm), backendtest.NewCache(t, bm)
				got := [][]float32{
					backendtest.Forward(t, bm, a, backendtest.Prompt(37, bm.VocabSize(), 6)...),
					backendtest.Forward(t, bm, b, backendtest.Prompt(5, bm.VocabSize(), 7)...),
				}
				l1, l2 := make([]float32, bm.VocabSize()), make([]float32, bm.VocabSize())
				if err := bm.Forward([]backend.Seq{{Cache: a, Tokens: []int32{3}, Logits: l1}, {Cache: b, Tokens: []int32{4, 5}, Logits: l2}}); err != nil {
					t.Fatal(err)
				}
				got = append(got, l1, l2)
				if want == nil {
					want = got
					continue
				}
				for i := range got {
					if !slices.Equal(got[i], want[i]) {
						t.Fatalf("%d threads: result %d differs from 1 thread's", n, i)
					}
				}
			}
		})
	}
}

// TestMoELayoutsAgree: a model stored one module per expert (Hugging Face) and the same model stacked by
// mlx-lm's sanitize (switch_mlp) give the same bits, expanded and stored.
func TestMoELayoutsAgree(t *testing.T) {
	t.Parallel()
	for _, fam := range []model.Family{model.Qwen3MoE, model.Qwen2MoE, model.Mixtral} {
		for _, q := range []*modelgen.Quantization{nil, {Bits: 4, GroupSize: 32}} {
			name := string(fam)
			if q != nil {
				name += fmt.Sprintf("/q%dg%d", q.Bits, q.GroupSize)
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				gen := func(l modelgen.Layout) *model.Model {
					return backendtest.Generate(t, backendtest.Tiny(func(o *modelgen.Options) {
						o.Family, o.DType, o.Quantization, o.Layout = fam, dtype.BFloat16, q, l
					}))
				}
				hf, mlx := gen(modelgen.LayoutHF), gen(modelgen.LayoutMLX)
				sparse := 0
				for sparse < len(hf.Layers)-1 && hf.Layers[sparse].MoE == nil {
					sparse++
				}
				if hf.Layers[sparse].MoE == nil || hf.Layers[sparse].MoE.Gate.Stacked != nil || mlx.Layers[sparse].MoE.Gate.Stacked == nil {
					t.Fatal("the layouts did not load as per-expert and stacked")
				}
				if hf.NumParams() != mlx.NumParams() || hf.WeightBytes() != mlx.WeightBytes() || hf.ActiveParams() != mlx.ActiveParams() {
					t.Errorf("params %d/%d, bytes %d/%d, active %d/%d", hf.NumParams(), mlx.NumParams(), hf.WeightBytes(), mlx.WeightBytes(), hf.ActiveParams(), mlx.ActiveParams())
				}
				sameBits(t, hf, mlx, "per-expert", "stacked")
			})
		}
	}
}

// sameBits fails t unless models a and b (layouts named an and bn) give the same logits, bit for bit, for a
// 24-token prompt, with the weights expanded and as stored.
func sameBits(t *testing.T, a, b *model.Model, an, bn string) {
	t.Helper()
	p := backendtest.Prompt(24, a.Config.VocabSize, 2)
	for _, w := range []backend.Weights{backend.WeightsFloat32, backend.WeightsStored} {
		ba, bb := load(t, a, backend.Options{Weights: w}), load(t, b, backend.Options{Weights: w})
		la, lb := backendtest.Forward(t, ba, backendtest.NewCache(t, ba), p...), backendtest.Forward(t, bb, backendtest.NewCache(t, bb), p...)
		for i := range la {
			if math.Float32bits(la[i]) != math.Float32bits(lb[i]) {
				t.Fatalf("%s: logit %d: %s %v, %s %v", w, i, an, la[i], bn, lb[i])
			}
		}
	}
}

// TestMoEDecodeReadsChosenExperts: a decode step's tasks touch only the experts its row chose, and a prefill
// chunk's touch each chosen expert's matrices once (one task per output tile, whatever the rows).
func TestMoEDecodeReadsChosenExperts(t *testing.T) {
	t.Parallel()
	// 8 experts, top 3, last layer sparse; gpt-oss's fused mxfp4 experts, top 2.
	for _, v := range []backendtest.Variant{moeVariants[0], gptossVariants[0]} {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			testDecodeReadsChosenExperts(t, v)
		})
	}
}

func testDecodeReadsChosenExperts(t *testing.T, v backendtest.Variant) {
	mod := backendtest.Generate(t, v.Options)
	bm := load(t, mod, backend.Options{Threads: 2}).(*cpuModel)
	c := backendtest.NewCache(t, bm)
	var spec *model.MoESpec
	for i := range mod.Layers {
		if s := mod.Layers[i].Spec.FFN.MoE; s != nil {
			spec = s
		}
	}
	k, inter := spec.TopK, spec.Intermediate
	check := func(rows int) {
		s := &bm.moeScratch
		chosen := map[int]bool{}
		for _, e := range s.ids[:rows*k] {
			chosen[int(e)] = true
		}
		tiles := map[[2]int]int{}
		for _, tk := range s.tasks { // the last layer's down projections
			if !chosen[tk.e] {
				t.Errorf("%d rows: a task reads expert %d, which no row chose (chose %v)", rows, tk.e, s.ids[:rows*k])
			}
			tiles[[2]int{tk.e, tk.o0}]++
			if len(tk.x) != s.count[tk.e]*inter {
				t.Errorf("expert %d: task over %d inputs, %d rows chose it", tk.e, len(tk.x)/inter, s.count[tk.e])
			}
		}
		for tile, n := range tiles {
			if n != 1 {
				t.Errorf("%d rows: expert %d tile %d read %d times", rows, tile[0], tile[1], n)
			}
		}
		if c := taskRows(rows); len(tiles) != len(chosen)*((mod.Config.HiddenSize+c-1)/c) {
			t.Errorf("%d rows: %d tiles for %d chosen experts", rows, len(tiles), len(chosen))
		}
	}
	backendtest.Forward(t, bm, c, backendtest.Prompt(20, bm.VocabSize(), 1)...)
	check(20)
	backendtest.Forward(t, bm, c, 7)
	check(1)
	if c := taskRows(1); len(bm.moeScratch.tasks) != k*((mod.Config.HiddenSize+c-1)/c) {
		t.Errorf("a decode step ran %d down tasks, want %d experts' worth", len(bm.moeScratch.tasks), k)
	}
}

// TestRoute: softmax, the k largest with ties to the lower expert index, renormalisation, ascending order.
func TestRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		logits  []float32
		k       int
		norm    bool
		ids     []int32
		weights []float32 // nil: only the ids are checked
	}{
		{"distinct", []float32{0, 3, 1, 2}, 2, false, []int32{1, 3}, nil},
		{"tie at the boundary goes to the lower index", []float32{1, 5, 1, 1}, 2, false, []int32{0, 1}, nil},
		{"all tied", []float32{2, 2, 2, 2}, 3, true, []int32{0, 1, 2}, []float32{1.0 / 3, 1.0 / 3, 1.0 / 3}},
		{"renormalised", []float32{0, 0, float32(math.Log(3))}, 2, true, []int32{0, 2}, []float32{0.25, 0.75}},
		{"raw softmax", []float32{0, 0, 0, 0}, 1, false, []int32{0}, []float32{0.25}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, w := make([]int32, tc.k), make([]float32, tc.k)
			route(append([]float32(nil), tc.logits...), make([]float32, len(tc.logits)), tc.norm, ids, w)
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

//go:build mlx

package mlx

import (
	"math"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// refTolerance is the largest max |Δlogit| relative to max(1, max |logit|) between this backend (computing in
// float32) and the float64 reference: the cpu backend's tolerance doubled, for the summation orders of MLX's
// kernels and its float32 RoPE angles.
func refTolerance(d dtype.DType) float64 {
	if d == dtype.Float32 {
		return 2e-5
	}
	return 1e-3
}

// matchReference runs m on MLX (float32 compute, prefill in chunks of 5, then 48 greedy tokens) and checks
// every step's greedy token against the float64 reference and the logits within refTolerance; then the same
// run on the cpu backend must give the same tokens, with logits within tolerance of MLX's (unless the cpu
// backend refuses the model: it does not compute gpt-oss's experts).
func matchReference(t *testing.T, m *model.Model) {
	t.Helper()
	ref := backendtest.NewReference(t, m)
	prompt := backendtest.Prompt(24, m.Config.VocabSize, 7)
	bm := loadFloat32(t, m, backend.Options{PrefillChunk: 5})
	c := backendtest.NewCache(t, bm)
	toks, logits := backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, prompt...), 48)
	want := ref.Logits(append(slices.Clone(prompt), toks...))
	worst := 0.0
	for i, got := range logits[:len(toks)] {
		w := want[len(prompt)-1+i]
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
	t.Logf("max relative |Δlogit| against the reference = %.2e", worst)
	if worst > refTolerance(m.DType) {
		t.Errorf("MLX differs from the reference by %.3e > %.0e", worst, refTolerance(m.DType))
	}
	cpuModel, err := (cpu.Backend{}).Load(m, backend.Options{PrefillChunk: 5})
	if err != nil {
		t.Logf("not compared with the cpu backend: %v", err)
		return
	}
	t.Cleanup(func() { cpuModel.Close() })
	cm := cpuModel
	cc := backendtest.NewCache(t, cm)
	cpuToks, cpuLogits := backendtest.Greedy(t, cm, cc, backendtest.Forward(t, cm, cc, prompt...), 48)
	if !slices.Equal(cpuToks, toks) {
		t.Fatalf("greedy tokens differ:\nmlx %v\ncpu %v", toks, cpuToks)
	}
	worst = 0
	for i := range logits {
		worst = max(worst, backendtest.RelDiff(logits[i], cpuLogits[i]))
	}
	t.Logf("max relative |Δlogit| against the cpu backend = %.2e", worst)
	if worst > tolerance(m.DType) {
		t.Errorf("MLX differs from the cpu backend by %.3e > %.0e", worst, tolerance(m.DType))
	}
}

// TestBlocksMatchReference runs the block variants (dense models with the specs of the newer families) on MLX
// against the float64 reference and the cpu backend.
func TestBlocksMatchReference(t *testing.T) {
	for _, v := range backendtest.BlockVariants {
		t.Run(v.Name, func(t *testing.T) {
			m := backendtest.BlockModel(t, v)
			matchReference(t, m)
		})
	}
}

// TestFamiliesMatchReference runs the tiny models of the families built from these blocks (generated directly)
// against the reference and the cpu backend.
func TestFamiliesMatchReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts modelgen.Options
	}{
		{"gemma3_text/f32", modelgen.TinyFamily(model.Gemma3Text)},
		{"gemma3_text/bf16", func() modelgen.Options {
			o := modelgen.TinyFamily(model.Gemma3Text)
			o.DType = dtype.BFloat16
			return o
		}()},
		{"gpt_oss/f32", modelgen.TinyFamily(model.GptOSS)},
		{"gpt_oss/bf16/mlx", func() modelgen.Options {
			o := modelgen.TinyFamily(model.GptOSS)
			o.DType, o.Layout = dtype.BFloat16, modelgen.LayoutMLX
			return o
		}()},
		{"gpt_oss/bf16/mxfp4", func() modelgen.Options {
			o := modelgen.TinyFamily(model.GptOSS)
			o.DType, o.ExpertsMXFP4 = dtype.BFloat16, true
			return o
		}()},
		{"gpt_oss/bf16/mlx/mxfp4+q8g32", func() modelgen.Options {
			o := modelgen.TinyFamily(model.GptOSS)
			o.DType, o.Layout, o.ExpertsMXFP4 = dtype.BFloat16, modelgen.LayoutMLX, true
			o.Quantization = &modelgen.Quantization{Bits: 8, GroupSize: 32}
			return o
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := backendtest.Generate(t, tc.opts)
			if !m.Config.Arch.HasWindows() {
				t.Fatal("the model has no sliding layers")
			}
			matchReference(t, m)
		})
	}
}

// TestSlidingBufferBounded: a sliding layer's buffer never holds more than its window plus a prefill chunk,
// whether the positions come from a chunked prefill, decoding, a clone or an import, while full layers hold
// every position.
func TestSlidingBufferBounded(t *testing.T) {
	const window, chunk, n = 8, 16, 300
	mod := backendtest.GenerateWindowed(t, backendtest.Tiny(func(o *modelgen.Options) { o.NumLayers = 4 }), window, 0, window, 0)
	m := loadFloat32(t, mod, backend.Options{PrefillChunk: chunk})
	p := backendtest.Prompt(n+40, mod.Config.VocabSize, 5)
	c := backendtest.NewCache(t, m)
	logits := backendtest.Forward(t, m, c, p[:n]...)
	backendtest.Greedy(t, m, c, logits, 40)
	clone, err := c.Clone(c.Len())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(clone.Release)
	imported := backendtest.NewCache(t, m)
	l := m.KVLayout()
	for layer, ly := range l.Layers {
		from := 0
		if ly.Kind == backend.KVSliding {
			from = c.Len() - window
		}
		tb := l.LayerTokenBytes(layer)
		k, v := make([]byte, (c.Len()-from)*tb), make([]byte, (c.Len()-from)*tb)
		if err := c.ExportKV(layer, from, c.Len(), k, v); err != nil {
			t.Fatal(err)
		}
		if err := imported.ImportKV(layer, from, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := backendtest.Forward(t, m, imported, p[n]), backendtest.Forward(t, m, c, p[n]); !slices.Equal(got, want) {
		t.Errorf("the imported cache continues differently from its source by %.2e", backendtest.RelDiff(got, want))
	}
	for name, bc := range map[string]backend.Cache{"forward": c, "clone": clone, "import": imported} {
		cc := bc.(*cache)
		for i, ly := range l.Layers {
			got := cc.layers[i].cap
			if ly.Kind == backend.KVSliding && got > window+chunk {
				t.Errorf("%s: sliding layer %d holds a buffer of %d positions, more than %d + %d", name, i, got, window, chunk)
			}
			if ly.Kind == backend.KVFull && got < cc.Len() {
				t.Errorf("%s: full layer %d holds %d positions of %d", name, i, got, cc.Len())
			}
		}
	}
}

// moeVariants are the mixture-of-experts models the MLX backend is checked on (the cpu backend's): each family,
// a routing tie in every token, more experts than a decode step reads, experts one tensor each and stacked,
// quantized experts and a gated shared expert.
var moeVariants = []backendtest.Variant{
	backendtest.TinyVariant("qwen3_moe/f32/e8k3/ties", func(o *modelgen.Options) {
		o.Family, o.NumExperts, o.TopK, o.NormTopK, o.RouterTies = model.Qwen3MoE, 8, 3, true, true
	}),
	backendtest.TinyVariant("qwen3_moe/bf16/mlx", func(o *modelgen.Options) {
		o.Family, o.DType, o.Layout, o.NormTopK = model.Qwen3MoE, dtype.BFloat16, modelgen.LayoutMLX, true
	}),
	backendtest.TinyVariant("qwen2_moe/bf16/q4g32/mlx/shared", func(o *modelgen.Options) {
		o.Family, o.DType, o.Layout, o.SparseStep, o.RouterTies = model.Qwen2MoE, dtype.BFloat16, modelgen.LayoutMLX, 1, true
		o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
	}),
	backendtest.TinyVariant("qwen2_moe/f32/shared", func(o *modelgen.Options) { o.Family = model.Qwen2MoE }),
	backendtest.TinyVariant("mixtral/f16/q8g64/e8", func(o *modelgen.Options) {
		o.Family, o.DType, o.NumExperts = model.Mixtral, dtype.Float16, 8
		o.Quantization = &modelgen.Quantization{Bits: 8, GroupSize: 64}
	}),
	backendtest.TinyVariant("mixtral/f32", func(o *modelgen.Options) { o.Family = model.Mixtral }),
}

// TestMoEMatchesReference runs the mixture-of-experts variants on MLX against the reference and the cpu
// backend.
func TestMoEMatchesReference(t *testing.T) {
	for _, v := range moeVariants {
		t.Run(v.Name, func(t *testing.T) {
			matchReference(t, backendtest.Generate(t, v.Options))
		})
	}
}

// TestBackendConformanceMoE runs the conformance suite (batched against unbatched, chunked against one-shot,
// KV transfer) on the mixtures of experts.
func TestBackendConformanceMoE(t *testing.T) {
	backendtest.Run(t, Backend{}, backendtest.Options{Tolerance: tolerance, Windows: true, Variants: moeVariants})
}

// TestSortedExpertsMatchReference: a prefill long enough that its (row, expert) pairs are sorted by expert
// before the expert products (sortedPairs) gives the reference's logits at its last position, as the unsorted
// path of the chunked runs above does.
func TestSortedExpertsMatchReference(t *testing.T) {
	variants := append(slices.Clone(moeVariants), backendtest.Variant{Name: "gpt_oss/bf16/mxfp4", Options: func() modelgen.Options {
		o := modelgen.TinyFamily(model.GptOSS)
		o.DType, o.ExpertsMXFP4 = dtype.BFloat16, true
		return o
	}()})
	for _, v := range variants {
		t.Run(v.Name, func(t *testing.T) {
			m := backendtest.Generate(t, v.Options)
			prompt := backendtest.Prompt(40, m.Config.VocabSize, 3) // 40 rows × k ≥ 2 experts ≥ sortedPairs
			bm := loadFloat32(t, m, backend.Options{})
			got := backendtest.Forward(t, bm, backendtest.NewCache(t, bm), prompt...)
			want := backendtest.NewReference(t, m).Logits(prompt)[len(prompt)-1]
			d, mx := 0.0, 1.0
			for j := range got {
				d = math.Max(d, math.Abs(float64(got[j])-want[j]))
				mx = math.Max(mx, math.Abs(want[j]))
			}
			t.Logf("max relative |Δlogit| against the reference = %.2e", d/mx)
			if d/mx > refTolerance(m.DType) || backendtest.Argmax(got) != backendtest.Argmax(want) {
				t.Errorf("sorted experts differ from the reference by %.3e (argmax %d, reference %d)", d/mx, backendtest.Argmax(got), backendtest.Argmax(want))
			}
		})
	}
}

package cpu

import (
	"slices"
	"strconv"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// gemmaVariant is modelgen.TinyFamily(f) (windows of 8, a full layer every 3, two RoPE bases, linear scaling on
// full layers, query_pre_attn_scalar ≠ head_dim, (1+w) norms, an embedding scale that is not a bfloat16)
// changed by mod.
func gemmaVariant(name string, f model.Family, mod func(*modelgen.Options)) backendtest.Variant {
	o := modelgen.TinyFamily(f)
	if mod != nil {
		mod(&o)
	}
	return backendtest.Variant{Name: name, Options: o}
}

// gemmaVariants are the Gemma 3 models of the end-to-end checks: both families, both checkpoint layouts,
// float32, bfloat16 and affine 4-bit.
var gemmaVariants = []backendtest.Variant{
	gemmaVariant("gemma3_text/hf/f32", model.Gemma3Text, func(o *modelgen.Options) { o.DType = dtype.Float32 }),
	gemmaVariant("gemma3_text/hf/bf16", model.Gemma3Text, func(o *modelgen.Options) { o.DType = dtype.BFloat16 }),
	gemmaVariant("gemma3_text/hf/bf16/q4g32", model.Gemma3Text, func(o *modelgen.Options) {
		o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 4, GroupSize: 32}
	}),
	gemmaVariant("gemma3/hf/f32", model.Gemma3, func(o *modelgen.Options) { o.DType = dtype.Float32 }),
	gemmaVariant("gemma3/mlx/bf16", model.Gemma3, func(o *modelgen.Options) { o.DType, o.Layout = dtype.BFloat16, modelgen.LayoutMLX }),
	gemmaVariant("gemma3/mlx/bf16/q4g32", model.Gemma3, func(o *modelgen.Options) {
		o.DType, o.Layout = dtype.BFloat16, modelgen.LayoutMLX
		o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
	}),
}

// TestGemma3GreedyMatchesReference: on every kernel path, a Gemma 3 model prefilled with 16 tokens in chunks
// of 5, fed 32 more one at a time and then decoded greedily to 72 positions (nine windows of 8) picks the
// float64 reference's token after each of the 56 positions from the prefill's last on, and its logits stay within the
// dtype's tolerance of the reference's all along. The fed tokens keep the check from resting on a short cycle
// that a tiny model's greedy decoding can fall into.
func TestGemma3GreedyMatchesReference(t *testing.T) {
	t.Parallel()
	const prefill, fed, total = 16, 48, 72
	for _, v := range gemmaVariants {
		for _, k := range kernelPaths() {
			t.Run(v.Name+"/"+pathNames[k], func(t *testing.T) {
				t.Parallel()
				m := backendtest.Generate(t, v.Options)
				bm, err := loadOn(m, backend.Options{PrefillChunk: 5}, k)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { bm.Close() })
				c := backendtest.NewCache(t, bm)
				tokens := backendtest.Prompt(fed, m.Config.VocabSize, 21)
				got := [][]float32{backendtest.Forward(t, bm, c, tokens[:prefill]...)}
				for _, tok := range tokens[prefill:] {
					got = append(got, backendtest.Forward(t, bm, c, tok))
				}
				gen, dec := backendtest.Greedy(t, bm, c, got[len(got)-1], total-fed)
				got = append(got, dec[1:len(dec)-1]...)
				tokens = append(tokens, gen...)
				want := backendtest.NewReference(t, m).Logits(tokens)
				worst := 0.0
				for i, g := range got {
					pos := prefill - 1 + i
					w := want[pos]
					worst = max(worst, maxAbsDiff(g, w)/max(1, maxAbs(w)))
					if r, b := backendtest.Argmax(w), backendtest.Argmax(g); r != b {
						t.Errorf("after position %d: token %d, the reference's %d", pos, b, r)
					}
				}
				t.Logf("max relative |Δlogit| = %.2e over %d positions; greedy %v", worst, len(got), gen)
				if worst > tolerance(m.DType) {
					t.Errorf("backend differs from the reference by %.3e > %.0e", worst, tolerance(m.DType))
				}
			})
		}
	}
}

// TestGemma3Exact: for every Gemma 3 variant, on every kernel path, a 70-token prompt gives the same bits
// prefilled at once, in chunks shorter and longer than the window, beside another sequence in a batch, on any
// number of threads, and with the matrices kept as stored; and so does the greedy continuation.
func TestGemma3Exact(t *testing.T) {
	t.Parallel()
	for _, v := range gemmaVariants {
		for _, k := range kernelPaths() {
			t.Run(v.Name+"/"+pathNames[k], func(t *testing.T) {
				t.Parallel()
				m := backendtest.Generate(t, v.Options)
				on := func(opts backend.Options) backend.Model {
					bm, err := loadOn(m, opts, k)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { bm.Close() })
					return bm
				}
				p := backendtest.Prompt(70, m.Config.VocabSize, 22)
				oneShot := on(backend.Options{PrefillChunk: 70, Threads: 1})
				c := backendtest.NewCache(t, oneShot)
				want := backendtest.Forward(t, oneShot, c, p...)
				wantGreedy, _ := backendtest.Greedy(t, oneShot, c, want, 12)
				check := func(what string, bm backend.Model) {
					t.Helper()
					c := backendtest.NewCache(t, bm)
					got := backendtest.Forward(t, bm, c, p...)
					if !slices.Equal(got, want) {
						t.Errorf("%s: logits differ from one-shot by %.2e", what, backendtest.RelDiff(got, want))
						return
					}
					if g, _ := backendtest.Greedy(t, bm, c, got, 12); !slices.Equal(g, wantGreedy) {
						t.Errorf("%s: greedy continuation %v, want %v", what, g, wantGreedy)
					}
				}
				for _, chunk := range []int{1, 3, 8, 9, 20} {
					check("chunk "+strconv.Itoa(chunk), on(backend.Options{PrefillChunk: chunk, Threads: 2}))
				}
				for _, n := range []int{3, 8} {
					check("threads "+strconv.Itoa(n), on(backend.Options{PrefillChunk: 16, Threads: n}))
				}
				check("stored", on(backend.Options{PrefillChunk: 7, Weights: backend.WeightsStored}))

				// A batch: the prompt in steps of 30 and 40 tokens beside another sequence's decode and prefill.
				bm := on(backend.Options{PrefillChunk: 16})
				a, b := backendtest.NewCache(t, bm), backendtest.NewCache(t, bm)
				other := backendtest.Prompt(50, m.Config.VocabSize, 23)
				backendtest.Forward(t, bm, b, other[:40]...)
				logits, bl := make([]float32, bm.VocabSize()), make([]float32, bm.VocabSize())
				if err := bm.Forward([]backend.Seq{{Cache: b, Tokens: other[40:41]}, {Cache: a, Tokens: p[:30]}}); err != nil {
					t.Fatal(err)
				}
				if err := bm.Forward([]backend.Seq{{Cache: a, Tokens: p[30:], Logits: logits}, {Cache: b, Tokens: other[41:], Logits: bl}}); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(logits, want) {
					t.Errorf("batched logits differ from one-shot by %.2e", backendtest.RelDiff(logits, want))
				}
				if w := backendtest.Forward(t, bm, backendtest.NewCache(t, bm), other...); !slices.Equal(bl, w) {
					t.Errorf("the other sequence's batched logits differ from alone by %.2e", backendtest.RelDiff(bl, w))
				}
			})
		}
	}
}

// TestGemma3LayoutsAgree: the Hugging Face and mlx-community layouts of one seed (a multimodal checkpoint's
// text model under model.language_model. or language_model.model.) give the same bits, and the text-only
// family the same as the multimodal one.
func TestGemma3LayoutsAgree(t *testing.T) {
	t.Parallel()
	for _, q := range []*modelgen.Quantization{nil, {Bits: 4, GroupSize: 32}} {
		var want []float32
		for _, v := range []struct {
			f model.Family
			l modelgen.Layout
		}{{model.Gemma3Text, modelgen.LayoutHF}, {model.Gemma3, modelgen.LayoutHF}, {model.Gemma3, modelgen.LayoutMLX}} {
			o := modelgen.TinyFamily(v.f)
			o.DType, o.Layout, o.Quantization = dtype.BFloat16, v.l, q
			m := backendtest.Generate(t, o)
			bm := load(t, m, backend.Options{PrefillChunk: 9})
			got := backendtest.Forward(t, bm, backendtest.NewCache(t, bm), backendtest.Prompt(40, m.Config.VocabSize, 24)...)
			if want == nil {
				want = got
			} else if !slices.Equal(got, want) {
				t.Errorf("%s/%s quantized %v: logits differ from gemma3_text's by %.2e", v.f, v.l, q != nil, backendtest.RelDiff(got, want))
			}
		}
	}
}

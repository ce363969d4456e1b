package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// blockVariant is a generated dense model whose arch a test changes in memory (specs, and weights for the
// slots and sinks the dense checkpoint lacks), to exercise blocks before the families that use them exist.
type blockVariant struct {
	name string
	opts func(o *modelgen.Options)
	arch func(m *model.Model, r *rand.Rand)
}

// Block modifications, composed by the variants below.
var (
	windowsOnOddLayers = func(m *model.Model, _ *rand.Rand) {
		for i := range m.Config.Arch.Layers {
			if i%2 == 1 {
				m.Config.Arch.Layers[i].Attn.Window = 8
			}
		}
	}
	windowsOnEvenLayers = func(m *model.Model, _ *rand.Rand) {
		for i := range m.Config.Arch.Layers {
			if i%2 == 0 {
				m.Config.Arch.Layers[i].Attn.Window = 8
			}
		}
	}
	// plusOne switches every norm to Gemma's (1+w) with weights around 0, and fills the two output slots.
	plusOne = func(m *model.Model, r *rand.Rand) {
		a := &m.Config.Arch
		eps := a.FinalNorm.Eps
		a.FinalNorm.Kind = model.NormRMSPlusOne
		m.Norm = randTensor("norm", a.Hidden, r, 0.1)
		for i := range a.Layers {
			s, L := &a.Layers[i], &m.Layers[i]
			s.AttnIn = &model.NormSpec{Kind: model.NormRMSPlusOne, Eps: eps}
			s.AttnOut = &model.NormSpec{Kind: model.NormRMSPlusOne, Eps: eps}
			s.FFNIn = &model.NormSpec{Kind: model.NormRMSPlusOne, Eps: eps}
			s.FFNOut = &model.NormSpec{Kind: model.NormRMSPlusOne, Eps: eps}
			L.AttnIn, L.AttnOut = randTensor("attn_in", a.Hidden, r, 0.1), randTensor("attn_out", a.Hidden, r, 0.1)
			L.FFNIn, L.FFNOut = randTensor("ffn_in", a.Hidden, r, 0.1), randTensor("ffn_out", a.Hidden, r, 0.1)
			if s.Attn.QKNorm != nil {
				s.Attn.QKNorm = &model.NormSpec{Kind: model.NormRMSPlusOne, Eps: eps}
				L.Attn.QNorm = randTensor("q_norm", s.Attn.HeadDim, r, 0.1)
				L.Attn.KNorm = randTensor("k_norm", s.Attn.HeadDim, r, 0.1)
			}
		}
	}
	// outputNormsOnly keeps the llama slots and adds RMSNorm output slots (1+w is off: an output norm that
	// multiplies by w).
	outputNormsOnly = func(m *model.Model, r *rand.Rand) {
		a := &m.Config.Arch
		for i := range a.Layers {
			s, L := &a.Layers[i], &m.Layers[i]
			s.AttnOut = &model.NormSpec{Kind: model.NormRMS, Eps: 1e-5}
			s.FFNOut = &model.NormSpec{Kind: model.NormRMS, Eps: 1e-5}
			L.AttnOut, L.FFNOut = randTensor("attn_out", a.Hidden, r, 0.5), randTensor("ffn_out", a.Hidden, r, 0.5)
		}
	}
	geglu = func(m *model.Model, _ *rand.Rand) {
		for i := range m.Config.Arch.Layers {
			m.Config.Arch.Layers[i].FFN.Act = model.ActGELUTanh
		}
	}
	// clamped uses a limit low enough that both clamps act on many elements of the tiny models' activations.
	clamped = func(m *model.Model, _ *rand.Rand) {
		for i := range m.Config.Arch.Layers {
			f := &m.Config.Arch.Layers[i].FFN
			f.Act, f.Alpha, f.Limit = model.ActClampedSwiGLU, 1.702, 0.5
		}
	}
	// yarnPartial: yarn with truncate false on half the head's dims, the rest passing through.
	yarnPartial = func(m *model.Model, _ *rand.Rand) {
		for i := range m.Config.Arch.Layers {
			at := &m.Config.Arch.Layers[i].Attn
			at.Rope = model.RopeSpec{Base: 10000, Type: model.RopeYarn, RotaryDims: at.HeadDim / 2, Factor: 4, OrigMaxPos: 16,
				BetaFast: 32, BetaSlow: 1}
		}
	}
	// twoRopes: sliding layers with a local base, full layers with linear scaling (Gemma's arrangement).
	twoRopes = func(m *model.Model, _ *rand.Rand) {
		for i := range m.Config.Arch.Layers {
			at := &m.Config.Arch.Layers[i].Attn
			if at.Window > 0 {
				at.Rope = model.RopeSpec{Base: 10000, RotaryDims: at.HeadDim}
			} else {
				at.Rope = model.RopeSpec{Base: 1e6, Type: model.RopeLinear, RotaryDims: at.HeadDim, Factor: 8}
			}
		}
	}
	otherScale = func(m *model.Model, _ *rand.Rand) {
		for i := range m.Config.Arch.Layers {
			m.Config.Arch.Layers[i].Attn.Scale = 1 / math.Sqrt(24)
		}
	}
	embedScale = func(m *model.Model, _ *rand.Rand) {
		m.Config.Arch.EmbedScale = math.Sqrt(float64(m.Config.Arch.Hidden))
	}
	// sinks are N(0, 2²) per head, so some heads are dominated by their sink.
	sinks = func(m *model.Model, r *rand.Rand) {
		for i := range m.Config.Arch.Layers {
			at := &m.Config.Arch.Layers[i].Attn
			at.Sinks = true
			m.Layers[i].Attn.Sinks = randTensor("sinks", at.Heads, r, 2)
		}
	}
)

func compose(mods ...func(*model.Model, *rand.Rand)) func(*model.Model, *rand.Rand) {
	return func(m *model.Model, r *rand.Rand) {
		for _, f := range mods {
			f(m, r)
		}
	}
}

func fourLayers(o *modelgen.Options) { o.NumLayers = 4 }

var blockVariants = []blockVariant{
	{"windows/f32", fourLayers, windowsOnOddLayers},
	{"windows/bf16/qwen3", func(o *modelgen.Options) { fourLayers(o); o.Family, o.DType = model.Qwen3, dtype.BFloat16 }, windowsOnEvenLayers},
	{"sinks/f32", nil, sinks},
	{"sinks+windows/f16/qwen2", func(o *modelgen.Options) { fourLayers(o); o.Family, o.DType = model.Qwen2, dtype.Float16 }, compose(windowsOnOddLayers, sinks)},
	{"plus-one/f32/qwen3", func(o *modelgen.Options) { o.Family = model.Qwen3 }, plusOne},
	{"output-norms/bf16", func(o *modelgen.Options) { o.DType = dtype.BFloat16 }, outputNormsOnly},
	{"geglu/f32", nil, geglu},
	{"clamped-swiglu/f32/qwen2", func(o *modelgen.Options) { o.Family = model.Qwen2 }, clamped},
	{"yarn-partial/f32", nil, yarnPartial},
	{"yarn-partial/bf16/head_dim32", func(o *modelgen.Options) { o.Family, o.DType, o.HeadDim = model.Qwen3, dtype.BFloat16, 32 }, yarnPartial},
	{"scale+embed-scale/f32", nil, compose(otherScale, embedScale)},
	{"gemma-like/bf16", func(o *modelgen.Options) { fourLayers(o); o.Family, o.DType = model.Qwen3, dtype.BFloat16 },
		compose(windowsOnEvenLayers, twoRopes, plusOne, geglu, otherScale, embedScale)},
	{"gpt-oss-like/bf16/q4g32", func(o *modelgen.Options) {
		fourLayers(o)
		o.Family, o.DType, o.Quantization = model.Qwen2, dtype.BFloat16, &modelgen.Quantization{Bits: 4, GroupSize: 32}
	}, compose(windowsOnEvenLayers, sinks, clamped, yarnPartial)},
	{"everything/f32", func(o *modelgen.Options) { fourLayers(o); o.Family = model.Qwen3 },
		compose(windowsOnOddLayers, sinks, plusOne, geglu, yarnPartial, otherScale, embedScale)},
}

// randTensor is an in-memory F32 tensor of n values N(0, sd²).
func randTensor(name string, n int, r *rand.Rand, sd float64) *safetensors.Tensor {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r.NormFloat64()*sd)))
	}
	return &safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: []int{n}, Data: b}
}

// blockModel generates v's model and changes its arch.
func blockModel(t *testing.T, v blockVariant) *model.Model {
	t.Helper()
	m := backendtest.Generate(t, backendtest.Tiny(v.opts))
	v.arch(m, rand.New(rand.NewPCG(11, 12)))
	if err := m.Config.Arch.Validate(); err != nil {
		t.Fatal(err)
	}
	if m.Config.Arch.Dense() {
		t.Fatal("the variant left the arch dense")
	}
	return m
}

// TestBlocksMatchReference checks every block against the float64 reference on models with changed specs: on
// every kernel path, a prompt prefilled in chunks of 5 and then 48 greedy tokens (72 positions: a window of 8
// is crossed 8 times) must give the reference's greedy token at every step, with logits within the reference
// test's tolerance.
func TestBlocksMatchReference(t *testing.T) {
	t.Parallel()
	for _, v := range blockVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			m := blockModel(t, v)
			ref := backendtest.NewReference(t, m)
			prompt := backendtest.Prompt(24, m.Config.VocabSize, 7)
			for _, k := range kernelPaths() {
				bm, err := loadOn(m, backend.Options{PrefillChunk: 5}, k)
				if err != nil {
					t.Fatal(err)
				}
				c := backendtest.NewCache(t, bm)
				toks, logits := backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, prompt...), 48)
				bm.Close()
				want := ref.Logits(append(slices.Clone(prompt), toks...))
				worst := 0.0
				for i, got := range logits[:len(toks)] {
					w := want[len(prompt)-1+i]
					worst = max(worst, maxAbsDiff(got, w)/max(1, maxAbs(w)))
					if r := backendtest.Argmax(w); r != toks[i] {
						t.Fatalf("%s: step %d: greedy token %d, reference %d", k, i, toks[i], r)
					}
				}
				t.Logf("%s: max relative |Δlogit| = %.2e", k, worst)
				if worst > tolerance(m.DType) {
					t.Errorf("%s: backend differs from the reference by %.3e > %.0e", k, worst, tolerance(m.DType))
				}
			}
		})
	}
}

// TestBlocksExact checks that the changed blocks keep the backend exact on every kernel path: chunked prefill
// (chunk sizes around the window of 8) equals one-shot, and two sequences decoded in one batch equal each one
// decoded alone, bit for bit, over 64 positions and more.
func TestBlocksExact(t *testing.T) {
	t.Parallel()
	for _, v := range blockVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			m := blockModel(t, v)
			a, b := backendtest.Prompt(64, m.Config.VocabSize, 8), backendtest.Prompt(41, m.Config.VocabSize, 9)
			for _, k := range kernelPaths() {
				var want []float32
				for _, chunk := range []int{64, 1, 3, 7, 8, 9} {
					bm, err := loadOn(m, backend.Options{PrefillChunk: chunk}, k)
					if err != nil {
						t.Fatal(err)
					}
					got := backendtest.Forward(t, bm, backendtest.NewCache(t, bm), a...)
					bm.Close()
					if want == nil {
						want = got
					} else if !slices.Equal(got, want) {
						t.Fatalf("%s: prefill in chunks of %d differs from one-shot", k, chunk)
					}
				}
				bm, err := loadOn(m, backend.Options{PrefillChunk: 16}, k)
				if err != nil {
					t.Fatal(err)
				}
				// Alone: each sequence prefilled and decoded for 24 tokens.
				var alone [2][][]float32
				var toks [2][]int32
				for i, p := range [][]int32{a, b} {
					c := backendtest.NewCache(t, bm)
					toks[i], alone[i] = backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, p...), 24)
				}
				// Batched: both prompts in one Forward, then both sequences' next tokens in one Forward per step.
				ca, cb := backendtest.NewCache(t, bm), backendtest.NewCache(t, bm)
				la, lb := make([]float32, bm.VocabSize()), make([]float32, bm.VocabSize())
				if err := bm.Forward([]backend.Seq{{Cache: ca, Tokens: a, Logits: la}, {Cache: cb, Tokens: b, Logits: lb}}); err != nil {
					t.Fatal(err)
				}
				for step := 0; ; step++ {
					if !slices.Equal(la, alone[0][step]) || !slices.Equal(lb, alone[1][step]) {
						t.Fatalf("%s: step %d: batched logits differ from unbatched", k, step)
					}
					if step == len(toks[0]) {
						break
					}
					la, lb = make([]float32, bm.VocabSize()), make([]float32, bm.VocabSize())
					if err := bm.Forward([]backend.Seq{
						{Cache: ca, Tokens: []int32{toks[0][step]}, Logits: la},
						{Cache: cb, Tokens: []int32{toks[1][step]}, Logits: lb},
					}); err != nil {
						t.Fatal(err)
					}
				}
				bm.Close()
			}
		})
	}
}

// TestLoadRefusesMoEWithoutExperts checks that a layer whose spec is a mixture of experts but whose weights
// are a dense MLP is refused at load with a clear error.
func TestLoadRefusesMoEWithoutExperts(t *testing.T) {
	t.Parallel()
	m := backendtest.Generate(t, backendtest.Tiny(nil))
	s := &m.Config.Arch.Layers[1]
	s.FFN.Kind, s.FFN.MoE = model.FFNMoE, &model.MoESpec{Experts: 4, TopK: 2, Intermediate: 32}
	_, err := Backend{}.Load(m, backend.Options{})
	if err == nil || err.Error() != "cpu: layer 1 has no expert weights" {
		t.Fatalf("Load: %v", err)
	}
}

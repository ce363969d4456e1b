package backendtest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// BlockVariant is a generated dense model whose arch a test changes in memory (specs, and weights for the
// slots and sinks the dense checkpoint lacks), to exercise blocks before the families that use them exist.
type BlockVariant struct {
	Name string
	Opts func(o *modelgen.Options)
	Arch func(m *model.Model, r *rand.Rand)
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

// BlockVariants are the models of the block tests of every backend: each changes the specs of a tiny dense
// model (and adds the weights the new slots need) to use the blocks of the newer families.
var BlockVariants = []BlockVariant{
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

// BlockModel generates v's model and changes its arch.
func BlockModel(t testing.TB, v BlockVariant) *model.Model {
	t.Helper()
	m := Generate(t, Tiny(v.Opts))
	v.Arch(m, rand.New(rand.NewPCG(11, 12)))
	if err := m.Config.Arch.Validate(); err != nil {
		t.Fatal(err)
	}
	if m.Config.Arch.Dense() {
		t.Fatal("the variant left the arch dense")
	}
	return m
}

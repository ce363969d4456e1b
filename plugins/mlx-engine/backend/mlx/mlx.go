//go:build mlx

package mlx

// #include "mlx/c/mlx.h"
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// Backend is the MLX backend; it registers itself as "mlx" in builds with the mlx tag.
type Backend struct{}

func init() { backend.Register(Backend{}) }

var _ backend.Backend = Backend{}

// Name is "mlx".
func (Backend) Name() string { return "mlx" }

// DefaultPrefillChunk is how many tokens one step of Forward processes by default; longer inputs are split,
// with an evaluation between steps, which bounds the activation memory of long prompts.
const DefaultPrefillChunk = 2048

// cacheStep is the granularity in positions in which KV buffers grow.
const cacheStep = 256

var errClosed = errors.New("mlx: model is closed")

// mlxModel is a model whose weights live in MLX arrays.
type mlxModel struct {
	cfg     model.Config
	kvType  dtype.DType // the model's dtype: what caches hold and the wire carries
	kvC     C.mlx_dtype
	compute C.mlx_dtype // activations and float weights
	maxCtx  int
	chunk   int
	arch    *model.Arch
	layout  backend.KVLayout
	// pipeline schedules each layer's work (async_eval) as soon as it is built, so MLX computes while Go
	// builds the next layer.
	pipeline bool
	// timed makes steps measure the time spent inside mlx-c (benchmarks).
	timed bool

	embed  linear
	lmHead *linear // &embed when the embeddings are tied
	layers []layer
	final  *norm
	// embedScale is Arch.EmbedScale as a scalar of the compute dtype (a zero handle when there is none).
	embedScale C.mlx_array
	consts     consts
	// embShifts and embMask unpack the quantized embedding's words: uint32 [32/bits] shifts 0, bits, 2·bits...
	// and the scalar 2^bits-1.
	embShifts, embMask C.mlx_array

	mu     sync.Mutex // one Forward (and cache operation) at a time; guards closed and timing
	closed bool
	timing timing
}

// linear is one weight matrix [out, in] (or the embedding table), dense or MLX-quantized.
type linear struct {
	out, in int
	w       C.mlx_array // dense: [out, in] in the compute dtype; quantized: packed uint32 [out, in*bits/32]
	wT      C.mlx_array // dense: the transposed view [in, out] that matmuls use
	scales  C.mlx_array // quantized: [out, in/group] in the compute dtype
	biases  C.mlx_array
	bias    C.mlx_array // optional [out]
	quant   *model.QuantParams
}

// consts are the scalars of the activations, in the compute dtype.
type consts struct {
	half, one, geluK, geluA C.mlx_array
}

// norm is one RMSNorm's weights in the compute dtype; Gemma's (1+w) is folded into w at load, in float32 as the
// cpu backend does. A nil *norm is an absent slot (the identity).
type norm struct {
	w   C.mlx_array
	eps float32
}

type layer struct {
	attnIn, attnOut, ffnIn, ffnOut *norm
	qNorm, kNorm                   *norm // per head, before RoPE
	q, k, v, o                     linear
	gate, up, down                 linear
	sinks                          C.mlx_array // [heads] in the compute dtype, a zero handle without sinks
	heads, kvHeads, hd             int
	rotDims, window                int
	scale                          float32
	// freqs are the RoPE periods 1/θ_i (float32 [rotDims/2]); ropeScale, when the attention factor is not 1,
	// multiplies q and k after RoPE: [hd] of the factor on the rotated dims and 1 on the rest.
	freqs, ropeScale C.mlx_array
	act              model.Act
	alpha, limit     C.mlx_array // clamped SwiGLU's α and limit as compute-dtype scalars
	moe              *moeLayer   // a sparse feed-forward block instead of gate, up and down
	// qGate, for gated attention (AttnSpec.OutputGate), is q_proj's gate rows [heads·head_dim, hidden]: the
	// attention output of each head is multiplied by σ(its gate) before o_proj; q then holds the query rows.
	qGate linear
	// lin is a linear-attention (Gated DeltaNet) layer's block, instead of the attention's weights.
	lin     *linearAttn
	linDims linearDims
	// qkv and gateUp are q|k|v and gate|up joined along the output dimension, when their formats allow
	// (then q, k, v, or gate and up, are empty): one matmul per group instead of three or two, which on a GPU
	// is fewer kernel launches per decode step.
	qkv, gateUp linear
}

var _ backend.Model = (*mlxModel)(nil)

// loadOptions are the knobs beyond backend.Options, set from the environment (DUET_MLX_COMPUTE) or by tests.
type loadOptions struct {
	// computeModelDType computes in the model's dtype (bfloat16/float16) instead of float32. The default is
	// float32 on the CPU, where MLX's 16-bit matrix kernels are slow and float32 ones use BLAS, and the model's
	// dtype on a GPU, as mlx-lm does.
	computeModelDType bool
}

func defaultLoadOptions() (loadOptions, error) {
	if err := do(func() error { return nil }); err != nil {
		return loadOptions{}, err
	}
	o := loadOptions{computeModelDType: device.gpu}
	switch v := strings.ToLower(os.Getenv("DUET_MLX_COMPUTE")); v {
	case "", "auto":
	case "float32":
		o.computeModelDType = false
	case "model":
		o.computeModelDType = true
	default:
		return o, fmt.Errorf("mlx: DUET_MLX_COMPUTE=%q: want float32, model or auto", v)
	}
	return o, nil
}

// Load copies m's weights into MLX arrays (converted to the compute dtype; quantized weights stay packed) and
// evaluates them once. The weights are built from the tensors package model already validated and bound, rather
// than read again with mlx_load_safetensors: the names, shards, tied embeddings and quantization overrides are
// resolved there, and a copy from the memory map is as fast as MLX's own reader.
func (Backend) Load(m *model.Model, opts backend.Options) (backend.Model, error) {
	if opts.MemoryLimit > 0 {
		if err := SetMemoryLimit(uint64(opts.MemoryLimit)); err != nil {
			return nil, err
		}
	}
	lo, err := defaultLoadOptions()
	if err != nil {
		return nil, err
	}
	return loadModel(m, opts, lo)
}

func loadModel(m *model.Model, opts backend.Options, lo loadOptions) (*mlxModel, error) {
	if err := implemented(m); err != nil {
		return nil, fmt.Errorf("mlx: model_type %q: %w", m.Config.Family, err)
	}
	c := m.Config
	chunk := opts.PrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	kvC, err := mlxDType(string(m.DType))
	if err != nil {
		return nil, err
	}
	mm := &mlxModel{cfg: c, kvType: m.DType, kvC: kvC, compute: C.MLX_FLOAT32, maxCtx: backend.ContextLimit(c), chunk: chunk,
		pipeline: true}
	mm.arch = &mm.cfg.Arch
	mm.layout = backend.LayoutOf(mm.arch, m.DType)
	if lo.computeModelDType {
		mm.compute = kvC
	}
	err = do(func() error {
		err := mm.loadWeights(m)
		if err != nil {
			mm.freeWeights()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mlx: load %s: %w", m.Dir, err)
	}
	return mm, nil
}

// implemented checks that the arch uses only blocks this backend computes, with one KV head count and head
// dim for every layer (Config's), which is the shape its cache holds. What it refuses it names.
func implemented(m *model.Model) error {
	c := &m.Config
	if len(c.Arch.Layers) != len(m.Layers) {
		return fmt.Errorf("%d layer specs for %d layers", len(c.Arch.Layers), len(m.Layers))
	}
	for i := range c.Arch.Layers {
		l := &c.Arch.Layers[i]
		switch {
		case l.Kind == model.LayerLinear:
			if l.DeltaNet == nil || m.Layers[i].DeltaNet == nil {
				return fmt.Errorf("layer %d: a linear-attention layer without its sizes or weights", i)
			}
		case l.Kind != model.LayerAttention:
			return fmt.Errorf("layer %d: layer kind %s is not supported by the mlx backend", i, l.Kind)
		case m.Layers[i].Attn == nil:
			return fmt.Errorf("layer %d has no attention weights", i)
		case l.Attn.OutputGate && (m.Layers[i].Attn.Query == nil || m.Layers[i].Attn.Gate == nil):
			return fmt.Errorf("layer %d: gated attention without q_proj's query and gate rows", i)
		}
		if l.Kind == model.LayerAttention && (l.Attn.KVHeads != c.NumKVHeads || l.Attn.HeadDim != c.HeadDim) {
			return fmt.Errorf("layer %d: %d KV heads of %d dims, the model's KV layout has %d of %d", i, l.Attn.KVHeads, l.Attn.HeadDim, c.NumKVHeads, c.HeadDim)
		}
		switch l.FFN.Act {
		case model.ActSiLU, model.ActGELUTanh:
		case model.ActClampedSwiGLU:
			if !(l.FFN.Limit > 0) || l.FFN.Alpha == 0 {
				return fmt.Errorf("layer %d: clamped SwiGLU with alpha %g, limit %g", i, l.FFN.Alpha, l.FFN.Limit)
			}
		default:
			return fmt.Errorf("layer %d: activation %d is not implemented", i, l.FFN.Act)
		}
		if l.FFN.Kind == model.FFNMoE && m.Layers[i].MoE == nil {
			return fmt.Errorf("layer %d has no expert weights", i)
		}
		if l.FFN.Kind == model.FFNDense && m.Layers[i].MLP == nil {
			return fmt.Errorf("layer %d has no MLP weights", i)
		}
	}
	return nil
}

// loadWeights runs on the MLX thread.
func (m *mlxModel) loadWeights(src *model.Model) error {
	var err error
	if m.embed, err = m.loadLinear(src.Embed); err != nil {
		return err
	}
	m.lmHead = &m.embed
	if src.LMHead != src.Embed {
		l, err := m.loadLinear(src.LMHead)
		if err != nil {
			return err
		}
		m.lmHead = &l
	}
	if m.final, err = m.loadNorm(&m.arch.FinalNorm, src.Norm); err != nil {
		return err
	}
	if m.arch.EmbedScale != 0 {
		if m.embedScale, err = m.scalar(m.arch.EmbedScale); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		dst *C.mlx_array
		v   float64
	}{{&m.consts.half, 0.5}, {&m.consts.one, 1}, {&m.consts.geluK, math.Sqrt(2 / math.Pi)}, {&m.consts.geluA, 0.044715}} {
		if *c.dst, err = m.scalar(c.v); err != nil {
			return err
		}
	}
	m.layers = make([]layer, len(src.Layers))
	for i := range src.Layers {
		if err := m.loadLayer(i, &src.Layers[i]); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	if q := m.embed.quant; q != nil && q.Mode == model.ModeAffine {
		per := 32 / q.Bits
		b := make([]byte, 4*per)
		for i := 0; i < per; i++ {
			putU32(b[4*i:], uint32(i*q.Bits))
		}
		if m.embShifts, err = newArray(b, []int{per}, C.MLX_UINT32); err != nil {
			return err
		}
		putU32(b, uint32(1)<<q.Bits-1)
		if m.embMask, err = newArray(b[:4], nil, C.MLX_UINT32); err != nil {
			return err
		}
	}
	return nil
}

// loadLayer prepares layer i from s, its spec and weights.
func (m *mlxModel) loadLayer(i int, s *model.Layer) error {
	spec, d := &m.arch.Layers[i], &m.layers[i]
	at := &spec.Attn
	var err error
	type normSlot struct {
		dst  **norm
		spec *model.NormSpec
		t    *safetensors.Tensor
	}
	norms := []normSlot{{&d.attnIn, spec.AttnIn, s.AttnIn}, {&d.attnOut, spec.AttnOut, s.AttnOut},
		{&d.ffnIn, spec.FFNIn, s.FFNIn}, {&d.ffnOut, spec.FFNOut, s.FFNOut}}
	if spec.Kind == model.LayerAttention {
		norms = append(norms, normSlot{&d.qNorm, at.QKNorm, s.Attn.QNorm}, normSlot{&d.kNorm, at.QKNorm, s.Attn.KNorm})
	}
	for _, v := range norms {
		if *v.dst, err = m.loadNorm(v.spec, v.t); err != nil {
			return err
		}
	}
	d.act = spec.FFN.Act
	if d.act == model.ActClampedSwiGLU {
		if d.alpha, err = m.scalar(spec.FFN.Alpha); err != nil {
			return err
		}
		if d.limit, err = m.scalar(spec.FFN.Limit); err != nil {
			return err
		}
	}
	if spec.Kind == model.LayerLinear {
		if err := m.loadDeltaNet(d, spec.DeltaNet, s.DeltaNet); err != nil {
			return err
		}
		return m.loadFFN(d, spec, s)
	}
	if at.Sinks {
		if s.Attn.Sinks == nil {
			return errors.New("attention sinks without a sinks tensor")
		}
		if d.sinks, err = m.loadTensor(s.Attn.Sinks, m.compute); err != nil {
			return err
		}
	}
	d.heads, d.kvHeads, d.hd = at.Heads, at.KVHeads, at.HeadDim
	d.rotDims, d.window, d.scale = at.Rope.RotaryDims, at.Window, float32(at.Scale)
	inv, af := at.Rope.InvFreq()
	b := make([]byte, 4*len(inv))
	for j, f := range inv {
		putF32(b[4*j:], float32(1/f))
	}
	if d.freqs, err = newArray(b, []int{len(inv)}, C.MLX_FLOAT32); err != nil {
		return err
	}
	if af != 1 {
		// The cpu backend scales cos and sin by the factor in float64 and rounds once; this rounds the
		// factor to float32 and multiplies the rotated values, a difference of an ulp.
		b := make([]byte, 4*d.hd)
		for j := 0; j < d.hd; j++ {
			f := 1.0
			if j < d.rotDims {
				f = af
			}
			putF32(b[4*j:], float32(f))
		}
		if d.ropeScale, err = newArray(b, []int{d.hd}, C.MLX_FLOAT32); err != nil {
			return err
		}
	}
	pairs := []struct {
		dst *linear
		src *model.Linear
	}{{&d.k, s.Attn.K}, {&d.v, s.Attn.V}, {&d.o, s.Attn.O}}
	if at.OutputGate {
		if d.q, err = m.loadProjection(s.Attn.Query); err != nil {
			return err
		}
		if d.qGate, err = m.loadProjection(s.Attn.Gate); err != nil {
			return err
		}
	} else if d.q, err = m.loadLinear(s.Attn.Q); err != nil {
		return err
	}
	for _, p := range pairs {
		if *p.dst, err = m.loadLinear(p.src); err != nil {
			return err
		}
	}
	if d.qkv, err = fuse(&d.q, &d.k, &d.v); err != nil {
		return err
	}
	return m.loadFFN(d, spec, s)
}

// loadFFN loads layer d's feed-forward block, dense or sparse.
func (m *mlxModel) loadFFN(d *layer, spec *model.LayerSpec, s *model.Layer) error {
	var err error
	if spec.FFN.Kind == model.FFNMoE {
		d.moe, err = m.loadMoE(s.MoE, spec.FFN.MoE)
		return err
	}
	for _, p := range []struct {
		dst *linear
		src *model.Linear
	}{{&d.gate, s.MLP.Gate}, {&d.up, s.MLP.Up}, {&d.down, s.MLP.Down}} {
		if *p.dst, err = m.loadLinear(p.src); err != nil {
			return err
		}
	}
	d.gateUp, err = fuse(&d.gate, &d.up)
	return err
}

// loadProjection loads p as one linear: its parts (row views of stored matrices) joined along the output
// dimension.
func (m *mlxModel) loadProjection(p *model.Projection) (linear, error) {
	parts := make([]linear, len(p.Parts))
	freeParts := func() {
		for i := range parts {
			parts[i].free()
		}
	}
	for i := range p.Parts {
		var err error
		if parts[i], err = m.loadLinear(&p.Parts[i]); err != nil {
			freeParts()
			return linear{}, err
		}
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	ptrs := make([]*linear, len(parts))
	for i := range parts {
		ptrs[i] = &parts[i]
	}
	out, err := fuse(ptrs...)
	if err == nil && out.out != p.Out {
		err = fmt.Errorf("%s: its parts differ in format (quantization or bias) and cannot be joined", p.Name)
	}
	if err != nil {
		freeParts()
		out.free()
		return linear{}, err
	}
	return out, nil
}

// loadDeltaNet loads a Gated DeltaNet block's weights into d.lin (the conv in the compute dtype; the gates'
// parameters and the gated norm's weight in float32, as the block computes them).
func (m *mlxModel) loadDeltaNet(d *layer, spec *model.DeltaNetSpec, s *model.DeltaNet) error {
	d.linDims = linearDims{Nk: spec.KeyHeads, Nv: spec.ValueHeads, Dk: spec.KeyDim, Dv: spec.ValueDim, K: spec.ConvKernel,
		Eps: float32(spec.Eps)}
	if err := d.linDims.check(); err != nil {
		return err
	}
	w := &linearAttn{}
	d.lin = w
	var err error
	for _, p := range []struct {
		dst *linear
		src *model.Projection
	}{{&w.qkv, s.QKV}, {&w.z, s.Z}, {&w.b, s.B}, {&w.a, s.A}} {
		if *p.dst, err = m.loadProjection(p.src); err != nil {
			return err
		}
	}
	if w.out, err = m.loadLinear(s.Out); err != nil {
		return err
	}
	if w.conv, err = m.loadTensor(s.Conv, m.compute); err != nil {
		return err
	}
	for _, t := range []struct {
		dst *C.mlx_array
		src *safetensors.Tensor
	}{{&w.dtBias, s.DtBias}, {&w.aLog, s.ALog}, {&w.norm, s.Norm}} {
		if *t.dst, err = m.loadTensor(t.src, C.MLX_FLOAT32); err != nil {
			return err
		}
	}
	return nil
}

// loadNorm loads the weights of a norm of kind spec; a nil spec (an absent slot) gives nil.
func (m *mlxModel) loadNorm(spec *model.NormSpec, t *safetensors.Tensor) (*norm, error) {
	if spec == nil {
		return nil, nil
	}
	if t == nil {
		return nil, errors.New("a norm without weights")
	}
	n := &norm{eps: float32(spec.Eps)}
	if spec.Kind != model.NormRMSPlusOne {
		var err error
		n.w, err = m.loadTensor(t, m.compute)
		return n, err
	}
	w, err := m.loadTensor(t, C.MLX_FLOAT32)
	if err != nil {
		return nil, err
	}
	defer free(&w)
	g := newGraph()
	defer g.free()
	one := g.data([]byte{0, 0, 0x80, 0x3f}, nil, C.MLX_FLOAT32) // 1.0f
	a := g.astype(g.add(w, one), m.compute)
	if g.err == nil {
		g.err = evalArrays(a)
	}
	if g.err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, g.err)
	}
	n.w = g.keep(a)
	return n, nil
}

// scalar is v rounded to float32 and then to the compute dtype, evaluated; the caller owns it.
func (m *mlxModel) scalar(v float64) (C.mlx_array, error) {
	b := make([]byte, 4)
	putF32(b, float32(v))
	g := newGraph()
	defer g.free()
	a := g.astype(g.data(b, nil, C.MLX_FLOAT32), m.compute)
	if g.err == nil {
		g.err = evalArrays(a)
	}
	if g.err != nil {
		return C.mlx_array{}, g.err
	}
	return g.keep(a), nil
}

// loadTensor copies t into a new array converted to d and evaluated. The caller owns the result.
func (m *mlxModel) loadTensor(t *safetensors.Tensor, d C.mlx_dtype) (C.mlx_array, error) {
	var sd C.mlx_dtype
	switch t.DType {
	case safetensors.F32:
		sd = C.MLX_FLOAT32
	case safetensors.F16:
		sd = C.MLX_FLOAT16
	case safetensors.BF16:
		sd = C.MLX_BFLOAT16
	case safetensors.U32:
		sd = C.MLX_UINT32
	case safetensors.U8:
		sd = C.MLX_UINT8
	default:
		return C.mlx_array{}, fmt.Errorf("tensor %q: unsupported dtype %s", t.Name, t.DType)
	}
	g := newGraph()
	defer g.free()
	a := g.astype(g.data(t.Data, t.Shape, sd), d)
	if g.err == nil {
		g.err = evalArrays(a)
	}
	if g.err != nil {
		return C.mlx_array{}, fmt.Errorf("tensor %q: %w", t.Name, g.err)
	}
	return g.keep(a), nil
}

func (m *mlxModel) loadLinear(l *model.Linear) (linear, error) {
	out := linear{out: l.Out, in: l.In}
	var err error
	if l.Bias != nil {
		if out.bias, err = m.loadTensor(l.Bias, m.compute); err != nil {
			return out, err
		}
	}
	if q := l.Quant; q != nil {
		p := q.QuantParams
		out.quant = &p
		if out.w, err = m.loadTensor(l.Weight, C.MLX_UINT32); err != nil {
			return out, err
		}
		if q.Mode == model.ModeMXFP4 {
			// e8m0 exponents, used as they are; no biases.
			out.scales, err = m.loadTensor(q.Scales, C.MLX_UINT8)
			return out, err
		}
		if out.scales, err = m.loadTensor(q.Scales, m.compute); err != nil {
			return out, err
		}
		out.biases, err = m.loadTensor(q.Biases, m.compute)
		return out, err
	}
	if out.w, err = m.loadTensor(l.Weight, m.compute); err != nil {
		return out, err
	}
	g := newGraph()
	defer g.free()
	t := g.transpose(out.w, 1, 0)
	if g.err != nil {
		return out, g.err
	}
	if err := evalArrays(t); err != nil {
		return out, err
	}
	out.wT = g.keep(t)
	return out, nil
}

// fuse joins linears that read the same input into one whose output is theirs side by side, and frees them
// (they become empty). It leaves them alone, returning an empty linear, when their formats differ: a
// quantization override on one of them, or a bias on only some.
func fuse(parts ...*linear) (linear, error) {
	first := parts[0]
	out := linear{in: first.in, quant: first.quant}
	for _, p := range parts {
		sameQuant := (p.quant == nil) == (first.quant == nil) && (p.quant == nil || *p.quant == *first.quant)
		if !sameQuant || (p.bias.ctx == nil) != (first.bias.ctx == nil) || p.in != first.in {
			return linear{}, nil
		}
		out.out += p.out
	}
	g := newGraph()
	defer g.free()
	join := func(get func(*linear) C.mlx_array) C.mlx_array {
		as := make([]C.mlx_array, len(parts))
		for i, p := range parts {
			as[i] = get(p)
		}
		return g.concat(0, as...)
	}
	out.w = join(func(l *linear) C.mlx_array { return l.w })
	keep := []*C.mlx_array{&out.w}
	if out.quant != nil {
		out.scales = join(func(l *linear) C.mlx_array { return l.scales })
		keep = append(keep, &out.scales)
		if first.biases.ctx != nil {
			out.biases = join(func(l *linear) C.mlx_array { return l.biases })
			keep = append(keep, &out.biases)
		}
	} else {
		out.wT = g.transpose(out.w, 1, 0)
		keep = append(keep, &out.wT)
	}
	if first.bias.ctx != nil {
		out.bias = join(func(l *linear) C.mlx_array { return l.bias })
		keep = append(keep, &out.bias)
	}
	if g.err != nil {
		return linear{}, g.err
	}
	as := make([]C.mlx_array, len(keep))
	for i, a := range keep {
		as[i] = *a
	}
	if err := evalArrays(as...); err != nil {
		return linear{}, err
	}
	for _, a := range keep {
		*a = g.keep(*a)
	}
	for _, p := range parts {
		p.free()
		*p = linear{}
	}
	return out, nil
}

func (l *linear) free() {
	for _, a := range []*C.mlx_array{&l.w, &l.wT, &l.scales, &l.biases, &l.bias} {
		free(a)
	}
}

// freeWeights releases every weight; it runs on the MLX thread.
func (m *mlxModel) freeWeights() {
	if m.lmHead != nil && m.lmHead != &m.embed {
		m.lmHead.free()
	}
	m.embed.free()
	for i := range m.layers {
		L := &m.layers[i]
		for _, n := range []*norm{L.attnIn, L.attnOut, L.ffnIn, L.ffnOut, L.qNorm, L.kNorm} {
			if n != nil {
				free(&n.w)
			}
		}
		for _, a := range []*C.mlx_array{&L.sinks, &L.freqs, &L.ropeScale, &L.alpha, &L.limit} {
			free(a)
		}
		if L.moe != nil {
			L.moe.free()
		}
		for _, l := range []*linear{&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down, &L.qkv, &L.gateUp, &L.qGate} {
			l.free()
		}
		if L.lin != nil {
			L.lin.free()
		}
	}
	if m.final != nil {
		free(&m.final.w)
	}
	free(&m.embedScale)
	for _, a := range []*C.mlx_array{&m.consts.half, &m.consts.one, &m.consts.geluK, &m.consts.geluA} {
		free(a)
	}
	free(&m.embShifts)
	free(&m.embMask)
	m.layers, m.lmHead = nil, nil
}

func (m *mlxModel) KVLayout() backend.KVLayout {
	return m.layout
}

func (m *mlxModel) VocabSize() int  { return m.cfg.VocabSize }
func (m *mlxModel) MaxContext() int { return m.maxCtx }

// Close frees the weights. Caches must have been released.
func (m *mlxModel) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return do(func() error {
		m.freeWeights()
		return nil
	})
}

func putF32(b []byte, f float32) { putU32(b, math.Float32bits(f)) }

func putU32(b []byte, u uint32) {
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

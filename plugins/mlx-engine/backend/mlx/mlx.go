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
	scale   float32 // 1/sqrt(head_dim)
	eps     float32
	// pipeline schedules each layer's work (async_eval) as soon as it is built, so MLX computes while Go
	// builds the next layer.
	pipeline bool
	// timed makes steps measure the time spent inside mlx-c (benchmarks).
	timed bool

	embed  linear
	lmHead *linear // &embed when the embeddings are tied
	layers []layer
	norm   C.mlx_array
	freqs  C.mlx_array // RoPE periods 1/θ_i, float32 [head_dim/2]
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

type layer struct {
	inNorm, postNorm C.mlx_array
	qNorm, kNorm     C.mlx_array // qwen3
	q, k, v, o       linear
	gate, up, down   linear
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
	if !m.Config.Arch.Dense() {
		for i := range m.Config.Arch.Layers {
			if m.Config.Arch.Layers[i].FFN.Kind == model.FFNMoE {
				return nil, fmt.Errorf("mlx: model_type %q has mixture-of-experts layers, which this backend does not implement yet (the cpu backend does)", m.Config.Family)
			}
		}
		return nil, fmt.Errorf("mlx: model_type %q uses blocks this backend does not implement yet", m.Config.Family)
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
		scale: float32(1 / math.Sqrt(float64(c.HeadDim))), eps: float32(c.RMSNormEps), pipeline: true}
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
	if m.norm, err = m.loadTensor(src.Norm, m.compute); err != nil {
		return err
	}
	m.layers = make([]layer, len(src.Layers))
	for i := range src.Layers {
		s, d := &src.Layers[i], &m.layers[i]
		for _, v := range []struct {
			dst *C.mlx_array
			t   *safetensors.Tensor
		}{{&d.inNorm, s.AttnIn}, {&d.postNorm, s.FFNIn}, {&d.qNorm, s.Attn.QNorm}, {&d.kNorm, s.Attn.KNorm}} {
			if v.t == nil {
				continue
			}
			if *v.dst, err = m.loadTensor(v.t, m.compute); err != nil {
				return err
			}
		}
		for _, p := range []struct {
			dst *linear
			src *model.Linear
		}{{&d.q, s.Attn.Q}, {&d.k, s.Attn.K}, {&d.v, s.Attn.V}, {&d.o, s.Attn.O}, {&d.gate, s.MLP.Gate}, {&d.up, s.MLP.Up}, {&d.down, s.MLP.Down}} {
			if *p.dst, err = m.loadLinear(p.src); err != nil {
				return err
			}
		}
		if d.qkv, err = fuse(&d.q, &d.k, &d.v); err != nil {
			return err
		}
		if d.gateUp, err = fuse(&d.gate, &d.up); err != nil {
			return err
		}
	}
	if q := m.embed.quant; q != nil {
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
	periods := ropePeriods(&m.cfg.Arch.Layers[0].Attn.Rope)
	b := make([]byte, 4*len(periods))
	for i, p := range periods {
		putF32(b[4*i:], p)
	}
	m.freqs, err = newArray(b, []int{len(periods)}, C.MLX_FLOAT32)
	return err
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
		if q.Mode != model.ModeAffine {
			return out, fmt.Errorf("mlx: %s: %s quantization is not implemented by this backend yet", l.Name, q.Mode)
		}
		p := q.QuantParams
		out.quant = &p
		if out.w, err = m.loadTensor(l.Weight, C.MLX_UINT32); err != nil {
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
		out.biases = join(func(l *linear) C.mlx_array { return l.biases })
		keep = append(keep, &out.scales, &out.biases)
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
		for _, a := range []*C.mlx_array{&L.inNorm, &L.postNorm, &L.qNorm, &L.kNorm} {
			free(a)
		}
		for _, l := range []*linear{&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down, &L.qkv, &L.gateUp} {
			l.free()
		}
	}
	free(&m.norm)
	free(&m.freqs)
	free(&m.embShifts)
	free(&m.embMask)
	m.layers, m.lmHead = nil, nil
}

func (m *mlxModel) KVLayout() backend.KVLayout {
	return backend.DenseLayout(m.cfg.NumLayers, m.cfg.NumKVHeads, m.cfg.HeadDim, m.kvType)
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

// ropePeriods returns 1/θ_i for the frequencies of r (RopeSpec.InvFreq): MLX's rope takes periods, not
// frequencies. The backend loads only dense archs, whose layers share one rope with attention factor 1.
func ropePeriods(r *model.RopeSpec) []float32 {
	inv, _ := r.InvFreq()
	out := make([]float32, len(inv))
	for i, f := range inv {
		out[i] = float32(1 / f)
	}
	return out
}

func putF32(b []byte, f float32) { putU32(b, math.Float32bits(f)) }

func putU32(b []byte, u uint32) {
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

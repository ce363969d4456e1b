package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// Backend is the pure-Go backend; it registers itself as "cpu".
type Backend struct{}

func init() { backend.Register(Backend{}) }

var _ backend.Backend = Backend{}

// Name is "cpu".
func (Backend) Name() string { return "cpu" }

// DefaultPrefillChunk is how many tokens one step of Forward processes by default.
const DefaultPrefillChunk = 256

var errClosed = errors.New("cpu: model is closed")

// cpuModel is a model prepared for the CPU: every matrix as float32 (in place from the mapped file when the
// file stores aligned float32, converted or dequantized once otherwise) or, with WeightsStored, left as the file
// stores it and expanded a tile at a time; plus a worker pool.
type cpuModel struct {
	src    *model.Model
	cfg    model.Config
	kvType dtype.DType
	layout backend.KVLayout
	maxCtx int
	chunk  int
	pool   *pool
	kern   kernelPath // the matrix kernels (KernelsEnv)

	arch   *model.Arch
	layers []layer
	final  *norm
	lmHead linear
	ropes  []ropeFreqs // the distinct rotary embeddings of the layers
	dims   dims        // the largest layer's sizes, for the scratch

	mu         sync.Mutex // one Forward at a time; guards scratch and moeScratch
	scratch    scratch
	linScratch linScratch
	moeScratch moeScratch
	work       []workerScratch
	closed     atomic.Bool

	stored   bool  // matrices not stored as aligned float32 are expanded per tile (see WeightsStored)
	expanded int64 // bytes of float32 matrices made at load
}

// layer is one decoder layer prepared for the blocks of attn.go and ffn.go.
type layer struct {
	attnIn, attnOut, ffnIn, ffnOut *norm // nil: the slot is absent (identity)
	// attention
	q, k, v, o            linear
	qNorm, kNorm          *norm     // per head, before RoPE
	sinks                 []float32 // [heads], nil without sinks
	heads, kvHeads, hd    int
	rope, rotDims, window int // rope indexes cpuModel.ropes; window 0 is full causal attention
	scale                 float32
	gated                 bool // OutputGate: q holds each head's [query | gate] rows; the output is multiplied by σ(gate)
	// lin is the Gated DeltaNet block of a linear layer, instead of the attention fields (linear_layer.go).
	lin *linLayer
	// feed-forward: a dense MLP, or a mixture of experts (moe)
	gate, up, down linear
	act            activation
	moe            *moeLayer // a sparse feed-forward block instead of gate, up and down
}

// dims are the largest sizes of any layer (the scratch holds a step of the largest).
type dims struct {
	q, kv, inter, half int
	qg                 int // the query dims of the widest gated attention layer (0: none)
}

// linear is a weight matrix [out, in] with an optional bias: float32 in w, or (w nil) the stored matrix src,
// expanded tile by tile with src.Row, which is also what expanding it at load runs, so both give the same bits.
type linear struct {
	w       []float32
	src     *model.Linear
	st      storedMatrix // with src: the decode kernel's view of it
	bias    []float32
	out, in int
}

var _ backend.Model = (*cpuModel)(nil)

// Load prepares m for the CPU. Float32 weights stored aligned are used in place from the memory-mapped file;
// float16/bfloat16 weights are widened and quantized ones dequantized once, here, in parallel.
func (Backend) Load(m *model.Model, opts backend.Options) (backend.Model, error) {
	kern, err := kernelsFromEnv()
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return loadOn(m, opts, kern)
}

// loadOn is Load with the kernel path given.
func loadOn(m *model.Model, opts backend.Options, kern kernelPath) (*cpuModel, error) {
	if err := implemented(&m.Config); err != nil {
		return nil, fmt.Errorf("cpu: model_type %q: %w", m.Config.Family, err)
	}
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	chunk := opts.PrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	c := m.Config
	layout := backend.LayoutOf(&c.Arch, m.DType)
	if len(c.Arch.Layers) != len(m.Layers) {
		layout = backend.DenseLayout(len(m.Layers), c.NumKVHeads, c.HeadDim, m.DType)
	}
	cm := &cpuModel{kern: kern, src: m, cfg: c, kvType: m.DType, maxCtx: backend.ContextLimit(c), chunk: chunk, pool: newPool(threads)}
	cm.arch = &cm.cfg.Arch
	cm.work = make([]workerScratch, cm.pool.workers)
	cm.layout = layout
	switch opts.Weights {
	case backend.WeightsStored:
		cm.stored = true
	case backend.WeightsAuto:
		cm.stored = !expandFits(expandedBytes(m), physicalMemory(), opts.MemoryLimit)
	}
	var err error
	vec := func(t *safetensors.Tensor) []float32 {
		if err != nil || t == nil {
			return nil
		}
		var v []float32
		v, err = model.Vector(t)
		return v
	}
	cm.layers = make([]layer, len(m.Layers))
	for i := 0; i < len(m.Layers) && err == nil; i++ {
		if e := cm.prepareLayer(i, &m.Layers[i], vec); e != nil {
			err = e
		}
	}
	cm.final = newNorm(&c.Arch.FinalNorm, vec(m.Norm))
	if err == nil {
		cm.lmHead, err = cm.prepare(m.LMHead)
	}
	if err != nil {
		cm.pool.close()
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return cm, nil
}

// implemented checks that the arch uses only blocks this backend computes, with the KV shape its cache holds
// (one KV head count and head dim for every layer, Config's).
func implemented(c *model.Config) error {
	for i := range c.Arch.Layers {
		l := &c.Arch.Layers[i]
		switch l.Kind {
		case model.LayerLinear:
			if l.DeltaNet == nil {
				return fmt.Errorf("layer %d: a linear attention layer without its sizes", i)
			}
			if err := deltaDimsOf(l.DeltaNet).check(); err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
		case model.LayerAttention:
			if l.Attn.KVHeads != c.NumKVHeads || l.Attn.HeadDim != c.HeadDim {
				return fmt.Errorf("layer %d: %d KV heads of %d dims, the model's KV layout has %d of %d", i, l.Attn.KVHeads, l.Attn.HeadDim, c.NumKVHeads, c.HeadDim)
			}
		default:
			return fmt.Errorf("layer %d: layer kind %s is not supported by the cpu backend", i, l.Kind)
		}
		if l.FFN.Kind == model.FFNMoE {
			if err := moeSupported(&l.FFN); err != nil {
				return fmt.Errorf("layer %d: this mixture of experts is not implemented: %w", i, err)
			}
			continue
		}
		if _, err := newActivation(&l.FFN); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return nil
}

// prepareLayer prepares layer i from src (vec converts a vector, keeping the first error).
func (m *cpuModel) prepareLayer(i int, src *model.Layer, vec func(*safetensors.Tensor) []float32) error {
	spec, dst := src.Spec, &m.layers[i]
	at := &spec.Attn
	dst.attnIn, dst.attnOut = newNorm(spec.AttnIn, vec(src.AttnIn)), newNorm(spec.AttnOut, vec(src.AttnOut))
	dst.ffnIn, dst.ffnOut = newNorm(spec.FFNIn, vec(src.FFNIn)), newNorm(spec.FFNOut, vec(src.FFNOut))
	var linears []pair
	if spec.Kind == model.LayerLinear {
		if src.DeltaNet == nil {
			return fmt.Errorf("layer %d has no linear attention weights", i)
		}
		var err error
		if dst.lin, err = m.prepareLinear(spec.DeltaNet, src.DeltaNet, vec); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		return m.prepareFFN(i, src, dst, linears, vec)
	}
	if src.Attn == nil {
		return fmt.Errorf("layer %d has no attention weights", i)
	}
	dst.qNorm, dst.kNorm = newNorm(at.QKNorm, vec(src.Attn.QNorm)), newNorm(at.QKNorm, vec(src.Attn.KNorm))
	if at.Sinks {
		if src.Attn.Sinks == nil {
			return fmt.Errorf("layer %d: attention sinks without a sinks tensor", i)
		}
		dst.sinks = vec(src.Attn.Sinks)
	}
	dst.heads, dst.kvHeads, dst.hd = at.Heads, at.KVHeads, at.HeadDim
	dst.rotDims, dst.window, dst.scale = at.Rope.RotaryDims, at.Window, float32(at.Scale)
	dst.rope = m.ropeIndex(&at.Rope)
	dst.gated = at.OutputGate
	if dst.gated {
		m.dims.qg = max(m.dims.qg, at.Heads*at.HeadDim)
	}
	linears = []pair{{&dst.q, src.Attn.Q}, {&dst.k, src.Attn.K}, {&dst.v, src.Attn.V}, {&dst.o, src.Attn.O}}
	m.dims.q = max(m.dims.q, at.Heads*at.HeadDim)
	m.dims.kv = max(m.dims.kv, at.KVHeads*at.HeadDim)
	m.dims.half = max(m.dims.half, at.Rope.RotaryDims/2)
	return m.prepareFFN(i, src, dst, linears, vec)
}

// prepareFFN prepares layer i's feed-forward block, then the matrices of linears and of the block.
func (m *cpuModel) prepareFFN(i int, src *model.Layer, dst *layer, linears []pair, vec func(*safetensors.Tensor) []float32) error {
	spec := src.Spec
	switch spec.FFN.Kind {
	case model.FFNMoE:
		if src.MoE == nil {
			return fmt.Errorf("layer %d has no expert weights", i)
		}
		var err error
		if dst.moe, err = m.prepareMoE(src.MoE, &spec.FFN); err != nil {
			return err
		}
	default:
		if src.MLP == nil {
			return fmt.Errorf("layer %d has no MLP weights", i)
		}
		linears = append(linears, pair{&dst.gate, src.MLP.Gate}, pair{&dst.up, src.MLP.Up}, pair{&dst.down, src.MLP.Down})
		var err error
		if dst.act, err = newActivation(&spec.FFN); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		m.dims.inter = max(m.dims.inter, spec.FFN.Intermediate)
	}
	for _, p := range linears {
		var err error
		if *p.dst, err = m.prepare(p.src); err != nil {
			return err
		}
		p.dst.bias = vec(p.src.Bias)
	}
	return nil
}

// pair is a matrix of a layer to prepare and where it goes.
type pair struct {
	dst *linear
	src *model.Linear
}

// ropeIndex is the index in m.ropes of r's frequencies, added when no layer before had the same.
func (m *cpuModel) ropeIndex(r *model.RopeSpec) int {
	inv, af := r.InvFreq()
	for i, o := range m.ropes {
		if o.attnFactor == af && slices.Equal(o.inv, inv) {
			return i
		}
	}
	m.ropes = append(m.ropes, ropeFreqs{inv: inv, attnFactor: af})
	return len(m.ropes) - 1
}

// prepare returns l as a float32 matrix aliasing the mapped file when possible; otherwise expanded now, or left
// as stored.
func (m *cpuModel) prepare(l *model.Linear) (linear, error) {
	out := linear{out: l.Out, in: l.In}
	if w, ok := float32s(l); ok {
		out.w = w
		return out, nil
	}
	if m.stored {
		var err error
		out.src = l
		out.st, err = newStoredMatrix(l)
		return out, err
	}
	out.w = make([]float32, l.Out*l.In)
	m.expanded += int64(len(out.w)) * 4
	m.pool.run(l.Out, 64, func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			l.Row(r, out.w[r*l.In:(r+1)*l.In])
		}
	})
	return out, nil
}

func float32s(l *model.Linear) ([]float32, bool) {
	if l.Quant != nil {
		return nil, false
	}
	return l.Weight.Float32s()
}

// expandFits is WeightsAuto's choice: expand when the float32 copies take at most half the memory the process
// may use (the machine's, a container's limit, or the backend's MemoryLimit when set). The other half is for the
// KV caches, the mapped file's pages and everything else.
func expandFits(expanded, memory, limit int64) bool {
	if limit > 0 {
		memory = min(memory, limit)
	}
	return expanded <= memory/2
}

// expandedBytes is the memory that expanding m's matrices to float32 takes beyond the mapped file.
func expandedBytes(m *model.Model) int64 {
	var n int64
	add := func(l *model.Linear) {
		if _, ok := float32s(l); !ok {
			n += int64(l.Out) * int64(l.In) * 4
		}
	}
	for i := range m.Layers {
		for _, p := range m.Layers[i].Linears() {
			add(p)
		}
		if e := m.Layers[i].MoE; e != nil {
			moeExpandedBytes(e, add)
		}
	}
	add(m.LMHead)
	return n
}

// Weights says how the model holds 16-bit and quantized matrices: backend.WeightsStored or WeightsFloat32.
func (m *cpuModel) Weights() backend.Weights {
	if m.stored {
		return backend.WeightsStored
	}
	return backend.WeightsFloat32
}

var _ backend.WeightsHolder = (*cpuModel)(nil)

// Metrics reports how the model holds its weights: "cpu_weights_stored" is 1 when matrices stay as the file
// stores them (WeightsStored, or WeightsAuto on a machine without room for the float32 copy), and
// "cpu_expanded_weight_bytes" is the memory of the float32 copies made at load (the mapped file comes on top).
// "cpu_kernel_lanes" names the kernel path: 1 for the Go kernels, 8 for AVX2, 16 for AVX-512; two instances
// give the same bits only on the same path.
func (m *cpuModel) Metrics() map[string]float64 {
	stored := 0.0
	if m.stored {
		stored = 1
	}
	lanes := 1
	if m.kern != pathGo {
		lanes = simdKernels[m.kern].lanes
	}
	return map[string]float64{"cpu_weights_stored": stored, "cpu_expanded_weight_bytes": float64(m.expanded),
		"cpu_kernel_lanes": float64(lanes)}
}

func (m *cpuModel) KVLayout() backend.KVLayout { return m.layout }

func (m *cpuModel) VocabSize() int  { return m.cfg.VocabSize }
func (m *cpuModel) MaxContext() int { return m.maxCtx }

func (m *cpuModel) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Swap(true) {
		return nil
	}
	m.pool.close()
	m.layers, m.lmHead, m.scratch, m.moeScratch, m.final = nil, linear{}, scratch{}, moeScratch{}, nil
	m.linScratch = linScratch{}
	return nil
}

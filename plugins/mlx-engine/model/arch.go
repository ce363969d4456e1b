package model

import (
	"errors"
	"fmt"
	"math"
)

// Arch describes a model's computation as blocks: an embedding, a list of layers and a head. config.json picks
// every option through the family's mapper; specs hold numbers only, and the weights that go with them are
// bound separately (Layer). Backends implement the blocks, never the families: a family name does not appear
// below package model.
//
// The semantics of every block are in docs/models-design.md §1.2; backends and the float64 reference in
// backend/backendtest follow them exactly.
type Arch struct {
	Hidden, Vocab int
	// EmbedScale multiplies the embedding rows (0: none). Gemma scales by sqrt(Hidden) rounded to the compute
	// dtype.
	EmbedScale float64
	FinalNorm  NormSpec
	TiedHead   bool
	Layers     []LayerSpec
}

// NormKind is the formula of a normalisation.
type NormKind uint8

const (
	// NormRMS is x·rsqrt(mean(x²)+eps)·w.
	NormRMS NormKind = iota
	// NormRMSPlusOne is Gemma's x·rsqrt(mean(x²)+eps)·(1+w).
	NormRMSPlusOne
)

// NormSpec is one normalisation.
type NormSpec struct {
	Kind NormKind
	Eps  float64
}

// LayerSpec is one decoder layer: at most one attention and one feed-forward block, with norms in four slots:
//
//	a = Attn(norm_AttnIn(h));  h = h + norm_AttnOut(a)
//	f = FFN(norm_FFNIn(h));    h = h + norm_FFNOut(f)
//
// The slots are named by role, not by checkpoint name: llama's "post_attention_layernorm" is the FFN's input
// norm, Gemma's is the attention's output norm. A nil slot is the identity.
//
// The token mixer is Attn for an attention layer (Kind LayerAttention) and DeltaNet for a linear-attention layer
// (Kind LayerLinear), whose Attn is the zero value.
type LayerSpec struct {
	// Kind is omitted from JSON when it is LayerAttention, so that fingerprints of models without linear
	// layers stay what they were.
	Kind                           LayerKind `json:",omitempty"`
	AttnIn, AttnOut, FFNIn, FFNOut *NormSpec
	Attn                           AttnSpec
	DeltaNet                       *DeltaNetSpec `json:",omitempty"`
	FFN                            FFNSpec
}

// LayerKind is a layer's token mixer.
type LayerKind uint8

// The layer kinds.
const (
	// LayerAttention mixes tokens with softmax attention (Attn) and caches keys and values per position.
	LayerAttention LayerKind = iota
	// LayerLinear mixes tokens with a Gated DeltaNet (DeltaNet): a causal depthwise convolution and a
	// delta-rule recurrence, whose cache is a fixed-size state (docs/hybrid-design.md §1).
	LayerLinear
)

func (k LayerKind) String() string {
	switch k {
	case LayerAttention:
		return "attention"
	case LayerLinear:
		return "linear"
	}
	return fmt.Sprintf("LayerKind(%d)", uint8(k))
}

// DeltaNetSpec is a Gated DeltaNet ("linear attention") block as qwen3_next and qwen3_5 define it
// (docs/hybrid-design.md §1.2): projections of the input to the conv channels [Q | K | V], the output gate z and
// the per-value-head b and a; a causal depthwise conv of ConvKernel taps with SiLU over the channels;
// l2-normalised q and k (q also scaled by KeyDim^-0.5); value head h reads key head h / (ValueHeads/KeyHeads);
// α = exp(−exp(A_log)·softplus(a + dt_bias)), β = σ(b); the delta-rule update of a [ValueDim][KeyDim] state
// per value head; a gated RMSNorm (plain weight, epsilon Eps) times silu(z); and out_proj.
type DeltaNetSpec struct {
	KeyHeads, ValueHeads int // Nk, Nv: ValueHeads % KeyHeads == 0
	KeyDim, ValueDim     int // Dk, Dv: the head sizes
	ConvKernel           int // K >= 2 taps
	Eps                  float64
}

// QKDim is the width of the conv's Q (and of its K) channels, Nk·Dk.
func (d *DeltaNetSpec) QKDim() int { return d.KeyHeads * d.KeyDim }

// VDim is the width of the V channels, of z and of the block's output before out_proj, Nv·Dv.
func (d *DeltaNetSpec) VDim() int { return d.ValueHeads * d.ValueDim }

// ConvDim is the number of conv channels, 2·Nk·Dk + Nv·Dv, in the order [Q | K | V].
func (d *DeltaNetSpec) ConvDim() int { return 2*d.QKDim() + d.VDim() }

// ConvStateShape is the shape of a sequence's conv window, [K-1, ConvDim] pre-conv rows in the KV dtype
// (mlx-lm's ArraysCache holds it as [1, K-1, ConvDim]).
func (d *DeltaNetSpec) ConvStateShape() []int { return []int{d.ConvKernel - 1, d.ConvDim()} }

// StateShape is the shape of a sequence's recurrent state, [Nv, Dv, Dk] float32, value-major as mlx-lm holds
// it ([1, Nv, Dv, Dk] in its ArraysCache).
func (d *DeltaNetSpec) StateShape() []int { return []int{d.ValueHeads, d.ValueDim, d.KeyDim} }

// AttnSpec is grouped-query attention with its options.
type AttnSpec struct {
	Heads, KVHeads, HeadDim    int // Heads % KVHeads == 0
	QBias, KBias, VBias, OBias bool
	// QKNorm, when set, normalises each head of q and k over HeadDim before RoPE (qwen3, gemma3).
	QKNorm *NormSpec
	Rope   RopeSpec
	// Scale multiplies q·k: HeadDim^-0.5, or query_pre_attn_scalar^-0.5 (gemma).
	Scale float64
	// Window is 0 for full causal attention; W > 0 makes key j visible to query i iff i-W < j <= i.
	Window int
	// Sinks adds a learned per-head logit to the softmax's denominator (gpt-oss); its probability is dropped.
	Sinks bool
	// OutputGate: q_proj gives each head [query (HeadDim) | gate (HeadDim)], and the attention output of each
	// head is multiplied by σ(gate) before o_proj (qwen3_next, qwen3_5).
	OutputGate bool `json:",omitempty"`
}

// RopeType is a rotary embedding's frequency rule.
type RopeType uint8

// The rope types of modeling_rope_utils.py that duet implements.
const (
	RopeDefault RopeType = iota
	RopeLinear
	RopeLlama3
	RopeYarn
)

func (t RopeType) String() string {
	switch t {
	case RopeDefault:
		return "default"
	case RopeLinear:
		return "linear"
	case RopeLlama3:
		return "llama3"
	case RopeYarn:
		return "yarn"
	}
	return fmt.Sprintf("RopeType(%d)", uint8(t))
}

// RopeSpec is a rotary embedding: the "rotate half" form on the first RotaryDims dims of each head; the rest
// pass through. InvFreq computes its frequencies, once, for both backends and the reference.
type RopeSpec struct {
	Base       float64
	Type       RopeType
	RotaryDims int // even, <= HeadDim: int(HeadDim·partial_rotary_factor)
	Factor     float64
	// llama3
	LowFreqFactor, HighFreqFactor float64
	OrigMaxPos                    int
	// yarn
	BetaFast, BetaSlow float64
	Truncate           bool
	// AttnFactor multiplies the rotated dims of q and k (yarn); 0 means the default rule of InvFreq.
	AttnFactor           float64
	MScale, MScaleAllDim float64
}

// FFNKind tells a dense feed-forward block from a mixture of experts.
type FFNKind uint8

// The feed-forward kinds.
const (
	FFNDense FFNKind = iota
	FFNMoE
)

// Act is the gated activation of an MLP.
type Act uint8

// The activations.
const (
	// ActSiLU is SwiGLU: down(silu(gate·x) ⊙ up·x).
	ActSiLU Act = iota
	// ActGELUTanh is GeGLU with gelu_pytorch_tanh.
	ActGELUTanh
	// ActClampedSwiGLU is gpt-oss's: gate clamped above at Limit, up clamped to ±Limit,
	// down((up+1) ⊙ gate·σ(Alpha·gate)).
	ActClampedSwiGLU
)

// FFNSpec is a layer's feed-forward block.
type FFNSpec struct {
	Kind         FFNKind
	Act          Act
	Alpha, Limit float64 // ActClampedSwiGLU only
	Intermediate int     // dense MLP
	Bias         bool    // dense MLP: gate, up and down carry biases
	MoE          *MoESpec
}

// RouteOrder is the order of softmax and top-k in a router.
type RouteOrder uint8

// The router orders.
const (
	// SoftmaxThenTopK: softmax over all experts in float32, then the k largest (qwen*, mixtral).
	SoftmaxThenTopK RouteOrder = iota
	// TopKThenSoftmax: the k largest logits, then softmax over those k (gpt-oss).
	TopKThenSoftmax
)

// MoESpec is a sparse feed-forward block. Ties in top-k go to the lower expert index, and the chosen experts'
// outputs are summed in ascending expert order.
type MoESpec struct {
	Experts, TopK, Intermediate int
	Order                       RouteOrder
	NormTopK                    bool // renormalise the k probabilities to sum 1 (SoftmaxThenTopK only)
	RouterBias                  bool
	ExpertBias                  bool // per-expert gate/up/down biases (gpt-oss)
	// SharedIntermediate > 0 adds a shared SwiGLU expert (qwen2_moe), gated by σ(shared_expert_gate·x) when
	// SharedGate holds.
	SharedIntermediate int
	SharedGate         bool
}

// Validate checks the arch for sizes a backend can rely on.
func (a *Arch) Validate() error {
	if a.Hidden <= 0 || a.Vocab <= 0 || len(a.Layers) == 0 {
		return fmt.Errorf("arch: hidden %d, vocab %d, %d layers", a.Hidden, a.Vocab, len(a.Layers))
	}
	for i := range a.Layers {
		l := &a.Layers[i]
		switch l.Kind {
		case LayerAttention:
			if l.DeltaNet != nil {
				return fmt.Errorf("arch: layer %d: an attention layer with a DeltaNet spec", i)
			}
		case LayerLinear:
			if err := l.DeltaNet.validate(); err != nil {
				return fmt.Errorf("arch: layer %d: %w", i, err)
			}
		default:
			return fmt.Errorf("arch: layer %d: layer kind %d", i, l.Kind)
		}
		if l.Kind == LayerAttention {
			if err := l.Attn.validate(); err != nil {
				return fmt.Errorf("arch: layer %d: %w", i, err)
			}
		}
		if err := l.FFN.validate(); err != nil {
			return fmt.Errorf("arch: layer %d: %w", i, err)
		}
	}
	return nil
}

func (at *AttnSpec) validate() error {
	if at.Heads <= 0 || at.KVHeads <= 0 || at.Heads%at.KVHeads != 0 || at.HeadDim <= 0 || at.HeadDim%2 != 0 {
		return fmt.Errorf("heads %d, kv heads %d, head dim %d", at.Heads, at.KVHeads, at.HeadDim)
	}
	if r := at.Rope.RotaryDims; r <= 0 || r%2 != 0 || r > at.HeadDim {
		return fmt.Errorf("rotary dims %d for head dim %d", r, at.HeadDim)
	}
	if at.Window < 0 || !(at.Scale > 0) {
		return fmt.Errorf("window %d, scale %g", at.Window, at.Scale)
	}
	return nil
}

func (f *FFNSpec) validate() error {
	switch f.Kind {
	case FFNDense:
		if f.Intermediate <= 0 {
			return fmt.Errorf("intermediate size %d", f.Intermediate)
		}
	case FFNMoE:
		m := f.MoE
		if m == nil || m.Experts <= 0 || m.TopK <= 0 || m.TopK > m.Experts || m.Intermediate <= 0 {
			return fmt.Errorf("bad mixture of experts %+v", m)
		}
	default:
		return fmt.Errorf("feed-forward kind %d", f.Kind)
	}
	return nil
}

func (d *DeltaNetSpec) validate() error {
	switch {
	case d == nil:
		return errors.New("a linear-attention layer without a DeltaNet spec")
	case d.KeyHeads <= 0 || d.ValueHeads <= 0 || d.KeyDim <= 0 || d.ValueDim <= 0:
		return fmt.Errorf("linear attention heads %d/%d of %d/%d dims", d.KeyHeads, d.ValueHeads, d.KeyDim, d.ValueDim)
	case d.ValueHeads%d.KeyHeads != 0:
		return fmt.Errorf("linear attention: %d value heads are not a multiple of %d key heads", d.ValueHeads, d.KeyHeads)
	case d.ConvKernel < 2:
		return fmt.Errorf("linear attention: conv kernel %d (want at least 2)", d.ConvKernel)
	case !(d.Eps > 0 && d.Eps < 1):
		return fmt.Errorf("linear attention: norm epsilon %g", d.Eps)
	}
	return nil
}

// Dense reports whether the arch uses only the blocks of the original Llama layer: SwiGLU MLPs, RMSNorm in the
// llama slots, full attention without sinks, and default or llama3 RoPE on every dim.
func (a *Arch) Dense() bool {
	if a.EmbedScale != 0 || a.FinalNorm.Kind != NormRMS {
		return false
	}
	for i := range a.Layers {
		l := &a.Layers[i]
		if l.Kind != LayerAttention || l.Attn.OutputGate {
			return false
		}
		if l.AttnIn == nil || l.AttnOut != nil || l.FFNIn == nil || l.FFNOut != nil ||
			l.AttnIn.Kind != NormRMS || l.FFNIn.Kind != NormRMS {
			return false
		}
		at := &l.Attn
		if at.Window != 0 || at.Sinks || at.Rope.RotaryDims != at.HeadDim ||
			(at.Rope.Type != RopeDefault && at.Rope.Type != RopeLlama3) || (at.QKNorm != nil && at.QKNorm.Kind != NormRMS) {
			return false
		}
		if l.FFN.Kind != FFNDense || l.FFN.Act != ActSiLU {
			return false
		}
	}
	return true
}

// HasWindows reports whether any layer attends over a sliding window.
func (a *Arch) HasWindows() bool {
	for i := range a.Layers {
		if a.Layers[i].Attn.Window > 0 {
			return true
		}
	}
	return false
}

// HasLinear reports whether any layer is a linear-attention (Gated DeltaNet) layer.
func (a *Arch) HasLinear() bool {
	for i := range a.Layers {
		if a.Layers[i].Kind == LayerLinear {
			return true
		}
	}
	return false
}

// denseArch is the arch of the four Llama-shaped families, from the global fields of c.
func denseArch(c *Config) Arch {
	norm := NormSpec{Kind: NormRMS, Eps: c.RMSNormEps}
	rope := RopeSpec{Base: c.RopeTheta, Type: RopeDefault, RotaryDims: c.HeadDim}
	if s := c.RopeScaling; s != nil {
		rope.Type, rope.Factor = RopeLlama3, s.Factor
		rope.LowFreqFactor, rope.HighFreqFactor, rope.OrigMaxPos = s.LowFreqFactor, s.HighFreqFactor, s.OriginalMaxPositionEmbeddings
	}
	a := preNormArch(c, norm, rope)
	for i := range a.Layers {
		l := &a.Layers[i]
		if c.QKNorm {
			qk := norm
			l.Attn.QKNorm = &qk
		}
		l.FFN = FFNSpec{Kind: FFNDense, Act: ActSiLU, Intermediate: c.IntermediateSize, Bias: c.MLPBias}
	}
	return a
}

// preNormArch is the arch shared by the Llama-shaped families and gpt-oss, from the global fields of c: every
// layer normalises before attention and before its feed-forward, and attends with all of c's heads, rope and
// biases, scaled by 1/√head_dim. The caller fills in the feed-forward and any other per-layer part.
func preNormArch(c *Config, norm NormSpec, rope RopeSpec) Arch {
	a := Arch{Hidden: c.HiddenSize, Vocab: c.VocabSize, FinalNorm: norm, TiedHead: c.TieWordEmbeddings,
		Layers: make([]LayerSpec, c.NumLayers)}
	for i := range a.Layers {
		l := &a.Layers[i]
		in, post := norm, norm
		l.AttnIn, l.FFNIn = &in, &post
		l.Attn = AttnSpec{Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
			QBias: c.AttentionBias, KBias: c.AttentionBias, VBias: c.AttentionBias, OBias: c.OutputBias,
			Rope: rope, Scale: 1 / math.Sqrt(float64(c.HeadDim))}
	}
	return a
}

package modelgen

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// The hybrid families qwen3_next, qwen3_5 and qwen3_5_moe (docs/hybrid-design.md §2, §6.1): Gated DeltaNet
// layers with a gated full attention every FullAttentionInterval layers. The Hugging Face layout is generated
// first, tensor by tensor, exactly as transformers saves it; the mlx-community layout is derived from that list by
// sanitizeMLX, a port of mlx-lm's sanitize (stack or split the experts, move the conv weight's kernel axis, add 1
// to the (1+w) norms in the stored dtype, rename the multimodal prefix, drop mtp.* and the vision tower), so the
// two layouts of a seed are consistent by construction.

// hybrid reports whether f is a family with linear-attention layers.
func hybrid(f model.Family) bool {
	return f == model.Qwen3Next || f == model.Qwen35 || f == model.Qwen35MoE
}

// Layer kinds of the hybrid families' layer_types.
const (
	linearAttention = "linear_attention"
	fullAttention   = "full_attention"
)

// tinyHybrid is §6.1's tiny shape: a 300-token prompt crosses every boundary of the delta rule's 64-token
// chunks, Dk ≠ Dv and r = Nv/Nk = 2 catch transpositions, 4 rotary dims of 16 exercise partial RoPE, and layers 2
// and 5 are full attention.
func tinyHybrid(o *Options) {
	o.HiddenSize, o.NumLayers, o.NumHeads, o.NumKVHeads, o.HeadDim = 64, 6, 4, 2, 16
	o.FullAttentionInterval = 3
	o.LinearKeyHeads, o.LinearValueHeads, o.LinearKeyDim, o.LinearValueDim, o.ConvKernel = 2, 4, 16, 8, 4
	o.PartialRotary = 0.25
	o.NumExperts, o.TopK, o.MoEIntermediate, o.SharedIntermediate, o.NormTopK = 8, 2, 32, 48, true
	o.IntermediateSize = 96
	o.MLPOnlyLayers = []int{}
	switch o.Family {
	case model.Qwen3Next:
		o.MLPOnlyLayers = []int{1}
	case model.Qwen35MoE:
		o.LayerTypes = o.hybridLayerTypes()
	case model.Qwen35:
		o.NumExperts, o.TopK, o.MoEIntermediate, o.SharedIntermediate = 0, 0, 0, 0
		o.LayerTypes = o.hybridLayerTypes()
	}
	o.RopeTheta = 10000
	o.MaxPositionEmbeddings = 4096
}

// HybridBench is a hybrid model at a realistic shape for benchmarks (§6.1), 4-bit in mlx-community's layout:
// 24 layers of width 1024, a full attention every 4th (16 query heads, 4 KV heads of 64, gated, 16 rotary dims),
// Gated DeltaNet layers of 8 key and 16 value heads of 128, 64 experts of 512 with 4 per token and a shared
// expert of 512: about 0.3B parameters active per token. Write it to a temporary directory; never commit it.
func HybridBench() Options {
	return Options{
		Family: model.Qwen3Next, HiddenSize: 1024, IntermediateSize: 2560, NumLayers: 24, NumHeads: 16, NumKVHeads: 4,
		HeadDim: 64, VocabSize: 16384, MaxPositionEmbeddings: 16384, FullAttentionInterval: 4, LinearKeyHeads: 8,
		LinearValueHeads: 16, LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4, PartialRotary: 0.25,
		NumExperts: 64, TopK: 4, MoEIntermediate: 512, SharedIntermediate: 512, NormTopK: true, MLPOnlyLayers: []int{},
		Layout: LayoutMLX, DType: dtype.BFloat16, Quantization: &Quantization{Bits: 4, GroupSize: 64},
		Tokenizer: ByteLevel, Seed: 7,
	}
}

// HybridBenchDense is the dense model of HybridBench's active size: qwen3 attention in every layer (the same
// heads) and an MLP of TopK·MoEIntermediate + SharedIntermediate.
func HybridBenchDense() Options {
	o := HybridBench()
	o.Family, o.IntermediateSize = model.Qwen3, o.TopK*o.MoEIntermediate+o.SharedIntermediate
	o.FullAttentionInterval, o.LinearKeyHeads, o.LinearValueHeads, o.LinearKeyDim, o.LinearValueDim = 0, 0, 0, 0, 0
	o.ConvKernel, o.PartialRotary = 0, 0
	o.NumExperts, o.TopK, o.MoEIntermediate, o.SharedIntermediate, o.NormTopK, o.MLPOnlyLayers = 0, 0, 0, 0, false, nil
	o.Layout = ""
	return o
}

// hybridLayerTypes is each layer's kind by FullAttentionInterval.
func (o *Options) hybridLayerTypes() []string {
	interval := o.FullAttentionInterval
	if interval <= 0 {
		interval = 4
	}
	lt := make([]string, o.NumLayers)
	for i := range lt {
		lt[i] = linearAttention
		if (i+1)%interval == 0 {
			lt[i] = fullAttention
		}
	}
	return lt
}

// linearLayer reports whether layer i is a Gated DeltaNet layer.
func (o *Options) linearLayer(i int) bool {
	if o.LayerTypes != nil {
		return o.LayerTypes[i] == linearAttention
	}
	return (i+1)%o.FullAttentionInterval != 0
}

// hybridSparse reports whether layer i of a hybrid family is a mixture of experts.
func (o *Options) hybridSparse(i int) bool {
	if o.NumExperts == 0 {
		return false
	}
	for _, d := range o.MLPOnlyLayers {
		if d == i {
			return false
		}
	}
	return (i+1)%o.SparseStep == 0
}

func (o *Options) normalizeHybrid() error {
	if o.SlidingWindow != 0 || o.ExpertsMXFP4 || o.Yarn != nil || o.RopeScaling != nil {
		return fmt.Errorf("modelgen: %s has no windows, mxfp4 experts or rope scaling", o.Family)
	}
	if o.FullAttentionInterval == 0 {
		o.FullAttentionInterval = 4
	}
	if o.ConvKernel == 0 {
		o.ConvKernel = 4
	}
	if o.PartialRotary == 0 {
		o.PartialRotary = 0.25
	}
	if o.LinearKeyHeads <= 0 || o.LinearValueHeads <= 0 || o.LinearKeyDim <= 0 || o.LinearValueDim <= 0 ||
		o.LinearValueHeads%o.LinearKeyHeads != 0 || o.ConvKernel < 2 || o.FullAttentionInterval < 0 {
		return fmt.Errorf("modelgen: linear attention of %d/%d heads × %d/%d, conv %d, interval %d", o.LinearKeyHeads,
			o.LinearValueHeads, o.LinearKeyDim, o.LinearValueDim, o.ConvKernel, o.FullAttentionInterval)
	}
	if o.LayerTypes != nil {
		if len(o.LayerTypes) != o.NumLayers {
			return fmt.Errorf("modelgen: %d LayerTypes for %d layers", len(o.LayerTypes), o.NumLayers)
		}
		for _, t := range o.LayerTypes {
			if t != linearAttention && t != fullAttention {
				return fmt.Errorf("modelgen: layer type %q (want %s or %s)", t, linearAttention, fullAttention)
			}
		}
	}
	if rot := int(float64(o.HeadDim) * o.PartialRotary); o.HeadDim > 0 && (rot <= 0 || rot%2 != 0) {
		return fmt.Errorf("modelgen: PartialRotary %g of head dim %d", o.PartialRotary, o.HeadDim)
	}
	switch {
	case o.Family == model.Qwen35 && o.NumExperts != 0:
		return errors.New("modelgen: qwen3_5 is dense (use qwen3_5_moe for experts)")
	case o.Family == model.Qwen35MoE && o.NumExperts == 0:
		return errors.New("modelgen: qwen3_5_moe needs NumExperts")
	case o.Family == model.Qwen35MoE && (len(o.MLPOnlyLayers) > 0 || o.SparseStep > 1):
		return errors.New("modelgen: qwen3_5_moe has experts on every layer")
	}
	if o.NumExperts > 0 {
		if o.TopK == 0 {
			o.TopK = 2
		}
		if o.MoEIntermediate == 0 {
			o.MoEIntermediate = o.IntermediateSize / 2
		}
		if o.SharedIntermediate == 0 {
			o.SharedIntermediate = o.MoEIntermediate
		}
		if o.SparseStep == 0 {
			o.SparseStep = 1
		}
		if o.NumExperts < 2 || o.TopK <= 0 || o.TopK > o.NumExperts || o.MoEIntermediate <= 0 || o.SharedIntermediate <= 0 || o.SparseStep <= 0 {
			return fmt.Errorf("modelgen: %d experts, top %d, intermediate %d, shared %d", o.NumExperts, o.TopK, o.MoEIntermediate, o.SharedIntermediate)
		}
	}
	if o.Layout == LayoutHF && o.Quantization != nil {
		return errors.New("modelgen: MLX quantization exists in the mlx-community layout only (use LayoutMLX)")
	}
	return nil
}

// htensor is one tensor of a hybrid checkpoint before it becomes a matrix: its name, shape and values, whether
// it belongs to a linear module (".weight" of a matrix, stacked or not: quantizable), and whether it is stored in
// float32 whatever the model dtype.
type htensor struct {
	name   string
	shape  []int
	linear bool
	f32    bool
	values func([]float32)
}

func (t htensor) size() int {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// hybridPrefix is the module path of the text model in the Hugging Face layout.
func (g *generator) hybridPrefix() string {
	if g.o.Family == model.Qwen3Next {
		return "model."
	}
	return "model.language_model."
}

// hybridHF lists the Hugging Face checkpoint's tensors in model order, with §6.1's value ranges.
func (g *generator) hybridHF() []htensor {
	o := &g.o
	h := o.HiddenSize
	nk, nv, dk, dv := o.LinearKeyHeads, o.LinearValueHeads, o.LinearKeyDim, o.LinearValueDim
	qk, v, r := nk*dk, nv*dv, nv/nk
	C := 2*qk + v
	resid := float32(o.ResidualScale)
	pre := g.hybridPrefix()
	var ts []htensor
	add := func(name string, linear bool, values func([]float32), shape ...int) {
		ts = append(ts, htensor{name: name, shape: shape, linear: linear, values: values})
	}
	// Values are seeded by the name under model. whatever the family's prefix, so qwen3_next and qwen3_5 of a
	// seed hold the same projections (a check of qwen3_next's grouped layout).
	normal := func(name string, std, mean float32) func([]float32) {
		return g.normal("model."+strings.TrimPrefix(name, pre), std, mean)
	}
	lin := func(name string, out, in int, std float32) { add(name, true, normal(name, std, 0), out, in) }
	vec := func(name string, n int, mean, std float32) { add(name, false, normal(name, std, mean), n) }
	add(pre+"embed_tokens.weight", true, g.embedding, o.VocabSize, h)
	for i := 0; i < o.NumLayers; i++ {
		p := fmt.Sprintf("%slayers.%d.", pre, i)
		// (1+w) norms: w ~ N(0, 0.1), so a loader that forgets the +1 scales by ~0 and fails loudly.
		vec(p+"input_layernorm.weight", h, 0, 0.1)
		vec(p+"post_attention_layernorm.weight", h, 0, 0.1)
		if o.linearLayer(i) {
			la := p + "linear_attn."
			// The logical projections, named as qwen3_5 stores them.
			qkv := normal(la+"in_proj_qkv.weight", invSqrt(h), 0)
			z := normal(la+"in_proj_z.weight", invSqrt(h), 0)
			// b ~ N(0, 2²) per unit-RMS input: β = σ(b) spans about [0.02, 0.98]; a ~ N(0, 3.5²) around dt_bias's
			// [-18, 18]: a + dt_bias spans about [-25, 25], both branches of softplus (threshold 20).
			b := normal(la+"in_proj_b.weight", 2*invSqrt(h), 0)
			a := normal(la+"in_proj_a.weight", 3.5*invSqrt(h), 0)
			if o.Family == model.Qwen3Next {
				add(la+"in_proj_qkvz.weight", true, groupedQKVZ(qkv, z, nk, dk, r*dv, h), 2*qk+2*v, h)
				add(la+"in_proj_ba.weight", true, groupedBA(b, a, nk, r, h), 2*nv, h)
			} else {
				add(la+"in_proj_qkv.weight", true, qkv, C, h)
				add(la+"in_proj_z.weight", true, z, v, h)
				add(la+"in_proj_b.weight", true, b, nv, h)
				add(la+"in_proj_a.weight", true, a, nv, h)
			}
			add(la+"conv1d.weight", false, normal(la+"conv1d.weight", 0.5, 0), C, 1, o.ConvKernel)
			add(la+"dt_bias", false, linspace(-18, 18), nv)
			// A = exp(A_log) from 1e-3 (nearly no decay) to 16 (forgetting within a token: the cumulative log-decay
			// of a 64-token chunk falls far below -100).
			ts = append(ts, htensor{name: la + "A_log", shape: []int{nv}, f32: o.Family != model.Qwen3Next,
				values: linspace(math.Log(1e-3), math.Log(16))})
			vec(la+"norm.weight", dv, 1, 0.1) // the gated norm's plain weight
			lin(la+"out_proj.weight", h, v, resid*invSqrt(v))
		} else {
			qDim, kvDim := o.NumHeads*o.HeadDim, o.NumKVHeads*o.HeadDim
			lin(p+"self_attn.q_proj.weight", 2*qDim, h, invSqrt(h))
			lin(p+"self_attn.k_proj.weight", kvDim, h, invSqrt(h))
			lin(p+"self_attn.v_proj.weight", kvDim, h, invSqrt(h))
			lin(p+"self_attn.o_proj.weight", h, qDim, resid*invSqrt(qDim))
			vec(p+"self_attn.q_norm.weight", o.HeadDim, 0, 0.1)
			vec(p+"self_attn.k_norm.weight", o.HeadDim, 0, 0.1)
		}
		if !o.hybridSparse(i) {
			lin(p+"mlp.gate_proj.weight", o.IntermediateSize, h, invSqrt(h))
			lin(p+"mlp.up_proj.weight", o.IntermediateSize, h, invSqrt(h))
			lin(p+"mlp.down_proj.weight", h, o.IntermediateSize, resid*invSqrt(o.IntermediateSize))
			continue
		}
		E, I, si := o.NumExperts, o.MoEIntermediate, o.SharedIntermediate
		lin(p+"mlp.gate.weight", E, h, invSqrt(h))
		expert := func(e int, n string) func([]float32) {
			std := invSqrt(h)
			if n == "down_proj" {
				std = resid * invSqrt(I)
			}
			return normal(fmt.Sprintf("%smlp.experts.%d.%s.weight", p, e, n), std, 0)
		}
		if o.Family == model.Qwen3Next {
			for e := range E {
				add(fmt.Sprintf("%smlp.experts.%d.gate_proj.weight", p, e), true, expert(e, "gate_proj"), I, h)
				add(fmt.Sprintf("%smlp.experts.%d.up_proj.weight", p, e), true, expert(e, "up_proj"), I, h)
				add(fmt.Sprintf("%smlp.experts.%d.down_proj.weight", p, e), true, expert(e, "down_proj"), h, I)
			}
		} else {
			// transformers' fused experts: gate_up_proj [E, 2I, H] (gate rows, then up rows), down_proj [E, H, I].
			add(p+"mlp.experts.gate_up_proj", false, func(dst []float32) {
				for e := range E {
					expert(e, "gate_proj")(dst[(2*e)*I*h : (2*e+1)*I*h])
					expert(e, "up_proj")(dst[(2*e+1)*I*h : (2*e+2)*I*h])
				}
			}, E, 2*I, h)
			add(p+"mlp.experts.down_proj", false, func(dst []float32) {
				for e := range E {
					expert(e, "down_proj")(dst[e*h*I : (e+1)*h*I])
				}
			}, E, h, I)
		}
		lin(p+"mlp.shared_expert.gate_proj.weight", si, h, invSqrt(h))
		lin(p+"mlp.shared_expert.up_proj.weight", si, h, invSqrt(h))
		lin(p+"mlp.shared_expert.down_proj.weight", h, si, resid*invSqrt(si))
		lin(p+"mlp.shared_expert_gate.weight", 1, h, invSqrt(h))
	}
	if o.TieWordEmbeddings {
		vec(pre+"norm.weight", h, -1, 1) // zero-mean multipliers 1+w (see weights)
	} else {
		vec(pre+"norm.weight", h, 0, 0.1)
		add("lm_head.weight", true, g.outputLayer, o.VocabSize, h)
	}
	// Stand-ins for what loaders leave alone: the multi-token-prediction head and (qwen3_5) the vision tower.
	lin("mtp.fc.weight", h, 2*h, invSqrt(2*h))
	vec("mtp.layers.0.input_layernorm.weight", h, 0, 0.1)
	if o.Family != model.Qwen3Next {
		lin("model.visual.blocks.0.attn.qkv.weight", 96, 32, invSqrt(32))
		vec("model.visual.blocks.0.norm1.weight", 32, 1, 0.1)
	}
	return ts
}

// linspace fills dst with n evenly spaced values from lo to hi.
func linspace(lo, hi float64) func([]float32) {
	return func(dst []float32) {
		for i := range dst {
			t := 0.5
			if len(dst) > 1 {
				t = float64(i) / float64(len(dst)-1)
			}
			dst[i] = float32(lo + t*(hi-lo))
		}
	}
}

// groupedQKVZ is in_proj_qkvz from the logical [Q|K|V] and Z matrices: per key head j, q_j (dk rows), k_j, the
// rv rows of V of its value heads, then those of Z (Hugging Face's fix_query_key_value_ordering, reversed).
func groupedQKVZ(qkv, z func([]float32), nk, dk, rv, h int) func([]float32) {
	return func(dst []float32) {
		qk := nk * dk
		a := make([]float32, (2*qk+nk*rv)*h)
		b := make([]float32, nk*rv*h)
		qkv(a)
		z(b)
		off := 0
		put := func(src []float32, row, n int) {
			copy(dst[off:], src[row*h:(row+n)*h])
			off += n * h
		}
		for j := 0; j < nk; j++ {
			put(a, j*dk, dk)
			put(a, qk+j*dk, dk)
			put(a, 2*qk+j*rv, rv)
			put(b, j*rv, rv)
		}
	}
}

// groupedBA is in_proj_ba from the logical b and a: per key head j, the r rows of b of its value heads, then a's.
func groupedBA(b, a func([]float32), nk, r, h int) func([]float32) {
	return func(dst []float32) {
		bv, av := make([]float32, nk*r*h), make([]float32, nk*r*h)
		b(bv)
		a(av)
		off := 0
		for j := 0; j < nk; j++ {
			off += copy(dst[off:], bv[j*r*h:(j+1)*r*h])
			off += copy(dst[off:], av[j*r*h:(j+1)*r*h])
		}
	}
}

// hybridNormSuffixes are the (1+w) norms mlx-lm's sanitize folds (its norm_keys); the gated norm
// (linear_attn.norm.weight) is not among them.
var hybridNormSuffixes = []string{".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
	".q_norm.weight", ".k_norm.weight"}

// sanitizeMLX is mlx-lm's sanitize for these families, on a Hugging Face tensor list: qwen3_5's renaming
// (model.language_model. → language_model.model., anything else under language_model.) and dropped vision tower,
// the experts stacked into switch_mlp (per-expert modules stacked, transformers' fused gate_up split into gate and
// up), mtp.* dropped, the conv weight's [C, 1, K] moved to [C, K, 1] (the same bytes) and 1 added to the (1+w)
// norms in the stored dtype (mlx-lm adds to the loaded bfloat16 array). mlx-lm's qwen3_next applies it only when
// layer 0 has per-expert tensors; a generated Hugging Face checkpoint is always unsanitized, so it always applies.
func (g *generator) sanitizeMLX(in []htensor) []htensor {
	o := &g.o
	nested := o.Family != model.Qwen3Next
	var out []htensor
	stacks := map[string]*htensor{} // switch_mlp name → stacked tensor being filled
	for _, t := range in {
		name := t.name
		if nested {
			switch {
			case strings.HasPrefix(name, "model.visual") || strings.HasPrefix(name, "vision_tower"):
				continue
			case strings.HasPrefix(name, "model.language_model"):
				name = strings.Replace(name, "model.language_model", "language_model.model", 1)
			default:
				name = "language_model." + name
			}
		}
		if strings.Contains(name, "mtp.") {
			continue
		}
		t.name = name
		switch {
		case strings.Contains(name, ".mlp.experts.gate_up_proj"):
			E, I, h := t.shape[0], t.shape[1]/2, t.shape[2]
			fused := t.values
			base := strings.TrimSuffix(name, "experts.gate_up_proj")
			for k, n := range []string{"gate_proj", "up_proj"} {
				out = append(out, htensor{name: base + "switch_mlp." + n + ".weight", shape: []int{E, I, h}, linear: true,
					values: func(dst []float32) {
						all := make([]float32, E*2*I*h)
						fused(all)
						for e := range E {
							copy(dst[e*I*h:(e+1)*I*h], all[(2*e+k)*I*h:(2*e+k+1)*I*h])
						}
					}})
			}
			continue
		case strings.Contains(name, ".mlp.experts.down_proj"):
			t.name, t.linear = strings.TrimSuffix(name, "experts.down_proj")+"switch_mlp.down_proj.weight", true
		case strings.Contains(name, ".mlp.experts."):
			// …mlp.experts.{e}.{n}.weight → …mlp.switch_mlp.{n}.weight [E, out, in], experts in index order.
			i := strings.Index(name, ".mlp.experts.")
			rest := name[i+len(".mlp.experts."):]
			dot := strings.IndexByte(rest, '.')
			sname := name[:i] + ".mlp.switch_mlp." + rest[dot+1:]
			s, ok := stacks[sname]
			if !ok {
				s = &htensor{name: sname, shape: append([]int{0}, t.shape...), linear: true}
				stacks[sname] = s
				out = append(out, htensor{name: sname}) // placeholder, keeps model order
			}
			s.shape[0]++
			per, prev, fill := t.size(), s.values, t.values
			e := s.shape[0] - 1
			s.values = func(dst []float32) {
				if prev != nil {
					prev(dst[:e*per])
				}
				fill(dst[e*per : (e+1)*per])
			}
			continue
		case strings.HasSuffix(name, "conv1d.weight") && t.shape[len(t.shape)-1] != 1:
			t.shape = []int{t.shape[0], t.shape[2], t.shape[1]}
		case len(t.shape) == 1 && hasSuffix(name, hybridNormSuffixes):
			w, round := t.values, o.DType.Round
			t.values = func(dst []float32) {
				w(dst)
				for i := range dst {
					dst[i] = round(dst[i]) + 1
				}
			}
		}
		out = append(out, t)
	}
	for i := range out {
		if s, ok := stacks[out[i].name]; ok && out[i].shape == nil {
			out[i] = *s
		}
	}
	return out
}

func hasSuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// hybridWeights is the model's tensor list in the layout asked for, as matrices (linear modules quantizable,
// the rest written as they are).
func (g *generator) hybridWeights() []matrix {
	o := &g.o
	ts := g.hybridHF()
	if o.Layout == LayoutMLX {
		ts = g.sanitizeMLX(ts)
	}
	var ms []matrix
	for _, t := range ts {
		t := t
		quantizable := t.linear && (len(t.shape) == 2 || len(t.shape) == 3)
		if q := o.Quantization; quantizable && q != nil {
			if _, own := g.overrides[strings.TrimSuffix(t.name, ".weight")]; !own && t.shape[len(t.shape)-1]%q.GroupSize != 0 {
				quantizable = false // mlx-lm quantizes only modules whose input divides into groups
			}
		}
		if quantizable {
			m := matrix{module: strings.TrimSuffix(t.name, ".weight"), linear: true, suffix: ".weight", values: t.values}
			if len(t.shape) == 3 {
				m.experts = t.shape[0]
			}
			m.out, m.in = t.shape[len(t.shape)-2], t.shape[len(t.shape)-1]
			ms = append(ms, m)
			continue
		}
		dt, st := o.DType, g.floatType()
		if t.f32 {
			dt, st = dtype.Float32, safetensors.F32
		}
		ms = append(ms, matrix{module: t.name, emit: func(add addFunc) error {
			return add(t.name, st, t.shape, func(dst []byte) error {
				v := make([]float32, t.size())
				t.values(v)
				return dtype.Encode(dt, dst, v)
			})
		}})
	}
	return ms
}

// hybridOverrides: mlx-lm's quant_predicate for these families keeps the router and the shared expert's gate at
// 8 bits in groups of 64 (qwen3_5 dense has none).
func (g *generator) hybridOverrides() {
	o := &g.o
	if o.Layout != LayoutMLX || o.Quantization == nil || o.NumExperts == 0 || o.HiddenSize%64 != 0 {
		return
	}
	pre := "model."
	if o.Family != model.Qwen3Next {
		pre = "language_model.model."
	}
	for i := 0; i < o.NumLayers; i++ {
		if !o.hybridSparse(i) {
			continue
		}
		for _, n := range []string{"mlp.gate", "mlp.shared_expert_gate"} {
			if _, set := g.overrides[fmt.Sprintf("%slayers.%d.%s", pre, i, n)]; !set {
				g.overrides[fmt.Sprintf("%slayers.%d.%s", pre, i, n)] = &model.QuantParams{GroupSize: 64, Bits: 8, Mode: model.ModeAffine}
			}
		}
	}
}

// hybridConfigJSON is config.json as transformers writes it (qwen3_next flat; qwen3_5 and qwen3_5_moe nested under
// text_config beside a vision_config), with mlx-lm's quantization entry at the top level in the mlx layout.
func (g *generator) hybridConfigJSON() ([]byte, error) {
	o := &g.o
	eos := any(g.tok.eosIDs)
	if len(g.tok.eosIDs) == 1 {
		eos = g.tok.eosIDs[0]
	}
	var bos any
	if g.tok.bosID != nil {
		bos = *g.tok.bosID
	}
	moe := o.NumExperts > 0
	quant := g.quantizationJSON()
	if o.Family == model.Qwen3Next {
		c := obj{
			{"architectures", []string{"Qwen3NextForCausalLM"}}, {"attention_bias", false}, {"attention_dropout", 0.0},
			{"bos_token_id", bos}, {"decoder_sparse_step", max(o.SparseStep, 1)}, {"eos_token_id", eos},
			{"full_attention_interval", o.FullAttentionInterval}, {"head_dim", o.HeadDim}, {"hidden_act", "silu"},
			{"hidden_size", o.HiddenSize}, {"initializer_range", 0.02}, {"intermediate_size", o.IntermediateSize},
		}
		if o.LayerTypes != nil {
			c = append(c, kv{"layer_types", o.LayerTypes})
		}
		c = append(c, g.linearKeys()...)
		c = append(c, kv{"max_position_embeddings", o.MaxPositionEmbeddings}, kv{"mlp_only_layers", append([]int{}, o.MLPOnlyLayers...)},
			kv{"model_type", string(o.Family)}, kv{"moe_intermediate_size", o.MoEIntermediate}, kv{"norm_topk_prob", o.NormTopK},
			kv{"num_attention_heads", o.NumHeads}, kv{"num_experts", o.NumExperts}, kv{"num_experts_per_tok", o.TopK},
			kv{"num_hidden_layers", o.NumLayers}, kv{"num_key_value_heads", o.NumKVHeads}, kv{"output_router_logits", false},
			kv{"partial_rotary_factor", o.PartialRotary})
		if quant != nil {
			c = append(c, kv{"quantization", quant}, kv{"quantization_config", quant})
		}
		c = append(c, kv{"rms_norm_eps", 1e-6}, kv{"rope_scaling", nil}, kv{"rope_theta", o.RopeTheta},
			kv{"router_aux_loss_coef", 0.001}, kv{"shared_expert_intermediate_size", o.SharedIntermediate},
			kv{"tie_word_embeddings", o.TieWordEmbeddings}, kv{"torch_dtype", string(o.DType)}, kv{"use_cache", true},
			kv{"use_sliding_window", false}, kv{"vocab_size", o.VocabSize})
		return indentJSON(c)
	}
	s := int(float64(o.HeadDim)*o.PartialRotary) / 2 // mRoPE sections split the rotary pairs, as [11, 11, 10] splits 32
	text := obj{
		{"attention_bias", false}, {"attention_dropout", 0.0}, {"attn_output_gate", true}, {"bos_token_id", bos},
		{"dtype", string(o.DType)}, {"eos_token_id", eos}, {"full_attention_interval", o.FullAttentionInterval},
		{"head_dim", o.HeadDim}, {"hidden_act", "silu"}, {"hidden_size", o.HiddenSize}, {"initializer_range", 0.02},
	}
	if !moe {
		text = append(text, kv{"intermediate_size", o.IntermediateSize})
	}
	lt := o.LayerTypes
	if lt == nil {
		lt = o.hybridLayerTypes()
	}
	text = append(text, kv{"layer_types", lt})
	text = append(text, g.linearKeys()...)
	text = append(text, kv{"max_position_embeddings", o.MaxPositionEmbeddings}, kv{"model_type", string(o.Family) + "_text"})
	if moe {
		text = append(text, kv{"moe_intermediate_size", o.MoEIntermediate})
	}
	text = append(text, kv{"mtp_num_hidden_layers", 1}, kv{"num_attention_heads", o.NumHeads})
	if moe {
		text = append(text, kv{"num_experts", o.NumExperts}, kv{"num_experts_per_tok", o.TopK})
	}
	text = append(text, kv{"num_hidden_layers", o.NumLayers}, kv{"num_key_value_heads", o.NumKVHeads}, kv{"rms_norm_eps", 1e-6},
		kv{"rope_parameters", obj{{"mrope_interleaved", true}, {"mrope_section", []int{(s + 2) / 3, (s + 1) / 3, s / 3}},
			{"partial_rotary_factor", o.PartialRotary}, {"rope_theta", o.RopeTheta}, {"rope_type", "default"}}})
	if moe {
		text = append(text, kv{"shared_expert_intermediate_size", o.SharedIntermediate})
	}
	text = append(text, kv{"tie_word_embeddings", o.TieWordEmbeddings}, kv{"use_cache", true}, kv{"vocab_size", o.VocabSize})
	arch := "Qwen3_5ForConditionalGeneration"
	if moe {
		arch = "Qwen3_5MoeForConditionalGeneration"
	}
	c := obj{{"architectures", []string{arch}}, {"image_token_id", 248056}, {"model_type", string(o.Family)}}
	if quant != nil {
		c = append(c, kv{"quantization", quant}, kv{"quantization_config", quant})
	}
	c = append(c, kv{"text_config", text}, kv{"tie_word_embeddings", o.TieWordEmbeddings}, kv{"video_token_id", 248057},
		kv{"vision_config", obj{{"depth", 1}, {"hidden_size", 32}, {"model_type", string(o.Family) + "_vision"}, {"num_heads", 2}}})
	return indentJSON(c)
}

// linearKeys are the Gated DeltaNet's config keys.
func (g *generator) linearKeys() obj {
	o := &g.o
	return obj{{"linear_conv_kernel_dim", o.ConvKernel}, {"linear_key_head_dim", o.LinearKeyDim},
		{"linear_num_key_heads", o.LinearKeyHeads}, {"linear_num_value_heads", o.LinearValueHeads},
		{"linear_value_head_dim", o.LinearValueDim}}
}

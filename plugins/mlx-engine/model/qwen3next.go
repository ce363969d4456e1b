package model

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// The hybrid Qwen families (transformers models/qwen3_next and models/qwen3_5, qwen3_5_moe; mlx-lm qwen3_next.py,
// qwen3_5.py, qwen3_5_moe.py; docs/hybrid-design.md §2). Most layers are Gated DeltaNet (linear attention)
// layers; every full_attention_interval-th layer (or as layer_types says) is a gated full attention whose q_proj
// gives each head a query and an output gate, with q/k norms and partial RoPE. All norms but the DeltaNet's
// gated norm are (1+w) RMSNorms: mlx-lm's sanitize folds the +1 into the stored weights, and Load folds it into
// float32 copies for a Hugging Face checkpoint, so the blocks see plain RMSNorm weights in either layout.
// qwen3_next's feed-forward blocks are Qwen MoE blocks with a sigmoid-gated shared expert (dense on
// mlp_only_layers); qwen3_5_moe's are on every layer; qwen3_5's are dense. qwen3_5 and qwen3_5_moe nest the text
// model's keys under text_config and its tensors under model.language_model.; their vision tower and the
// multi-token-prediction head (mtp.*) are left unbound on purpose.

// hybridKeys are the config keys only the hybrid families read.
type hybridKeys struct {
	TextConfig            json.RawMessage `json:"text_config"`
	LinearNumKeyHeads     *int            `json:"linear_num_key_heads"`
	LinearNumValueHeads   *int            `json:"linear_num_value_heads"`
	LinearKeyHeadDim      *int            `json:"linear_key_head_dim"`
	LinearValueHeadDim    *int            `json:"linear_value_head_dim"`
	LinearConvKernelDim   *int            `json:"linear_conv_kernel_dim"`
	FullAttentionInterval *int            `json:"full_attention_interval"`
	LayerTypes            []string        `json:"layer_types"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	AttnOutputGate        *bool           `json:"attn_output_gate"`
}

// hybridExt is what hybridPrepare hands to hybridSpec.
type hybridExt struct {
	linear   []bool // per layer: a linear-attention layer
	deltaNet DeltaNetSpec
	rotary   float64 // partial_rotary_factor
	rope     *ropeEntry
	ropeKey  string
}

// Layer kinds of layer_types in the hybrid families.
const linearAttention = "linear_attention"

// hybridNested reports whether family f nests its text model under text_config.
func hybridNested(f Family) bool { return f == Qwen35 || f == Qwen35MoE }

func hybridPrepare(r *rawConfig) error {
	var k hybridKeys
	if err := json.Unmarshal(r.raw, &k); err != nil {
		return fmt.Errorf("not a valid config: %w", err)
	}
	fam := r.family
	if hybridNested(fam) && !isNull(k.TextConfig) {
		// mlx-lm's ModelArgs.from_dict: the text model's keys live in text_config; quantization, ids, dtype and
		// tie_word_embeddings are also looked up at the top level (mlx-lm writes quantization there). Copies:
		// unmarshalling into a RawMessage reuses its bytes.
		bos, eos := bytes.Clone(r.BOSTokenID), bytes.Clone(r.EOSTokenID)
		q, qc := bytes.Clone(r.Quantization), bytes.Clone(r.QuantizationConfig)
		dt, dt2 := r.TorchDType, r.DType
		if err := json.Unmarshal(k.TextConfig, r); err != nil {
			return fmt.Errorf("text_config: %w", err)
		}
		text := hybridKeys{}
		if err := json.Unmarshal(k.TextConfig, &text); err != nil {
			return fmt.Errorf("text_config: %w", err)
		}
		k = text
		for _, keep := range []struct {
			top json.RawMessage
			dst *json.RawMessage
		}{{bos, &r.BOSTokenID}, {eos, &r.EOSTokenID}, {q, &r.Quantization}, {qc, &r.QuantizationConfig}} {
			if !isNull(keep.top) {
				*keep.dst = keep.top
			}
		}
		if dt != "" {
			r.TorchDType = dt
		}
		if dt2 != "" {
			r.DType = dt2
		}
	}
	if r.UseSlidingWindow != nil && *r.UseSlidingWindow {
		return errors.New("use_sliding_window is true: sliding-window attention is not supported for this family")
	}
	if k.AttnOutputGate != nil && !*k.AttnOutputGate {
		return errors.New("attn_output_gate false is not supported (the attention of this family is gated)")
	}
	if fam == Qwen35MoE && r.IntermediateSize == nil {
		// Qwen3_5MoeTextConfig has no dense MLP and no intermediate_size; the common keys want one.
		r.IntermediateSize = r.MoEIntermediateSize
	}
	if r.NumHiddenLayers == nil {
		return errors.New("num_hidden_layers is missing")
	}
	n := *r.NumHiddenLayers
	if n <= 0 || n > maxDim {
		return fmt.Errorf("num_hidden_layers = %d is out of range", n)
	}
	ext := &hybridExt{rotary: 0.25}
	req := func(name string, v *int) (int, error) {
		if v == nil {
			return 0, fmt.Errorf("%s is missing", name)
		}
		return positive(name, v, 0)
	}
	var err error
	d := &ext.deltaNet
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{
		{"linear_num_key_heads", k.LinearNumKeyHeads, &d.KeyHeads},
		{"linear_num_value_heads", k.LinearNumValueHeads, &d.ValueHeads},
		{"linear_key_head_dim", k.LinearKeyHeadDim, &d.KeyDim},
		{"linear_value_head_dim", k.LinearValueHeadDim, &d.ValueDim},
	} {
		if *f.dst, err = req(f.name, f.v); err != nil {
			return err
		}
	}
	if d.ValueHeads%d.KeyHeads != 0 {
		return fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", d.ValueHeads, d.KeyHeads)
	}
	if d.ConvKernel, err = positive("linear_conv_kernel_dim", k.LinearConvKernelDim, 4); err != nil {
		return err
	}
	if d.ConvKernel < 2 {
		// [C, 1, K] (Hugging Face) and [C, K, 1] (mlx-lm) would be the same shape, and a 1-tap conv has no window.
		return fmt.Errorf("linear_conv_kernel_dim %d is not supported (at least 2)", d.ConvKernel)
	}
	if k.LayerTypes != nil {
		if len(k.LayerTypes) != n {
			return fmt.Errorf("layer_types has %d entries for %d layers", len(k.LayerTypes), n)
		}
		for i, t := range k.LayerTypes {
			switch t {
			case linearAttention, fullAttention:
				ext.linear = append(ext.linear, t == linearAttention)
			default:
				return fmt.Errorf("layer_types[%d] = %q is not supported (supported: %s, %s)", i, t, linearAttention, fullAttention)
			}
		}
	} else {
		interval, err := positive("full_attention_interval", k.FullAttentionInterval, 4)
		if err != nil {
			return err
		}
		for i := range n {
			ext.linear = append(ext.linear, (i+1)%interval != 0)
		}
	}
	// RoPE: rope_parameters (transformers v5, and every qwen3_5 config) or rope_scaling with rope_theta; the
	// rotary fraction from rope_parameters, else the flat key, else the config classes' 0.25. Text-only mRoPE
	// is plain RoPE: its three position ids are equal, so mrope_section only chooses among equal positions.
	raw, key := k.RopeScaling, "rope_scaling"
	if isNull(raw) && !isNull(k.RopeParameters) {
		raw, key = k.RopeParameters, "rope_parameters"
	}
	if ext.rope, err = parseRopeEntry(key, raw); err != nil {
		return err
	}
	ext.ropeKey = key
	if k.PartialRotaryFactor != nil {
		ext.rotary = *k.PartialRotaryFactor
	}
	if !isNull(raw) {
		var p struct {
			PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
		}
		if json.Unmarshal(raw, &p) == nil && p.PartialRotaryFactor != nil {
			ext.rotary = *p.PartialRotaryFactor
		}
	}
	if !(ext.rotary > 0 && ext.rotary <= 1) {
		return fmt.Errorf("partial_rotary_factor %g is out of range (0, 1]", ext.rotary)
	}
	// Read here: the common code would take rope_scaling for llama3 and sliding_window for a context cap.
	r.RopeScaling, r.RopeParameters, r.SlidingWindow = nil, nil, nil
	r.ext = ext
	return nil
}

func hybridSpec(r *rawConfig, c *Config) error {
	ext := r.ext.(*hybridExt)
	rot := int(float64(c.HeadDim) * ext.rotary)
	rope, err := ext.rope.spec(ext.ropeKey, c.RopeTheta, rot, RopeDefault, RopeLinear, RopeYarn)
	if err != nil {
		return err
	}
	if rot <= 0 || rot%2 != 0 {
		return fmt.Errorf("partial_rotary_factor %g of head_dim %d gives %d rotary dims (want a positive even number)", ext.rotary, c.HeadDim, rot)
	}
	c.RopeTheta = rope.Base
	c.QKNorm = true
	norm := NormSpec{Kind: NormRMS, Eps: c.RMSNormEps} // (1+w), folded at load
	a := preNormArch(c, norm, rope)
	dn := ext.deltaNet
	dn.Eps = c.RMSNormEps
	ffn, err := hybridFFN(r, c)
	if err != nil {
		return err
	}
	for i := range a.Layers {
		l := &a.Layers[i]
		if ext.linear[i] {
			l.Kind, l.Attn, l.DeltaNet = LayerLinear, AttnSpec{}, &dn
		} else {
			qk := norm
			l.Attn.QKNorm, l.Attn.OutputGate = &qk, true
		}
		l.FFN = ffn[i]
	}
	c.Arch = a
	return nil
}

// hybridFFN is each layer's feed-forward block: qwen3_next places its MoE blocks as Qwen3NextConfig does (layer
// i is sparse iff it is not in mlp_only_layers, num_experts > 0 and (i+1) % decoder_sparse_step == 0),
// qwen3_5_moe on every layer, qwen3_5 none. Every MoE block has a shared expert behind a sigmoid gate and
// renormalises its top-k probabilities unless norm_topk_prob says otherwise.
func hybridFFN(r *rawConfig, c *Config) ([]FFNSpec, error) {
	out := make([]FFNSpec, c.NumLayers)
	for i := range out {
		out[i] = FFNSpec{Kind: FFNDense, Act: ActSiLU, Intermediate: c.IntermediateSize}
	}
	if c.Family == Qwen35 || r.NumExperts == nil || *r.NumExperts == 0 {
		if c.Family == Qwen35MoE {
			return nil, errors.New("num_experts is missing (qwen3_5_moe has a mixture of experts on every layer)")
		}
		return out, nil
	}
	m, err := moeSpec("num_experts", "num_experts_per_tok", "moe_intermediate_size", r.NumExperts, r.NumExpertsPerTok, r.MoEIntermediateSize)
	if err != nil {
		return nil, err
	}
	m.NormTopK = r.NormTopKProb == nil || *r.NormTopKProb
	if r.SharedExpertIntermediateSize == nil {
		return nil, errors.New("shared_expert_intermediate_size is missing (every MoE block of this family has a shared expert)")
	}
	if m.SharedIntermediate, err = positive("shared_expert_intermediate_size", r.SharedExpertIntermediateSize, 0); err != nil {
		return nil, err
	}
	m.SharedGate = true
	sparse := func(int) bool { return true }
	if c.Family == Qwen3Next {
		step, err := positive("decoder_sparse_step", r.DecoderSparseStep, 1)
		if err != nil {
			return nil, err
		}
		dense := map[int]bool{}
		for _, i := range r.MLPOnlyLayers {
			if i < 0 || i >= c.NumLayers {
				return nil, fmt.Errorf("mlp_only_layers names layer %d of %d", i, c.NumLayers)
			}
			dense[i] = true
		}
		sparse = func(i int) bool { return !dense[i] && (i+1)%step == 0 }
	}
	for i := range out {
		if sparse(i) {
			out[i] = FFNSpec{Kind: FFNMoE, Act: ActSiLU, MoE: m}
		}
	}
	return out, nil
}

// qwen35Prefixes: transformers saves the text model of Qwen3_5(Moe)ForConditionalGeneration under
// model.language_model., mlx-lm's sanitize under language_model.model., and a text-only save under model..
var qwen35Prefixes = []string{"model.language_model.", "language_model.model.", "model."}

// qwen35Head: mlx-lm keeps the untied head beside its language_model.model..
func qwen35Head(pre string) string {
	if pre == "language_model.model." {
		return "language_model.lm_head"
	}
	return "lm_head"
}

// hybridIgnore leaves the multi-token-prediction head (mtp.*, wherever a converter put it) and a multimodal
// checkpoint's vision tower unbound.
func hybridIgnore(name string) bool {
	for _, p := range []string{"mtp.", "model.mtp.", "model.language_model.mtp.", "language_model.mtp.",
		"model.visual.", "visual.", "vision_tower.", "model.vision_tower."} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// hybridBegin decides the checkpoint's layout from its conv weights (docs/hybrid-design.md §2.2): [C, 1, K] is the
// Hugging Face layout, whose (1+w) norms are stored as w and get folded at load; [C, K, 1] is mlx-lm's, whose
// norms already hold 1+w. A model without linear layers falls back on its experts: per-expert or fused experts
// are Hugging Face's, switch_mlp mlx-lm's. Mixed evidence is an error naming both tensors.
func hybridBegin(b *binder, c *Config, pre string) error {
	var hf, mlx, hfExperts, mlxExperts string
	for i := range c.Arch.Layers {
		d := c.Arch.Layers[i].DeltaNet
		if d == nil {
			continue
		}
		name := fmt.Sprintf("%slayers.%d.linear_attn.conv1d.weight", pre, i)
		t, ok := b.tensors[name]
		if !ok {
			continue // reported as missing when the layer binds
		}
		switch C, K := d.ConvDim(), d.ConvKernel; {
		case sameShape(t.Shape, []int{C, 1, K}):
			hf = cmp.Or(hf, name)
		case sameShape(t.Shape, []int{C, K, 1}):
			mlx = cmp.Or(mlx, name)
		default:
			return fmt.Errorf("tensor %q has shape %v, want [%d 1 %d] (Hugging Face) or [%d %d 1] (mlx-lm)", name, t.Shape, C, K, C, K)
		}
	}
	for n := range b.tensors {
		if !strings.HasPrefix(n, pre+"layers.") {
			continue
		}
		switch {
		case strings.Contains(n, ".mlp.experts."):
			if hfExperts == "" || n < hfExperts {
				hfExperts = n
			}
		case strings.Contains(n, ".mlp.switch_mlp."):
			if mlxExperts == "" || n < mlxExperts {
				mlxExperts = n
			}
		}
	}
	switch {
	case hf != "" && mlx != "":
		return fmt.Errorf("mixed layouts: %q is in the Hugging Face layout [C 1 K], %q in mlx-lm's [C K 1]", hf, mlx)
	case mlx != "" && hfExperts != "":
		return fmt.Errorf("mixed layouts: %q is in mlx-lm's layout [C K 1], but %q is a Hugging Face expert tensor", mlx, hfExperts)
	case hf != "":
		b.foldNorms = true
	case mlx != "":
	case hfExperts != "":
		b.foldNorms = true
	case mlxExperts != "":
	default:
		return errors.New("cannot tell the checkpoint's layout: it has no linear_attn.conv1d.weight and no experts")
	}
	return nil
}

func qwen3NextLayer(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error {
	return b.hybridLayer(l, spec, p, hidden, true)
}

func qwen35Layer(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error {
	return b.hybridLayer(l, spec, p, hidden, false)
}

// hybridLayer binds one layer: the norms and the token mixer (linear_attn.* or self_attn.*), then mlp.*.
// grouped: the linear projections are qwen3_next's in_proj_qkvz and in_proj_ba, else qwen3_5's four.
func (b *binder) hybridLayer(l *Layer, spec *LayerSpec, p string, hidden int, grouped bool) error {
	l.Spec = spec
	if spec.Kind == LayerLinear {
		var err error
		if l.AttnIn, err = b.norm(p+"input_layernorm.weight", hidden); err != nil {
			return err
		}
		if l.FFNIn, err = b.norm(p+"post_attention_layernorm.weight", hidden); err != nil {
			return err
		}
		if l.DeltaNet, err = b.deltaNet(p+"linear_attn.", spec.DeltaNet, hidden, grouped); err != nil {
			return err
		}
	} else if err := b.attentionLayer(l, spec, p, hidden); err != nil {
		return err
	}
	return b.hybridMLP(l, spec, p, hidden)
}

// deltaNet binds the Gated DeltaNet under module path p ("….linear_attn.").
func (b *binder) deltaNet(p string, d *DeltaNetSpec, hidden int, grouped bool) (*DeltaNet, error) {
	dn := &DeltaNet{}
	qk, v, nv, r := d.QKDim(), d.VDim(), d.ValueHeads, d.ValueHeads/d.KeyHeads
	if grouped {
		// in_proj_qkvz: one group per key head j, [q_j (Dk) | k_j (Dk) | v of value heads j·r.. (r·Dv) | z of
		// the same heads (r·Dv)]; in_proj_ba: [b of heads j·r.. (r) | a of the same (r)] (Hugging Face's
		// fix_query_key_value_ordering).
		qkvz, err := b.linear(p+"in_proj_qkvz", 2*qk+2*v, hidden, false)
		if err != nil {
			return nil, err
		}
		ba, err := b.linear(p+"in_proj_ba", 2*nv, hidden, false)
		if err != nil {
			return nil, err
		}
		dk, g, rv := d.KeyDim, 2*d.KeyDim+2*r*d.ValueDim, r*d.ValueDim
		var q, k, vv, z, bb, aa []rowRange
		for j := 0; j < d.KeyHeads; j++ {
			q = append(q, rowRange{qkvz, j * g, dk})
			k = append(k, rowRange{qkvz, j*g + dk, dk})
			vv = append(vv, rowRange{qkvz, j*g + 2*dk, rv})
			z = append(z, rowRange{qkvz, j*g + 2*dk + rv, rv})
			bb = append(bb, rowRange{ba, j * 2 * r, r})
			aa = append(aa, rowRange{ba, j*2*r + r, r})
		}
		dn.QKV = newProjection(p+"in_proj_qkvz(qkv)", hidden, append(append(q, k...), vv...))
		dn.Z = newProjection(p+"in_proj_qkvz(z)", hidden, z)
		dn.B = newProjection(p+"in_proj_ba(b)", hidden, bb)
		dn.A = newProjection(p+"in_proj_ba(a)", hidden, aa)
		dn.Stored = []*Linear{qkvz, ba}
	} else {
		for _, s := range []struct {
			dst  **Projection
			name string
			out  int
		}{{&dn.QKV, "in_proj_qkv", 2*qk + v}, {&dn.Z, "in_proj_z", v}, {&dn.B, "in_proj_b", nv}, {&dn.A, "in_proj_a", nv}} {
			l, err := b.linear(p+s.name, s.out, hidden, false)
			if err != nil {
				return nil, err
			}
			*s.dst = newProjection(l.Name, hidden, []rowRange{{l, 0, s.out}})
			dn.Stored = append(dn.Stored, l)
		}
	}
	var err error
	if dn.Conv, err = b.conv(p+"conv1d.weight", d); err != nil {
		return nil, err
	}
	for _, s := range []struct {
		dst  **safetensors.Tensor
		name string
	}{{&dn.DtBias, "dt_bias"}, {&dn.ALog, "A_log"}} {
		t, err := b.vector(p+s.name, nv)
		if err != nil {
			return nil, err
		}
		if t.DType != safetensors.F32 {
			f, err := Vector(t)
			if err != nil {
				return nil, err
			}
			t = float32Tensor(t.Name, f, nv)
		}
		*s.dst = t
	}
	if dn.Norm, err = b.vector(p+"norm.weight", d.ValueDim); err != nil {
		return nil, err
	}
	if dn.Out, err = b.linear(p+"out_proj", hidden, v, false); err != nil {
		return nil, err
	}
	return dn, nil
}

// conv binds a depthwise conv weight, [C, 1, K] in the Hugging Face layout or [C, K, 1] in mlx-lm's (the
// layout hybridBegin found), as an owned F32 [K, C] tap-major tensor. Both stored shapes hold tap τ of channel c
// at c·K+τ.
func (b *binder) conv(name string, d *DeltaNetSpec) (*safetensors.Tensor, error) {
	t, err := b.get(name)
	if err != nil {
		return nil, err
	}
	C, K := d.ConvDim(), d.ConvKernel
	want := []int{C, K, 1}
	if b.foldNorms {
		want = []int{C, 1, K}
	}
	if !sameShape(t.Shape, want) {
		return nil, fmt.Errorf("tensor %q has shape %v, want %v (the checkpoint's other conv weights are in that layout)", name, t.Shape, want)
	}
	src, err := Vector(t)
	if err != nil {
		return nil, err
	}
	dst := make([]float32, K*C)
	for c := 0; c < C; c++ {
		for tau := 0; tau < K; tau++ {
			dst[tau*C+c] = src[c*K+tau]
		}
	}
	return float32Tensor(name, dst, K, C), nil
}

// hybridMLP binds a layer's mlp.*: a dense MLP, or a MoE block's router (mlp.gate), experts in any of the three
// layouts (Hugging Face's fused mlp.experts.gate_up_proj [E, 2I, H] with mlp.experts.down_proj [E, H, I], one
// module per expert, or mlx-lm's stacked switch_mlp), the shared expert and its gate.
func (b *binder) hybridMLP(l *Layer, spec *LayerSpec, p string, hidden int) error {
	f := &spec.FFN
	var err error
	if f.Kind == FFNDense {
		l.MLP = &MLP{}
		if l.MLP.Gate, err = b.linear(p+"mlp.gate_proj", f.Intermediate, hidden, false); err != nil {
			return err
		}
		if l.MLP.Up, err = b.linear(p+"mlp.up_proj", f.Intermediate, hidden, false); err != nil {
			return err
		}
		l.MLP.Down, err = b.linear(p+"mlp.down_proj", hidden, f.Intermediate, false)
		return err
	}
	m := f.MoE
	e := &MoE{}
	if e.Router, err = b.linear(p+"mlp.gate", m.Experts, hidden, false); err != nil {
		return err
	}
	fused := p + "mlp.experts.gate_up_proj"
	if b.has(fused) || b.has(p+"mlp.experts.down_proj") {
		for _, other := range []string{p + "mlp.experts.0.gate_proj.weight", p + "mlp.switch_mlp.gate_proj.weight"} {
			if b.has(other) {
				return fmt.Errorf("mixed expert layouts: %q and %q", fused, other)
			}
		}
		if e.Gate, e.Up, e.Down, err = b.fusedExperts(p+"mlp.experts.", m, hidden); err != nil {
			return err
		}
	} else {
		names := [3]string{"gate_proj", "up_proj", "down_proj"}
		if e.Gate, e.Up, e.Down, err = b.expertSet(p+"mlp.", "experts", names, names, m, hidden); err != nil {
			return err
		}
	}
	si := m.SharedIntermediate
	e.Shared = &MLP{}
	if e.Shared.Gate, err = b.linear(p+"mlp.shared_expert.gate_proj", si, hidden, false); err != nil {
		return err
	}
	if e.Shared.Up, err = b.linear(p+"mlp.shared_expert.up_proj", si, hidden, false); err != nil {
		return err
	}
	if e.Shared.Down, err = b.linear(p+"mlp.shared_expert.down_proj", hidden, si, false); err != nil {
		return err
	}
	if e.SharedGate, err = b.linear(p+"mlp.shared_expert_gate", 1, hidden, false); err != nil {
		return err
	}
	l.MoE = e
	return nil
}

// fusedExperts binds transformers' fused experts under p ("….mlp.experts."): gate_up_proj [E, 2I, H] (expert
// e's first I rows are its gate, the next I its up) and down_proj [E, H, I], float, as per-expert views.
func (b *binder) fusedExperts(p string, m *MoESpec, hidden int) (gate, up, down *Experts, err error) {
	E, I := m.Experts, m.Intermediate
	gu, err := b.get(p + "gate_up_proj")
	if err != nil {
		return nil, nil, nil, err
	}
	dn, err := b.get(p + "down_proj")
	if err != nil {
		return nil, nil, nil, err
	}
	for _, c := range []struct {
		t     *safetensors.Tensor
		shape []int
	}{{gu, []int{E, 2 * I, hidden}}, {dn, []int{E, hidden, I}}} {
		if _, err := floatDType(c.t); err != nil {
			return nil, nil, nil, err
		}
		if !sameShape(c.t.Shape, c.shape) {
			return nil, nil, nil, fmt.Errorf("tensor %q has shape %v, want %v", c.t.Name, c.t.Shape, c.shape)
		}
	}
	view := func(t *safetensors.Tensor, name string, e, off, rows, in int) Linear {
		sz := t.DType.Size()
		per := len(t.Data) / E
		lo := e*per + off*in*sz
		hi := lo + rows*in*sz
		return Linear{Name: fmt.Sprintf("%s.%d", name, e), Out: rows, In: in,
			Weight: &safetensors.Tensor{Name: fmt.Sprintf("%s[%d][%d:%d]", t.Name, e, off, off+rows), DType: t.DType,
				Shape: []int{rows, in}, Data: t.Data[lo:hi:hi]}}
	}
	gate = &Experts{Name: p + "gate_up_proj(gate)", E: E, Out: I, In: hidden, Each: make([]Linear, E)}
	up = &Experts{Name: p + "gate_up_proj(up)", E: E, Out: I, In: hidden, Each: make([]Linear, E)}
	down = &Experts{Name: p + "down_proj", E: E, Out: hidden, In: I, Each: make([]Linear, E),
		Stacked: &Linear{Name: p + "down_proj", Out: E * hidden, In: I, Weight: dn}}
	for e := range E {
		gate.Each[e] = view(gu, gate.Name, e, 0, I, hidden)
		up.Each[e] = view(gu, up.Name, e, I, I, hidden)
		down.Each[e] = view(dn, down.Name, e, 0, hidden, I)
	}
	return gate, up, down, nil
}

package model

import (
	"fmt"
	"strconv"

	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// familyDef maps one model_type onto blocks: how its config.json becomes an Arch and how its tensor names
// become Layer weights. Adding a family whose blocks exist means adding an entry here (and its generator in
// modelgen), not backend code.
type familyDef struct {
	name          Family
	architectures []string // config.json architectures[] entries, for configs without model_type
	// prepare rewrites the raw config before the common keys are read: a nested text_config, the config
	// class's defaults for absent keys. Optional.
	prepare func(r *rawConfig) error
	// spec sets c.Arch (and any family fields of c) once the common keys are parsed. Optional: the Llama
	// layer of denseArch.
	spec func(r *rawConfig, c *Config) error
	// prefix is the module path that holds embed_tokens, layers and norm ("model.").
	prefix string
	// prefixes, when set, replace prefix with candidates for checkpoints saved in several layouts (a multimodal
	// model's text part): the first whose embed_tokens.weight exists is the prefix.
	prefixes []string
	// ignore names tensors that the family leaves unbound on purpose (a multimodal model's vision tower), so
	// that they are not reported as unexpected. Optional.
	ignore func(name string) bool
	// layer binds one layer's weights, whose module path is p ("model.layers.3."). Optional: denseLayer.
	layer func(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error
	// begin runs before any tensor is bound, with the module prefix: it reads what the checkpoint's layout
	// decides for the whole model (b.foldNorms). Optional.
	begin func(b *binder, c *Config, pre string) error
	// headFor is the module path of the output layer for the module prefix pre, when the family's checkpoints
	// do not all keep it at "lm_head". Optional.
	headFor func(pre string) string
}

// familyDefs are the supported families, in the order Families lists them.
var familyDefs = []familyDef{
	{name: Llama, architectures: []string{"LlamaForCausalLM"}},
	{name: Mistral, architectures: []string{"MistralForCausalLM"}},
	{name: Qwen2, architectures: []string{"Qwen2ForCausalLM"}},
	{name: Qwen3, architectures: []string{"Qwen3ForCausalLM"}},
	{name: Qwen3MoE, architectures: []string{"Qwen3MoeForCausalLM"}, spec: qwenMoESpec, layer: qwenMoELayer},
	{name: Qwen2MoE, architectures: []string{"Qwen2MoeForCausalLM"}, spec: qwenMoESpec, layer: qwenMoELayer},
	{name: Mixtral, architectures: []string{"MixtralForCausalLM"}, spec: mixtralSpec, layer: mixtralLayer},
	{name: Gemma3Text, architectures: []string{"Gemma3ForCausalLM"}, prepare: gemma3Prepare, spec: gemma3Spec,
		layer: gemma3Layer},
	{name: Gemma3, architectures: []string{"Gemma3ForConditionalGeneration"}, prepare: gemma3Prepare, spec: gemma3Spec,
		prefixes: gemma3Prefixes, ignore: gemma3Ignore, layer: gemma3Layer},
	{name: GptOSS, architectures: []string{"GptOssForCausalLM"}, prepare: gptossPrepare, spec: gptossSpec,
		layer: gptossLayer},
	{name: Qwen3Next, architectures: []string{"Qwen3NextForCausalLM"}, prepare: hybridPrepare, spec: hybridSpec,
		begin: hybridBegin, ignore: hybridIgnore, layer: qwen3NextLayer},
	{name: Qwen35, architectures: []string{"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"}, prepare: hybridPrepare,
		spec: hybridSpec, prefixes: qwen35Prefixes, headFor: qwen35Head, begin: hybridBegin, ignore: hybridIgnore,
		layer: qwen35Layer},
	{name: Qwen35MoE, architectures: []string{"Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"},
		prepare: hybridPrepare, spec: hybridSpec, prefixes: qwen35Prefixes, headFor: qwen35Head, begin: hybridBegin,
		ignore: hybridIgnore, layer: qwen35Layer},
}

func lookupFamily(f Family) *familyDef {
	for i := range familyDefs {
		if familyDefs[i].name == f {
			return &familyDefs[i]
		}
	}
	return nil
}

func (d *familyDef) modulePrefix(tensors map[string]*safetensors.Tensor) string {
	for _, p := range d.prefixes {
		if _, ok := tensors[p+"embed_tokens.weight"]; ok {
			return p
		}
	}
	if d.prefix == "" {
		return "model."
	}
	return d.prefix
}

// headPath is the module path of the untied output layer of a checkpoint whose module prefix is pre.
func (d *familyDef) headPath(pre string) string {
	if d.headFor != nil {
		return d.headFor(pre)
	}
	return "lm_head"
}

func (d *familyDef) bindLayer(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error {
	if d.layer != nil {
		return d.layer(b, l, spec, p, hidden)
	}
	return b.denseLayer(l, spec, p, hidden)
}

// positive reads an optional size key: def when absent, an error when out of range.
func positive(name string, v *int, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	if *v <= 0 || *v > maxDim {
		return 0, fmt.Errorf("%s = %d is out of range", name, *v)
	}
	return *v, nil
}

// moeSpec is the routing part shared by the families whose routers softmax over all experts, then take the
// top k (Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock).
func moeSpec(experts, topK, inter string, e, k, i *int) (*MoESpec, error) {
	if e == nil || k == nil || i == nil {
		return nil, fmt.Errorf("a mixture of experts needs %s, %s and %s", experts, topK, inter)
	}
	m := &MoESpec{Order: SoftmaxThenTopK}
	var err error
	if m.Experts, err = positive(experts, e, 0); err != nil {
		return nil, err
	}
	if m.TopK, err = positive(topK, k, 0); err != nil {
		return nil, err
	}
	if m.Intermediate, err = positive(inter, i, 0); err != nil {
		return nil, err
	}
	if m.TopK > m.Experts {
		return nil, fmt.Errorf("%s = %d is more than %s = %d", topK, m.TopK, experts, m.Experts)
	}
	return m, nil
}

// qwenMoESpec maps qwen2_moe and qwen3_moe (Qwen2MoeConfig, Qwen3MoeConfig): layer i is sparse iff it is not
// in mlp_only_layers and (i+1) % decoder_sparse_step == 0, and dense layers keep intermediate_size. Both config
// classes default norm_topk_prob to false; the published Qwen3 MoE configs set it. qwen2_moe adds a shared
// expert of shared_expert_intermediate_size behind a sigmoid gate.
func qwenMoESpec(r *rawConfig, c *Config) error {
	c.Arch = denseArch(c)
	if r.NumExperts == nil || *r.NumExperts == 0 {
		return nil // num_experts 0: every layer dense
	}
	m, err := moeSpec("num_experts", "num_experts_per_tok", "moe_intermediate_size", r.NumExperts, r.NumExpertsPerTok, r.MoEIntermediateSize)
	if err != nil {
		return err
	}
	m.NormTopK = r.NormTopKProb != nil && *r.NormTopKProb
	if c.Family == Qwen2MoE {
		if m.SharedIntermediate, err = positive("shared_expert_intermediate_size", r.SharedExpertIntermediateSize, 0); err != nil {
			return err
		}
		m.SharedGate = m.SharedIntermediate > 0
	}
	step, err := positive("decoder_sparse_step", r.DecoderSparseStep, 1)
	if err != nil {
		return err
	}
	dense := map[int]bool{}
	for _, i := range r.MLPOnlyLayers {
		if i < 0 || i >= c.NumLayers {
			return fmt.Errorf("mlp_only_layers names layer %d of %d", i, c.NumLayers)
		}
		dense[i] = true
	}
	for i := range c.Arch.Layers {
		if !dense[i] && (i+1)%step == 0 {
			c.Arch.Layers[i].FFN = FFNSpec{Kind: FFNMoE, Act: ActSiLU, MoE: m}
		}
	}
	return nil
}

// mixtralSpec maps mixtral (MixtralConfig): every layer sparse, experts of intermediate_size, and the top-k
// probabilities always renormalised (MixtralSparseMoeBlock divides by their sum).
func mixtralSpec(r *rawConfig, c *Config) error {
	c.Arch = denseArch(c)
	m, err := moeSpec("num_local_experts", "num_experts_per_tok", "intermediate_size", r.NumLocalExperts, r.NumExpertsPerTok, r.IntermediateSize)
	if err != nil {
		return err
	}
	m.NormTopK = true
	for i := range c.Arch.Layers {
		c.Arch.Layers[i].FFN = FFNSpec{Kind: FFNMoE, Act: ActSiLU, MoE: m}
	}
	return nil
}

// qwenMoELayer binds a qwen2_moe / qwen3_moe layer: attention and norms as qwen2/qwen3, and a sparse layer's
// mlp.gate (router), mlp.experts.{e}.{gate,up,down}_proj (Hugging Face) or mlp.switch_mlp.{gate,up,down}_proj
// (mlx-lm's sanitize stacks them), and qwen2_moe's mlp.shared_expert.* and mlp.shared_expert_gate.
func qwenMoELayer(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error {
	if spec.FFN.Kind != FFNMoE {
		return b.denseLayer(l, spec, p, hidden)
	}
	if err := b.attentionLayer(l, spec, p, hidden); err != nil {
		return err
	}
	m := spec.FFN.MoE
	e := &MoE{}
	var err error
	if e.Router, err = b.linear(p+"mlp.gate", m.Experts, hidden, m.RouterBias); err != nil {
		return err
	}
	names := [3]string{"gate_proj", "up_proj", "down_proj"}
	if e.Gate, e.Up, e.Down, err = b.expertSet(p+"mlp.", "experts", names, names, m, hidden); err != nil {
		return err
	}
	if m.SharedIntermediate > 0 {
		e.Shared = &MLP{}
		si := m.SharedIntermediate
		if e.Shared.Gate, err = b.linear(p+"mlp.shared_expert.gate_proj", si, hidden, false); err != nil {
			return err
		}
		if e.Shared.Up, err = b.linear(p+"mlp.shared_expert.up_proj", si, hidden, false); err != nil {
			return err
		}
		if e.Shared.Down, err = b.linear(p+"mlp.shared_expert.down_proj", hidden, si, false); err != nil {
			return err
		}
		if m.SharedGate {
			if e.SharedGate, err = b.linear(p+"mlp.shared_expert_gate", 1, hidden, false); err != nil {
				return err
			}
		}
	}
	l.MoE = e
	return nil
}

// mixtralLayer binds a mixtral layer: block_sparse_moe.gate (router) and block_sparse_moe.experts.{e}.w1
// (gate), w3 (up), w2 (down), or mlx-lm's block_sparse_moe.switch_mlp.{gate,up,down}_proj.
func mixtralLayer(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error {
	if err := b.attentionLayer(l, spec, p, hidden); err != nil {
		return err
	}
	m := spec.FFN.MoE
	e := &MoE{}
	var err error
	if e.Router, err = b.linear(p+"block_sparse_moe.gate", m.Experts, hidden, m.RouterBias); err != nil {
		return err
	}
	if e.Gate, e.Up, e.Down, err = b.expertSet(p+"block_sparse_moe.", "experts", [3]string{"w1", "w3", "w2"},
		[3]string{"gate_proj", "up_proj", "down_proj"}, m, hidden); err != nil {
		return err
	}
	l.MoE = e
	return nil
}

// expertSet binds the gate, up and down matrices of m's experts under module path p: stacked as mlx-lm's
// sanitize writes them (p+"switch_mlp."+stacked[i]) when the file has them, else one module per expert
// (p+each+".{e}."+names[i]).
func (b *binder) expertSet(p, each string, names, stacked [3]string, m *MoESpec, hidden int) (gate, up, down *Experts, err error) {
	shapes := [3][2]int{{m.Intermediate, hidden}, {m.Intermediate, hidden}, {hidden, m.Intermediate}}
	var out [3]*Experts
	for i := range out {
		sp := p + "switch_mlp." + stacked[i]
		if _, ok := b.tensors[sp+".weight"]; ok {
			out[i], err = b.stackedExperts(sp, m.Experts, shapes[i][0], shapes[i][1])
		} else {
			out[i], err = b.eachExpert(p+each+".", "."+names[i], m.Experts, shapes[i][0], shapes[i][1])
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
	return out[0], out[1], out[2], nil
}

// eachExpert binds E matrices stored one module per expert: prefix+e+suffix.
func (b *binder) eachExpert(prefix, suffix string, e, out, in int) (*Experts, error) {
	x := &Experts{Name: prefix + "*" + suffix, E: e, Out: out, In: in, Each: make([]Linear, e)}
	for i := range x.Each {
		l, err := b.linear(prefix+strconv.Itoa(i)+suffix, out, in, false)
		if err != nil {
			return nil, err
		}
		x.Each[i] = *l
	}
	return x, nil
}

// stackedExperts binds one [E, out, in] module (with [E, out, groups] scales and biases when quantized) and
// views each expert's rows in it without copying: expert e is rows [e·out, (e+1)·out) of the stacked bytes.
func (b *binder) stackedExperts(path string, e, out, in int) (*Experts, error) {
	w, ok := b.tensors[path+".weight"]
	if !ok {
		return nil, fmt.Errorf("missing tensor %q", path+".weight")
	}
	if len(w.Shape) != 3 || w.Shape[0] != e {
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d ...] (stacked experts)", w.Name, w.Shape, e, out)
	}
	// Check and bind the stack as one linear of e·out rows: a row's bytes and groups do not depend on which
	// expert it belongs to.
	flat := func(t *safetensors.Tensor) *safetensors.Tensor {
		if t == nil || len(t.Shape) != 3 || t.Shape[0] != e {
			return t
		}
		c := *t
		c.Shape = []int{t.Shape[0] * t.Shape[1], t.Shape[2]}
		return &c
	}
	saved := map[string]*safetensors.Tensor{}
	for _, s := range []string{".weight", ".scales", ".biases"} {
		if t, ok := b.tensors[path+s]; ok {
			saved[path+s] = t
			b.tensors[path+s] = flat(t)
		}
	}
	st, err := b.linear(path, e*out, in, false)
	for n, t := range saved {
		b.tensors[n] = t
	}
	if err != nil {
		return nil, fmt.Errorf("stacked experts: %w", err)
	}
	x := &Experts{Name: path, E: e, Out: out, In: in, Stacked: st, Each: make([]Linear, e)}
	view := func(t *safetensors.Tensor, i int) *safetensors.Tensor {
		n := len(t.Data) / e
		return &safetensors.Tensor{Name: fmt.Sprintf("%s[%d]", t.Name, i), DType: t.DType,
			Shape: []int{out, t.Shape[1]}, Data: t.Data[i*n : (i+1)*n : (i+1)*n]}
	}
	for i := range x.Each {
		l := Linear{Name: fmt.Sprintf("%s[%d]", path, i), Out: out, In: in, Weight: view(st.Weight, i)}
		if q := st.Quant; q != nil {
			l.Quant = &Quant{QuantParams: q.QuantParams, Scales: view(q.Scales, i)}
			if q.Biases != nil { // mxfp4 has none
				l.Quant.Biases = view(q.Biases, i)
			}
		}
		x.Each[i] = l
	}
	return x, nil
}

package modelgen

import (
	"fmt"
	"math"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// The families built from more than Llama's blocks: gemma3_text / gemma3 and gpt_oss, in the exact names of
// their Hugging Face and mlx-community checkpoints (docs/models-design.md §2.2, §2.3).

// gemma3Prefix is the text model's module path: gemma3_text's model., a multimodal gemma3's
// model.language_model. as transformers saves it, language_model.model. as mlx-vlm does.
func (g *generator) gemma3Prefix() string {
	switch {
	case g.o.Family == model.Gemma3Text:
		return "model."
	case g.o.Layout == LayoutMLX:
		return "language_model.model."
	}
	return "model.language_model."
}

func (g *generator) gemma3Weights() []matrix {
	o := &g.o
	h, qDim, kvDim := o.HiddenSize, o.NumHeads*o.HeadDim, o.NumKVHeads*o.HeadDim
	resid := float32(o.ResidualScale)
	var ms []matrix
	pre := g.gemma3Prefix()
	// Values are seeded by the gemma3_text name, so every layout of a seed holds the same model.
	seed := func(name string) string { return "model." + strings.TrimPrefix(name, pre) }
	// Gemma's norms multiply by 1+w: weights around 0 are multipliers around 1.
	lin, vec := g.fillers(&ms, seed)
	ms = append(ms, matrix{module: pre + "embed_tokens", out: o.VocabSize, in: h, linear: true, suffix: ".weight", values: g.embedding})
	for i := 0; i < o.NumLayers; i++ {
		p := fmt.Sprintf("%slayers.%d.", pre, i)
		vec(p+"input_layernorm.weight", h, 0, 0.1)
		vec(p+"post_attention_layernorm.weight", h, 0, 0.1)
		vec(p+"pre_feedforward_layernorm.weight", h, 0, 0.1)
		vec(p+"post_feedforward_layernorm.weight", h, 0, 0.1)
		lin(p+"self_attn.q_proj", qDim, h, invSqrt(h))
		lin(p+"self_attn.k_proj", kvDim, h, invSqrt(h))
		lin(p+"self_attn.v_proj", kvDim, h, invSqrt(h))
		lin(p+"self_attn.o_proj", h, qDim, resid*invSqrt(qDim))
		vec(p+"self_attn.q_norm.weight", o.HeadDim, 0, 0.1)
		vec(p+"self_attn.k_norm.weight", o.HeadDim, 0, 0.1)
		lin(p+"mlp.gate_proj", o.IntermediateSize, h, invSqrt(h))
		lin(p+"mlp.up_proj", o.IntermediateSize, h, invSqrt(h))
		lin(p+"mlp.down_proj", h, o.IntermediateSize, resid*invSqrt(o.IntermediateSize))
	}
	// The head is the embedding: a final norm of zero-mean multipliers (1+w around 0) keeps the model from
	// predicting its current token again (see weights).
	vec(pre+"norm.weight", h, -1, 1)
	if o.Family == model.Gemma3 {
		// A stand-in for the vision tower and projector, which the loader must leave alone (quantized too).
		v := ""
		if o.Layout == LayoutHF {
			v = "model."
		}
		lin(v+"vision_tower.vision_model.encoder.layers.0.self_attn.q_proj", 32, h, invSqrt(h))
		vec(v+"vision_tower.vision_model.post_layernorm.weight", 32, 1, 0.1)
		vec(v+"multi_modal_projector.mm_soft_emb_norm.weight", 32, 0, 0.1)
	}
	return ms
}

func (g *generator) gptossWeights() []matrix {
	o := &g.o
	h, qDim, kvDim := o.HiddenSize, o.NumHeads*o.HeadDim, o.NumKVHeads*o.HeadDim
	E := o.NumExperts
	resid := float32(o.ResidualScale)
	var ms []matrix
	lin, vec := g.fillers(&ms, nil)
	ms = append(ms, matrix{module: "model.embed_tokens", out: o.VocabSize, in: h, linear: true, suffix: ".weight", values: g.embedding})
	for i := 0; i < o.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		vec(p+"input_layernorm.weight", h, 1, 0.1)
		vec(p+"post_attention_layernorm.weight", h, 1, 0.1)
		for _, a := range []struct {
			n       string
			out, in int
			std     float32
		}{{"q_proj", qDim, h, invSqrt(h)}, {"k_proj", kvDim, h, invSqrt(h)}, {"v_proj", kvDim, h, invSqrt(h)}, {"o_proj", h, qDim, resid * invSqrt(qDim)}} {
			lin(p+"self_attn."+a.n, a.out, a.in, a.std)
			vec(p+"self_attn."+a.n+".bias", a.out, 0, 0.1)
		}
		vec(p+"self_attn.sinks", o.NumHeads, 0, float32(o.SinkStd))
		router := p + "mlp.router"
		ms = append(ms, matrix{module: router, out: E, in: h, linear: true, suffix: ".weight", values: g.tied(g.normal(router+".weight", invSqrt(h), 0), h)})
		ms = append(ms, matrix{module: router + ".bias", out: E, values: g.tied(g.normal(router+".bias", 0.5, 0), 1)})
		ms = append(ms, g.gptossExperts(p+"mlp.experts.")...)
	}
	vec("model.norm.weight", h, 1, 0.1)
	ms = append(ms, matrix{module: "lm_head", out: o.VocabSize, in: h, linear: true, suffix: ".weight", values: g.outputLayer})
	return ms
}

// tied makes row 1 of a filler's [rows, width] values equal to row 0 when RouterTies is set.
func (g *generator) tied(fill func([]float32), width int) func([]float32) {
	if !g.o.RouterTies {
		return fill
	}
	return func(dst []float32) {
		fill(dst)
		copy(dst[width:2*width], dst[:width])
	}
}

// expertValues are one layer's experts, whatever the layout: gate and up [E, I, H], down [E, H, I], and
// their biases. The gate and up projections of a unit-RMS input have standard deviation ExpertScale, so that
// the clamp at SwiGLULimit acts on a good share of them.
type expertValues struct {
	gate, up, down, gateBias, upBias, downBias func([]float32)
}

func (g *generator) expertValues(p string) expertValues {
	o := &g.o
	h, I := float64(o.HiddenSize), float64(o.IntermediateSize)
	gu := float32(o.ExpertScale / math.Sqrt(h))
	down := float32(o.ResidualScale / (o.ExpertScale * o.SwiGLULimit * math.Sqrt(I)))
	return expertValues{
		gate: g.normal(p+"gate_proj.weight", gu, 0), up: g.normal(p+"up_proj.weight", gu, 0),
		down:     g.normal(p+"down_proj.weight", down, 0),
		gateBias: g.normal(p+"gate_proj.bias", 0.5, 0), upBias: g.normal(p+"up_proj.bias", 0.5, 0),
		downBias: g.normal(p+"down_proj.bias", 0.1, 0),
	}
}

// gptossExperts lists one layer's expert tensors in the layout asked for.
func (g *generator) gptossExperts(p string) []matrix {
	o := &g.o
	E, I, h := o.NumExperts, o.IntermediateSize, o.HiddenSize
	v := g.expertValues(p)
	if o.Layout == LayoutMLX {
		// mlx-lm's sanitize: gate_up split into gate_proj (even rows) and up_proj (odd rows), "_bias" → ".bias".
		return []matrix{
			{module: p + "gate_proj", experts: E, out: I, in: h, linear: true, suffix: ".weight", values: v.gate},
			{module: p + "gate_proj.bias", out: E, in: I, values: v.gateBias},
			{module: p + "up_proj", experts: E, out: I, in: h, linear: true, suffix: ".weight", values: v.up},
			{module: p + "up_proj.bias", out: E, in: I, values: v.upBias},
			{module: p + "down_proj", experts: E, out: h, in: I, linear: true, suffix: ".weight", values: v.down},
			{module: p + "down_proj.bias", out: E, in: h, values: v.downBias},
		}
	}
	fill := func(f func([]float32), n int) []float32 {
		x := make([]float32, n)
		f(x)
		return x
	}
	// gateUp interleaves gate and up rows (row 2j is gate row j, 2j+1 up row j): [E, 2I, H].
	gateUp := func() []float32 {
		gate, up := fill(v.gate, E*I*h), fill(v.up, E*I*h)
		out := make([]float32, 2*E*I*h)
		for e := range E {
			for j := range I {
				copy(out[((e*2*I)+2*j)*h:][:h], gate[(e*I+j)*h:][:h])
				copy(out[((e*2*I)+2*j+1)*h:][:h], up[(e*I+j)*h:][:h])
			}
		}
		return out
	}
	gateUpBias := func(dst []float32) {
		gb, ub := fill(v.gateBias, E*I), fill(v.upBias, E*I)
		for k := range gb {
			dst[2*k], dst[2*k+1] = gb[k], ub[k]
		}
	}
	st := g.floatType()
	floats := func(name string, shape []int, f func() []float32) matrix {
		return matrix{module: name, emit: func(add addFunc) error {
			return add(name, st, shape, func(dst []byte) error { return dtype.Encode(o.DType, dst, f()) })
		}}
	}
	ms := []matrix{floats(p+"gate_up_proj_bias", []int{E, 2 * I}, func() []float32 { return fill(gateUpBias, 2*E*I) })}
	if o.ExpertsMXFP4 {
		// openai's checkpoint: the packed bytes as [E, out, in/32, 16] blocks, e8m0 scales [E, out, in/32].
		blocks := func(name string, out, in int, f func() []float32) matrix {
			var packed, scales []byte
			get := func() {
				if packed == nil {
					packed, scales = model.QuantizeMXFP4(f())
				}
			}
			return matrix{module: name, emit: func(add addFunc) error {
				if err := add(name+"_blocks", safetensors.U8, []int{E, out, in / 32, 16}, func(dst []byte) error {
					get()
					copy(dst, packed)
					return nil
				}); err != nil {
					return err
				}
				return add(name+"_scales", safetensors.U8, []int{E, out, in / 32}, func(dst []byte) error {
					get()
					copy(dst, scales)
					return nil
				})
			}}
		}
		return append(ms,
			blocks(p+"gate_up_proj", 2*I, h, gateUp),
			blocks(p+"down_proj", h, I, func() []float32 { return fill(v.down, E*h*I) }),
			floats(p+"down_proj_bias", []int{E, h}, func() []float32 { return fill(v.downBias, E*h) }))
	}
	// transformers' float save: input-major [E, in, out], the fused columns interleaved.
	transpose := func(x []float32, out, in int) []float32 {
		t := make([]float32, len(x))
		for e := range E {
			for r := range out {
				for c := range in {
					t[(e*in+c)*out+r] = x[(e*out+r)*in+c]
				}
			}
		}
		return t
	}
	return append(ms,
		floats(p+"gate_up_proj", []int{E, h, 2 * I}, func() []float32 { return transpose(gateUp(), 2*I, h) }),
		floats(p+"down_proj", []int{E, I, h}, func() []float32 { return transpose(fill(v.down, E*h*I), h, I) }),
		floats(p+"down_proj_bias", []int{E, h}, func() []float32 { return fill(v.downBias, E*h) }))
}

// familyOverrides adds the family's own quantization entries: mlx-lm's gpt-oss quant_predicate keeps the
// router at 8 bits in groups of 64, and mxfp4 experts get an entry each (the other modules keep the default).
func (g *generator) familyOverrides() {
	o := &g.o
	if hybrid(o.Family) {
		g.hybridOverrides()
		return
	}
	if o.Family != model.GptOSS || o.Layout != LayoutMLX {
		return
	}
	for i := 0; i < o.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.mlp.", i)
		if _, set := g.overrides[p+"router"]; !set && o.Quantization != nil && o.HiddenSize%64 == 0 {
			g.overrides[p+"router"] = &model.QuantParams{GroupSize: 64, Bits: 8, Mode: model.ModeAffine}
		}
		if o.ExpertsMXFP4 {
			for _, n := range []string{"gate_proj", "up_proj", "down_proj"} {
				g.overrides[p+"experts."+n] = &model.QuantParams{GroupSize: 32, Bits: 4, Mode: model.ModeMXFP4}
			}
		}
	}
}

// layerTypes is LayerTypes, or gpt-oss's alternation when none are given (gemma3 writes its pattern).
func (g *generator) layerTypes() []string {
	if g.o.LayerTypes != nil || g.o.Family != model.GptOSS {
		return g.o.LayerTypes
	}
	lt := make([]string, g.o.NumLayers)
	for i := range lt {
		lt[i] = "full_attention"
		if i%2 == 0 {
			lt[i] = "sliding_attention"
		}
	}
	return lt
}

func (g *generator) gemma3ConfigJSON() ([]byte, error) {
	o := &g.o
	var bos any
	if g.tok.bosID != nil {
		bos = *g.tok.bosID
	}
	text := obj{
		{"architectures", []string{"Gemma3ForCausalLM"}},
		{"attention_bias", false},
		{"attention_dropout", 0.0},
		{"attn_logit_softcapping", nil},
		{"bos_token_id", bos},
		{"eos_token_id", g.tok.eosIDs},
		{"final_logit_softcapping", nil},
		{"head_dim", o.HeadDim},
		{"hidden_activation", "gelu_pytorch_tanh"},
		{"hidden_size", o.HiddenSize},
		{"initializer_range", 0.02},
		{"intermediate_size", o.IntermediateSize},
	}
	if lt := g.layerTypes(); lt != nil {
		text = append(text, kv{"layer_types", lt})
	}
	text = append(text,
		kv{"max_position_embeddings", o.MaxPositionEmbeddings},
		kv{"model_type", string(model.Gemma3Text)},
		kv{"num_attention_heads", o.NumHeads},
		kv{"num_hidden_layers", o.NumLayers},
		kv{"num_key_value_heads", o.NumKVHeads},
		kv{"query_pre_attn_scalar", o.QueryPreAttnScalar},
		kv{"rms_norm_eps", 1e-6},
		kv{"rope_local_base_freq", o.RopeLocalBase},
	)
	if rs := o.RopeScaling; rs != nil {
		text = append(text, kv{"rope_scaling", obj{{"factor", rs.Factor}, {"rope_type", "linear"}}})
	} else {
		text = append(text, kv{"rope_scaling", nil})
	}
	text = append(text, kv{"rope_theta", o.RopeTheta}, kv{"sliding_window", o.SlidingWindow})
	if o.LayerTypes == nil {
		text = append(text, kv{"sliding_window_pattern", o.SlidingPattern})
	}
	quant := g.quantizationJSON()
	if o.Family == model.Gemma3Text {
		text = append(text, kv{"torch_dtype", string(o.DType)}, kv{"use_cache", true}, kv{"vocab_size", o.VocabSize})
		if quant != nil {
			text = append(text, kv{"quantization", quant}, kv{"quantization_config", quant})
		}
		return indentJSON(text)
	}
	// A multimodal config: the text model's keys under text_config, ids and quantization at the top.
	text = append(text[1:], kv{"vocab_size", o.VocabSize})
	c := obj{
		{"architectures", []string{"Gemma3ForConditionalGeneration"}},
		{"boi_token_index", 255999},
		{"eoi_token_index", 256000},
		{"eos_token_id", g.tok.eosIDs},
		{"image_token_index", 262144},
		{"mm_tokens_per_image", 256},
		{"model_type", string(model.Gemma3)},
	}
	if quant != nil {
		c = append(c, kv{"quantization", quant}, kv{"quantization_config", quant})
	}
	c = append(c,
		kv{"text_config", text},
		kv{"torch_dtype", string(o.DType)},
		kv{"vision_config", obj{{"hidden_size", 32}, {"model_type", "siglip_vision_model"}, {"num_hidden_layers", 1}}},
	)
	return indentJSON(c)
}

func (g *generator) gptossConfigJSON() ([]byte, error) {
	o := &g.o
	eos := any(g.tok.eosIDs)
	if len(g.tok.eosIDs) == 1 {
		eos = g.tok.eosIDs[0]
	}
	c := obj{
		{"architectures", []string{"GptOssForCausalLM"}},
		{"attention_bias", true},
		{"attention_dropout", 0.0},
		{"eos_token_id", eos},
		{"experts_per_token", o.TopK},
		{"head_dim", o.HeadDim},
		{"hidden_act", "silu"},
		{"hidden_size", o.HiddenSize},
		{"initial_context_length", g.initialContext()},
		{"initializer_range", 0.02},
		{"intermediate_size", o.IntermediateSize},
		{"layer_types", g.layerTypes()},
		{"max_position_embeddings", o.MaxPositionEmbeddings},
		{"model_type", string(model.GptOSS)},
		{"num_attention_heads", o.NumHeads},
		{"num_experts_per_tok", o.TopK},
		{"num_hidden_layers", o.NumLayers},
		{"num_key_value_heads", o.NumKVHeads},
		{"num_local_experts", o.NumExperts},
		{"output_router_logits", false},
	}
	if quant := g.quantizationJSON(); quant != nil {
		c = append(c, kv{"quantization", quant}, kv{"quantization_config", quant})
	} else if o.ExpertsMXFP4 {
		c = append(c, kv{"quantization_config", obj{
			{"modules_to_not_convert", []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
			{"quant_method", "mxfp4"}}})
	}
	c = append(c, kv{"rms_norm_eps", 1e-5})
	if y := o.Yarn; y != nil {
		c = append(c, kv{"rope_scaling", obj{{"beta_fast", y.BetaFast}, {"beta_slow", y.BetaSlow}, {"factor", y.Factor},
			{"original_max_position_embeddings", y.OrigMaxPos}, {"rope_type", "yarn"}, {"truncate", y.Truncate}}})
	} else {
		c = append(c, kv{"rope_scaling", nil})
	}
	c = append(c,
		kv{"rope_theta", o.RopeTheta},
		kv{"router_aux_loss_coef", 0.9},
		kv{"sliding_window", o.SlidingWindow},
		kv{"swiglu_limit", o.SwiGLULimit},
		kv{"tie_word_embeddings", false},
		kv{"torch_dtype", string(o.DType)},
		kv{"use_cache", true},
		kv{"vocab_size", o.VocabSize},
	)
	return indentJSON(c)
}

// initialContext is gpt-oss's initial_context_length: the context yarn stretches.
func (g *generator) initialContext() int {
	if y := g.o.Yarn; y != nil {
		return y.OrigMaxPos
	}
	return g.o.MaxPositionEmbeddings
}

package modelgen

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

type generator struct {
	o   Options
	tok *tokenizer
	// overrides are the per-module quantization entries: Quantization.Overrides and the family's own (mlx-lm's
	// 8-bit router of gpt-oss, mxfp4 experts).
	overrides map[string]*model.QuantParams
}

// Generate writes a model described by o into dir (created if needed), in the Hugging Face / mlx-community
// layout: config.json, generation_config.json, tokenizer.json, tokenizer_config.json and model.safetensors (or
// model-0000i-of-0000n.safetensors with model.safetensors.index.json). The same options always produce the same
// bytes.
func Generate(dir string, o Options) error {
	if err := o.normalize(); err != nil {
		return err
	}
	tok, err := buildTokenizer(o.Tokenizer, tokenizerFamily(o.Family), trainingText(o.Seed), o.VocabSize)
	if err != nil {
		return err
	}
	if o.TieWordEmbeddings && !o.KeepVocabSize || o.VocabSize < tok.size() {
		// Tied models cannot push padding rows' logits down (the rows are the embeddings), so they get none.
		o.VocabSize = tok.size()
	}
	g := &generator{o: o, tok: tok}
	g.setOverrides()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("modelgen: %w", err)
	}
	// Weights of an earlier generation with a different sharding would be picked up by loaders.
	stale, _ := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	for _, p := range append(stale, filepath.Join(dir, "model.safetensors.index.json")) {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("modelgen: %w", err)
		}
	}
	files := map[string]func() ([]byte, error){
		"config.json":            g.configJSON,
		"generation_config.json": g.generationConfigJSON,
		"tokenizer.json":         tok.tokenizerJSON,
		"tokenizer_config.json":  func() ([]byte, error) { return tok.tokenizerConfigJSON(o.MaxPositionEmbeddings) },
	}
	for name, render := range files {
		b, err := render()
		if err != nil {
			return fmt.Errorf("modelgen: %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("modelgen: %w", err)
		}
	}
	return g.writeWeights(dir)
}

func (g *generator) writeWeights(dir string) error {
	type pending struct {
		name  string
		dt    safetensors.DType
		shape []int
		fill  func([]byte) error
		size  int64
	}
	var all []pending
	var total int64
	for _, m := range g.weights() {
		err := g.tensorsFor(m, func(name string, dt safetensors.DType, shape []int, fill func([]byte) error) error {
			size := int64(dt.Size())
			for _, d := range shape {
				size *= int64(d)
			}
			all = append(all, pending{name, dt, shape, fill, size})
			total += size
			return nil
		})
		if err != nil {
			return err
		}
	}
	shards := g.o.Shards
	meta := map[string]string{"format": "mlx"}
	if shards == 1 {
		w := safetensors.NewWriter(meta)
		for _, p := range all {
			if err := w.AddFunc(p.name, p.dt, p.shape, p.fill); err != nil {
				return err
			}
		}
		return w.WriteFile(filepath.Join(dir, "model.safetensors"))
	}
	// Fill shards in model order, moving on once a shard holds its share of the bytes.
	weightMap := obj{}
	writers := make([]*safetensors.Writer, shards)
	for i := range writers {
		writers[i] = safetensors.NewWriter(meta)
	}
	var done int64
	shard := 0
	for _, p := range all {
		for shard < shards-1 && done >= total*int64(shard+1)/int64(shards) {
			shard++
		}
		if err := writers[shard].AddFunc(p.name, p.dt, p.shape, p.fill); err != nil {
			return err
		}
		done += p.size
	}
	names := make([]string, shards)
	for i, w := range writers {
		names[i] = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, shards)
		for _, n := range w.Names() {
			weightMap = append(weightMap, kv{n, names[i]})
		}
	}
	for i, w := range writers {
		if err := w.WriteFile(filepath.Join(dir, names[i])); err != nil {
			return err
		}
	}
	index, err := indentJSON(obj{{"metadata", obj{{"total_size", total}}}, {"weight_map", weightMap}})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644)
}

var architectures = map[model.Family]string{
	model.Llama:    "LlamaForCausalLM",
	model.Mistral:  "MistralForCausalLM",
	model.Qwen2:    "Qwen2ForCausalLM",
	model.Qwen3:    "Qwen3ForCausalLM",
	model.Qwen3MoE: "Qwen3MoeForCausalLM",
	model.Qwen2MoE: "Qwen2MoeForCausalLM",
	model.Mixtral:  "MixtralForCausalLM",
	// gemma3 and gpt_oss: see families.go.
}

func (g *generator) configJSON() ([]byte, error) {
	switch g.o.Family {
	case model.Gemma3, model.Gemma3Text:
		return g.gemma3ConfigJSON()
	case model.GptOSS:
		return g.gptossConfigJSON()
	case model.Qwen3Next, model.Qwen35, model.Qwen35MoE:
		return g.hybridConfigJSON()
	}
	o := &g.o
	base := baseFamily(o.Family)
	eos := any(g.tok.eosIDs)
	if len(g.tok.eosIDs) == 1 {
		eos = g.tok.eosIDs[0]
	}
	var bos any
	if g.tok.bosID != nil {
		bos = *g.tok.bosID
	}
	c := obj{
		{"architectures", []string{architectures[o.Family]}},
		{"attention_bias", base == model.Qwen2},
		{"attention_dropout", 0.0},
		{"bos_token_id", bos},
		{"eos_token_id", eos},
	}
	if base == model.Qwen3 || o.HeadDim != o.HiddenSize/o.NumHeads || o.HiddenSize%o.NumHeads != 0 {
		c = append(c, kv{"head_dim", o.HeadDim})
	}
	c = append(c,
		kv{"hidden_act", "silu"},
		kv{"hidden_size", o.HiddenSize},
		kv{"initializer_range", 0.02},
	)
	inter := o.IntermediateSize
	if o.Family == model.Mixtral {
		inter = o.MoEIntermediate // mixtral's experts are its intermediate_size
	}
	c = append(c, kv{"intermediate_size", inter}, kv{"max_position_embeddings", o.MaxPositionEmbeddings})
	switch o.Family {
	case model.Qwen3MoE, model.Qwen2MoE:
		mlpOnly := append([]int{}, o.MLPOnlyLayers...)
		c = append(c, kv{"decoder_sparse_step", o.SparseStep}, kv{"mlp_only_layers", mlpOnly},
			kv{"moe_intermediate_size", o.MoEIntermediate})
	}
	c = append(c, kv{"model_type", string(o.Family)})
	if o.Family == model.Qwen3MoE || o.Family == model.Qwen2MoE {
		c = append(c, kv{"norm_topk_prob", o.NormTopK}, kv{"num_experts", o.NumExperts})
	}
	c = append(c, kv{"num_attention_heads", o.NumHeads})
	if o.moe() {
		c = append(c, kv{"num_experts_per_tok", o.TopK})
	}
	c = append(c, kv{"num_hidden_layers", o.NumLayers}, kv{"num_key_value_heads", o.NumKVHeads})
	if o.Family == model.Mixtral {
		c = append(c, kv{"num_local_experts", o.NumExperts})
	}
	if o.moe() {
		c = append(c, kv{"output_router_logits", false})
	}
	if qc := g.quantizationJSON(); qc != nil {
		c = append(c, kv{"quantization", qc}, kv{"quantization_config", qc})
	}
	c = append(c, kv{"rms_norm_eps", 1e-5})
	if rs := o.RopeScaling; rs != nil {
		c = append(c, kv{"rope_scaling", obj{{"factor", rs.Factor}, {"high_freq_factor", rs.HighFreqFactor},
			{"low_freq_factor", rs.LowFreqFactor}, {"original_max_position_embeddings", rs.OriginalMaxPositionEmbeddings},
			{"rope_type", rs.Type}}})
	} else {
		c = append(c, kv{"rope_scaling", nil})
	}
	c = append(c, kv{"rope_theta", o.RopeTheta})
	if o.moe() {
		c = append(c, kv{"router_aux_loss_coef", 0.001})
	}
	if o.Family == model.Qwen2MoE {
		c = append(c, kv{"shared_expert_intermediate_size", o.SharedIntermediate})
	}
	switch base {
	case model.Mistral:
		c = append(c, kv{"sliding_window", nil})
	case model.Qwen2, model.Qwen3:
		c = append(c, kv{"sliding_window", o.MaxPositionEmbeddings}, kv{"use_sliding_window", false})
	}
	c = append(c,
		kv{"tie_word_embeddings", o.TieWordEmbeddings},
		kv{"torch_dtype", string(o.DType)},
		kv{"use_cache", true},
		kv{"vocab_size", o.VocabSize},
	)
	return indentJSON(c)
}

func (g *generator) generationConfigJSON() ([]byte, error) {
	c := obj{}
	if g.tok.bosID != nil {
		c = append(c, kv{"bos_token_id", *g.tok.bosID})
	}
	c = append(c, kv{"eos_token_id", g.tok.eosIDs})
	return indentJSON(c)
}

// setOverrides collects the per-module quantization entries (Quantization.Overrides, with affine as the mode
// of entries that name none, and the family's own).
func (g *generator) setOverrides() {
	g.overrides = map[string]*model.QuantParams{}
	if q := g.o.Quantization; q != nil {
		for k, p := range q.Overrides {
			if p != nil {
				c := *p
				if c.Mode == "" {
					c.Mode = model.ModeAffine
				}
				p = &c
			}
			g.overrides[k] = p
		}
	}
	g.familyOverrides()
}

// quantizationJSON is config.json's quantization entry as mlx-lm writes it, or nil: the defaults, then an
// entry per module with its own parameters, in model order.
func (g *generator) quantizationJSON() obj {
	q := g.o.Quantization
	var qc obj
	switch {
	case q != nil:
		qc = obj{{"group_size", q.GroupSize}, {"bits", q.Bits}}
		if q.Mode != "" && q.Mode != model.ModeAffine {
			qc = append(qc, kv{"mode", q.Mode})
		}
	case len(g.overrides) > 0:
		// Only some modules are quantized (mxfp4 experts): what mlx-lm writes for openai's quant_method mxfp4.
		qc = obj{{"group_size", 32}, {"bits", 4}, {"mode", model.ModeMXFP4}}
	default:
		return nil
	}
	for _, m := range g.weights() {
		if p, ok := g.overrides[m.module]; ok && m.linear {
			switch {
			case p == nil:
				qc = append(qc, kv{m.module, false})
			case p.Mode == model.ModeAffine:
				qc = append(qc, kv{m.module, obj{{"group_size", p.GroupSize}, {"bits", p.Bits}}})
			default:
				qc = append(qc, kv{m.module, obj{{"group_size", p.GroupSize}, {"bits", p.Bits}, {"mode", p.Mode}}})
			}
		}
	}
	return qc
}

package model

import "github.com/duet-ai/duet/plugins/mlx-engine/safetensors"

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
	// pending families parse and bind but no backend runs them yet: they are left out of Families (what tests
	// run and what the load error calls supported) and listed in AllFamilies.
	pending bool
	// layer binds one layer's weights, whose module path is p ("model.layers.3."). Optional: denseLayer.
	layer func(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error
}

// familyDefs are the supported families, in the order Families lists them.
var familyDefs = []familyDef{
	{name: Llama, architectures: []string{"LlamaForCausalLM"}},
	{name: Mistral, architectures: []string{"MistralForCausalLM"}},
	{name: Qwen2, architectures: []string{"Qwen2ForCausalLM"}},
	{name: Qwen3, architectures: []string{"Qwen3ForCausalLM"}},
	{name: Gemma3Text, architectures: []string{"Gemma3ForCausalLM"}, prepare: gemma3Prepare, spec: gemma3Spec,
		layer: gemma3Layer, pending: true},
	{name: Gemma3, architectures: []string{"Gemma3ForConditionalGeneration"}, prepare: gemma3Prepare, spec: gemma3Spec,
		prefixes: gemma3Prefixes, ignore: gemma3Ignore, layer: gemma3Layer, pending: true},
	{name: GptOSS, architectures: []string{"GptOssForCausalLM"}, prepare: gptossPrepare, spec: gptossSpec,
		layer: gptossLayer, pending: true},
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

func (d *familyDef) bindLayer(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error {
	if d.layer != nil {
		return d.layer(b, l, spec, p, hidden)
	}
	return b.denseLayer(l, spec, p, hidden)
}

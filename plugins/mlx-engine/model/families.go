package model

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
	// layer binds one layer's weights, whose module path is p ("model.layers.3."). Optional: denseLayer.
	layer func(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error
}

// familyDefs are the supported families, in the order Families lists them.
var familyDefs = []familyDef{
	{name: Llama, architectures: []string{"LlamaForCausalLM"}},
	{name: Mistral, architectures: []string{"MistralForCausalLM"}},
	{name: Qwen2, architectures: []string{"Qwen2ForCausalLM"}},
	{name: Qwen3, architectures: []string{"Qwen3ForCausalLM"}},
}

func lookupFamily(f Family) *familyDef {
	for i := range familyDefs {
		if familyDefs[i].name == f {
			return &familyDefs[i]
		}
	}
	return nil
}

func (d *familyDef) modulePrefix() string {
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

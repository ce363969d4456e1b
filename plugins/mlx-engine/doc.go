// Package mlxengine is duet's engine plugin: it loads models in the Hugging Face / mlx-community layout, runs
// them on a tensor backend (MLX through mlx-c in builds with the mlx tag, pure Go otherwise), and serves them
// through the engine contract of sdk/engine. Its main is cmd/duet-mlx-engine; the gateway also runs it as its
// built-in engine "mlx-engine".
//
// The pieces, each its own package: model (config and weights), safetensors, tokenizer, chattemplate,
// sampling, prefixcache, runner (the compute loop of one instance), backend (the contract backends implement)
// with backend/cpu, modelgen (generated models, including the embedded default) and hub (Hugging Face
// downloads).
package mlxengine

// Package model reads a model directory in the Hugging Face / mlx-community layout (config.json, safetensors
// weights, single-file or sharded) for the decoder-only families the engine supports: llama, mistral, qwen2
// and qwen3, and the mixtures of experts qwen3_moe, qwen2_moe and mixtral (experts stored one module each, as
// on the Hugging Face hub, or stacked into switch_mlp tensors by mlx-lm; Experts.Each views either without
// copying), Gemma 3, gpt-oss, and the hybrids qwen3_next, qwen3_5 and qwen3_5_moe, whose Gated DeltaNet
// (linear attention) layers bind to Layer.DeltaNet (the cpu backend runs them; the mlx backend not yet).
//
// Load parses and validates everything a backend needs before any compute happens: the architecture (GQA,
// head_dim, RoPE with llama3 scaling, tied embeddings, qwen2's q/k/v biases, qwen3's q/k norms), every
// tensor's presence, dtype and shape, and MLX affine quantization (bits, group size and per-module overrides
// as mlx-lm writes them). Anything unsupported fails here with a message naming the file, tensor or field, so a
// backend never discovers a malformed model halfway through a forward pass.
//
// The package does no math beyond converting and dequantizing tensors to float32; backends decide how to use
// the weights. Tensors alias the memory-mapped files, so a Model must stay open while anything uses them.
//
// Fingerprint identifies the computation a model performs, so that a decode node can refuse KV produced by a
// different model: see Fingerprint for what it covers and why it samples rather than hashes every byte.
package model

// Package modelgen generates model directories in exactly the Hugging Face / mlx-community on-disk layout:
// config.json, generation_config.json, model.safetensors (or shards with model.safetensors.index.json),
// tokenizer.json and tokenizer_config.json with a Jinja chat template.
//
// Why: the engine must be testable everywhere without downloading anything, across every family, dtype,
// quantization and tokenizer kind it supports, and `go run ./gateway` must have a model to serve out of the
// box. Real checkpoints are gigabytes and cannot be committed; these are generated in milliseconds (the
// embedded default model in well under a second), and the same Options always give the same bytes.
//
// What is generated:
//   - Tokenizers learned from a small embedded English corpus plus grammar-generated sentences: byte-level BPE
//     as in Llama 3 / Qwen (GPT-2 byte alphabet, the family's pre-tokenizer regex, special tokens, reserved
//     tokens) or SentencePiece-style BPE with byte fallback as in Llama 2 / Mistral. They are standard
//     tokenizer.json files; the tests load them in @lenml/tokenizers, a port of Hugging Face tokenizers.
//   - Weights from a seeded splitmix64 stream per tensor name (independent of write order), scaled-normal
//     initialised, in float32/float16/bfloat16, optionally MLX-affine-quantized (2/4/8 bits, group 32/64/128,
//     per-module overrides written to config.json the way mlx-lm writes them).
//   - A little structure so output is not noise: embeddings share one direction that lets the output layer
//     give every token a bias, ids that must never be produced (padding rows, reserved tokens) get a logit of
//     -30, and with Options.Bigram (on for Embedded) the output layer is built so that the model continues
//     text with the corpus's token bigram statistics and ends a turn after some sentences. The embedded model
//     therefore writes odd but readable English, never one token over and over.
//
// Presets: Embedded (the gateway's default: ~13M parameters, bfloat16, Llama 3 style), Bench100M (~100M
// parameters, float32, for benchmarks), PDBench (the prefill/decode benchmarks' model, which `duet bench`
// generates too), MoE2B (a 4-bit qwen3_moe of 2.5B parameters, 0.23B active, for the mixture-of-experts
// benchmark), HybridBench and HybridBenchDense (a 4-bit qwen3_next of about 0.3B active parameters and its dense
// twin, for the linear-attention benchmarks) and Tiny (a few hundred thousand parameters, for tests). Mixtures of experts are written in the
// Hugging Face layout (one module per expert) or mlx-community's (Options.Layout), with the same values for a
// seed; Options.RouterTies makes two experts tie in every token.
// cmd/duet-modelgen writes any of them to a directory.
package modelgen

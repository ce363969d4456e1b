// Package mlx is the MLX backend ("mlx"): the engine's forward pass and KV cache on Apple's MLX through its C
// API, mlx-c, with cgo. It is compiled only with the build tag mlx (go build -tags mlx) against an installed
// mlx-c; without the tag this package is empty, the engine runs on the pure-Go backend (backend/cpu), and asking
// for backend=mlx fails with a message that says how to build it. See plugins/mlx-engine/README.md for building
// mlx-c and linking against it.
//
// Design, and why:
//   - This package is the only place that touches C. Every MLX call runs on one goroutine locked to one OS
//     thread for the life of the process (MLX keeps per-thread state: default streams, Metal command encoders);
//     other goroutines hand it closures. A Forward call is one closure, so the hand-over costs one channel round
//     trip per step.
//   - MLX's default error handler prints and calls exit. A C handler installed at start records the message
//     instead, and lastError turns it into a Go error at one choke point, right after the failing call.
//   - Explicit ownership, no finalizers: weights belong to the model (freed by Close), K/V buffers to their cache
//     (freed by Release), and every other array to the graph of the step that built it (freed when the step
//     ends). A step that writes a cache frees the cache's old handle before evaluating, so slice_update writes
//     in place instead of copying the cache.
//   - The forward pass computes the blocks of model.Arch (docs/models-design.md §1.2), as the cpu backend does,
//     with MLX's fused ops: the four norm slots with fast rms_norm (Gemma's 1+w folded into the weight at load
//     in float32), fast rope with the per-pair periods of RopeSpec.InvFreq passed explicitly on the layer's
//     rotary dims (the attention factor multiplies the rotated dims afterwards), fast
//     scaled_dot_product_attention with native GQA and learned sinks, causal when a sequence feeds several
//     tokens (its queries are the last ones of the keys) and with a bool mask [T, S] on sliding layers
//     (window ∧ causal), SwiGLU, GeGLU (tanh) and gpt-oss's clamped SwiGLU, biases where the spec has them.
//     Quantized layers use quantized_matmul (affine, or mxfp4 with e8m0 scales), quantized embeddings a
//     gather + dequantize of only the needed rows. q|k|v and gate|up are joined into one matrix product each
//     where their formats match (fuse).
//   - Mixtures of experts (moe.go) route in the graph, in float32, with a deterministic top k (ties to the
//     lower expert index) and no host round trip; the experts are stacked [E, Out, In] once at load and run
//     with gather_mm / gather_qmm; the chosen experts' outputs are added in ascending expert order.
//   - A sliding layer's cache is a bounded linear buffer (cache.go): at most its window plus a prefill chunk.
//   - Hybrid models (docs/hybrid-design.md): a Gated DeltaNet layer runs the block of linear.go, the chunked
//     delta rule for a sequence's prefill and the recurrence for decode, where a step of single tokens runs as
//     one batch; its cache (cache_linear.go) is the conv window [1, K-1, conv_dim] in the cache dtype and the
//     float32 state [1, Nv, Dv, Dk] per sequence, replaced after each evaluated step, and snapshots (Cuts)
//     are retained handles of those immutable arrays. Gated attention multiplies each head's output by
//     σ(gate), q_proj's gate rows loaded as their own matrix, before o_proj.
//   - Weights are copied from the tensors package model already validated (names, shards, tied embeddings and
//     quantization overrides resolved there) into MLX arrays and evaluated once at load.
//   - Compute dtype: float32 on the CPU, where MLX's float32 matrix products go to BLAS and its 16-bit ones do
//     not, and which makes the backend agree with the pure-Go one; the model's dtype on a GPU (Metal, CUDA), as
//     mlx-lm does. DUET_MLX_COMPUTE=float32|model overrides. Caches always hold the model's dtype (bfloat16 for
//     bf16 models and bf16-scaled quantized ones), rounded on write and read back by attention, so KV exported
//     by either backend and imported by the other continues the same way.
//   - A Forward call with several sequences runs the projections and the MLP once over all their tokens (each
//     weight read once per step); RoPE, the cache write and attention run per sequence (their caches differ in
//     length, and per-sequence attention needs no padding). Long inputs are split into steps of at
//     most PrefillChunk tokens (default 2048), evaluated one after the other.
//   - Pipelining: Forward must return logits, because the engine samples on the host, so one step cannot be
//     queued before the previous token is known (what mlx-lm does by sampling on the device). Within a step,
//     each layer is scheduled with async_eval as soon as it is built, so MLX computes while Go builds the rest.
//   - backend.Options.Threads does not apply: MLX schedules its own threads (OPENBLAS_NUM_THREADS on Linux).
//   - MLX memory figures (active, peak, cache, limit) come from Memory and from the model's Metrics method; a
//     memory limit (SetMemoryLimit, DUET_MLX_MEMORY_LIMIT) makes cache growth past it fail with an error.
package mlx

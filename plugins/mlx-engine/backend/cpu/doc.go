// Package cpu is the pure-Go backend: the default build's inference engine and what CI runs. It needs no cgo
// and no accelerator, so every test of the engine runs everywhere; the MLX backend implements the same
// backend.Backend contract for Apple Silicon and CUDA.
//
// Design, and why:
//   - Blocks, not families (docs/models-design.md §1.5): forward.go's step is the loop over model.Arch's layers,
//     attn.go the attention block (per-layer heads, scale, q/k norm, RoPE with its frequencies, attention factor
//     and rotary dims, full or sliding-window causal masking, learned sinks), ffn.go the norms (RMSNorm and
//     Gemma's 1+w, in four optional slots) and the gated MLPs (SwiGLU, GeGLU, clamped SwiGLU). A family name
//     never appears here; a block this backend lacks is refused at load.
//   - float32 math throughout. Float32 weights stored aligned in the safetensors file are used in place from the
//     memory map; float16/bfloat16 weights are widened, and MLX-quantized ones dequantized, once at load
//     (backend.WeightsFloat32), or kept as stored and expanded inside each product (backend.WeightsStored: 2× to
//     6× less memory; decode kernels widen or dequantize in registers, prefill expands a tile of rows shared by
//     the step's tokens). WeightsAuto, the default, expands unless the float32 copy would take more than half
//     the machine's memory, because expanded decode is faster on few cores per memory channel
//     (BenchmarkWeightFormats, BenchmarkWeights). Both give the same logits, bit for bit.
//   - One worker pool of GOMAXPROCS goroutines runs every parallel loop; work is cut into chunks claimed with an
//     atomic counter. Matrix products are parallel over weight rows, attention over (token, KV head) pairs.
//   - Kernel paths (simd.go): the pure-Go kernels are the fallback and the reference; on amd64, AVX2+FMA and
//     AVX-512 kernels generated with avo (internal/kernelgen, kernels_amd64.s) run the matrix products of decode
//     and prefill, the stored bf16/f16/8-bit/4-bit decode products (widened or dequantized in registers to the
//     bits model.Affine gives; the rows two calls ahead prefetched), attention's dot products and weighted
//     sums, and the exponentials of SiLU and of attention's softmax (Cephes' expf in registers, within 4e-7 of
//     math.Exp's; the Go path keeps math.Exp). The fastest path the CPU has is chosen at load;
//     DUET_CPU_KERNELS=go|avx2|avx512 forces one.
//   - Within a path every kernel sums an output the same way, whatever tile computes it: the Go kernels in one
//     accumulator in index order, products rounded before they are added; the vector paths in 8 (AVX2) or 16
//     (AVX-512) lanes with fused multiply-adds, reduced by one fixed tree. So a token's result does not depend
//     on which other tokens share the step: batched decode equals unbatched decode and chunked prefill equals
//     one-shot prefill, bit for bit, on each path, and stored weights give the expanded ones' logits. Across
//     paths logits differ at the ulp scale (TestKernelPathsAgree), so P/D is exact between nodes on one path.
//   - The Go kernels compute 8 dot products at a time (8 weight rows × 1 token for decode, 4 × 2 for
//     multi-token steps) with unrolled, bounds-check-free inner loops; the vector ones 8 × 1 for decode and
//     4 weight rows × 3 (AVX2) or × 6 (AVX-512) tokens for multi-token steps. Stored matrices decode 4 weight
//     rows × 1 token, and a batch of up to 8 tokens (storedVecRows) 1 weight row × 8 tokens: each register
//     of weights is widened or dequantized once and applied to every token, the same bits for each.
//   - A Forward call with several sequences reads every weight once for all of them (continuous batching);
//     long prompts are processed PrefillChunk tokens at a time with the same multi-token kernels.
//   - Mixtures of experts (moe.go) route each row in float32 (ties to the lower expert index), group a step's
//     rows by expert so every chosen expert's matrices are read once per step and unchosen ones not at all,
//     run each expert with the kernels of a dense product, and sum a row's experts in ascending order: the
//     exactness rules above hold for them too.
//   - The Gated DeltaNet block of hybrid models (linear.go) runs its delta rule token by token, prefill
//     included, parallel over value heads, so its results too are the same for any split and thread count.
//     In the forward pass (linear_layer.go) a linear layer takes attention's place: its projections, the
//     model's row views of the stored matrices, run as parts of one multi-matmul, and the rule works on the
//     cache's own conv window and float32 state in place (cache_state.go), one sequence at a time; gated
//     attention (attn.go) multiplies each head's output by σ of its gate before o_proj.
//   - The KV cache stores keys and values in the model's dtype (16-bit patterns for float16/bfloat16 models),
//     rounded when written, and attention always reads them back from the cache (cache.span, in ascending
//     position order, whatever the cache's storage). KV exported and imported
//     elsewhere therefore reproduces local decoding exactly.
package cpu

// Package backend is the contract between the engine runtime and the code that runs a model's forward pass:
// the pure-Go backend (backend/cpu, the default build) and the MLX backend (built with the mlx tag).
//
// The contract is deliberately small. A Model runs Forward over a batch of sequences, each with its own Cache;
// a Cache holds the keys and values of the positions fed so far and can copy them out and in, per layer, in the
// KV wire layout [tokens, kv_heads, head_dim]. That is all the engine needs for scheduling (batched decode
// steps), prefix caching (Clone, Truncate) and prefill/decode disaggregation (ExportKV, ImportKV).
//
// Exactness: a cache stores keys and values in the layout dtype (the model's compute dtype), rounding on write,
// and attention reads them back from the cache. So KV exported from one cache and imported into another
// continues with bit-identical logits on the same backend, and greedy decoding after a remote prefill produces
// exactly the tokens a local prefill would.
//
// Concurrency: a Model's methods may be called from several goroutines (Forward calls run one at a time); a
// Cache belongs to one sequence and must not be used concurrently, nor appear twice in one Forward batch.
//
// Layer kinds: a KVLayout lists its layers, each full (it holds every position fed) or sliding with a window W
// (a query at p sees [p-W+1, p], so the layer holds at most the last W positions: after n positions,
// [max(0, n-W), n), which also lets a cache be truncated or cloned at n-1). Cache.Len counts positions fed, the
// same for every kind. A sliding layer cannot get back what it evicted, so Truncate and Clone are exact only
// where Restorable says so, an import into a sliding layer may open a gap (the KV wire sends only a window), and
// Forward refuses, with ErrWindowGap, a cache whose sliding layer lacks a position the next query sees: a
// missing window becomes a local prefill, never a wrong token. Attention sums over visible positions in
// ascending order whatever the cache's physical order, so chunked = one-shot and batched = unbatched hold with
// windows too.
//
// Linear layers: a KVLinear layer (Gated DeltaNet linear attention, docs/hybrid-design.md) keeps no positions
// but a fixed-size state: a conv window over the K-1 previous positions in the layout dtype (rounded on write, as
// keys and values are) and a float32 delta-rule state, the arrays of LayerKV.State, which ExportState and
// ImportState copy whole in the wire layout of exo's arrays_state (mlx-lm's ArraysCache: [1, K-1, conv_dim],
// then [1, Nv, Dv, Dk]). ExportKV and ImportKV refuse a linear layer and the state methods an attention layer
// (ErrLayerKind). LayerSpans keeps a count for every layer: Forward and ImportState advance a linear layer's.
// A state cannot be rewound, so such a cache can be cut only where it keeps one: Cuts lists those positions (0,
// Len(), and snapshots: after a Forward call with Seq.Snapshot, after a complete import, the state an import
// replaced, and those inherited from the cache it was cloned from); Clone elsewhere fails with ErrNoSnapshot
// and Truncate restores the newest cut at or below n, so callers read Len() afterwards. Snapshots are immutable
// and shared by reference with clones; each holder counts them in Bytes, and the last Release frees them. Nil
// Cuts means every position, the caches of models without linear layers. The prefix cache asks Cuts, so a
// lookup past the last snapshot is a shorter hit or a miss, never a wrong state.
//
// The argument checks the contract implies are the same for every backend, so they live here (check.go):
// CheckBatch validates a Forward batch, CheckLayout a layout, and LayerSpans keeps what each layer of a cache
// holds and checks Forward's, Clone's, ExportKV's, ImportKV's, ExportState's and ImportState's arguments against
// it (CheckCut and NewestCut the cuts); Snapshots keeps a hybrid cache's snapshots and says which positions are
// cuts, over a payload each backend defines (snapshots.go). A backend keeps only what is its own (whether a cache
// is one of its own and still usable, where the bytes go, how a state is copied, shared and freed) and puts its
// name before the errors. The conformance suite in
// backend/backendtest checks any backend against this contract.
package backend

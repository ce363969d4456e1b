// Package runner is the compute loop of one model instance. One goroutine owns the backend model: it admits
// requests, prefills their prompts in chunks, and runs batched decode steps for every sequence that is
// generating, so several requests stream at once without blocking each other (continuous batching). A long
// prompt is prefilled one chunk per step, interleaved with the decode steps of running streams, so it delays
// their next tokens by one chunk's compute at most.
//
// The loop never waits on a consumer: events go into a per-request queue that the request's own goroutine
// drains. Cancellation is checked every step and frees the sequence's KV at once; a finished or cancelled
// sequence hands its cache to the prefix cache, so the next request that shares its prefix starts from there.
//
// A model with linear-attention layers (Gated DeltaNet) keeps a recurrent state that cannot be cut back, so its
// cache is reusable only where it kept a snapshot: the loop ends prefill chunks on a grid
// (Config.StateSnapshotEvery, SnapshotGrid) and asks for a snapshot there and at each prompt's end, the position a
// chat's next turn shares. Over the KV wire such a layer travels as one arrays_state describing the whole prompt.
package runner

// Package backendtest is the conformance suite for backends: the checks of the backend contract (package
// backend) that hold for every implementation, run on small models it generates with modelgen. The pure-Go
// backend and the MLX backend run it from their tests, and a third-party backend can run the same suite from its
// own:
//
//	func TestBackendConformance(t *testing.T) {
//		backendtest.Run(t, mybackend.Backend{}, backendtest.Options{Tolerance: myTolerance})
//	}
//
// The suite covers Clone, Truncate and Release; KV export and import round trips, which must be bit-exact on
// the same backend (what prefill/decode disaggregation relies on); gaps and bad arguments of ExportKV and
// ImportKV; every Forward error; batched against unbatched decoding and chunked against one-shot prefill;
// a closed model; and Forward from several goroutines. Models come in every family, float and 16-bit dtypes and
// quantized (Variants), kept tiny so the suite runs in seconds.
//
// Some backends compute a token's result independently of which other tokens share its step (the pure-Go one
// does); they declare Options.Exact and batching and chunking are then checked bit for bit. Others (MLX, whose
// matrix kernels may sum in another order for another number of rows) give a tolerance instead.
//
// Reference (reference.go) is the float64 model of every block of model.Arch (docs/models-design.md §1.2) that
// backends check their logits and greedy tokens against. LinearReference (linear.go) is the same for the Gated
// DeltaNet block of hybrid models (docs/hybrid-design.md §1), on plain slices: both forms of its delta rule, the
// recurrence and the chunked form, each checked against the other.
//
// The helpers the suite uses (Generate, Load, Forward, Greedy, ExportAll, ...) are exported for a backend's own
// tests, and Bench* helpers give every backend's benchmarks the same models, workloads and metric names.
package backendtest

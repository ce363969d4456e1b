package backendtest

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// Options say what the suite may expect of a backend and how to run it.
type Options struct {
	// Exact declares that a token's logits do not depend on the other tokens of its step: batched decoding
	// equals unbatched decoding and chunked prefill equals one-shot prefill, bit for bit. Without it the suite
	// compares those within Tolerance.
	Exact bool
	// Tolerance is the largest max |Δlogit| relative to max(1, max |logit|) (RelDiff) allowed between batched
	// and unbatched decoding, and chunked and one-shot prefill, of a model with KV dtype d. Required unless
	// Exact. Greedy tokens must agree either way.
	Tolerance func(d dtype.DType) float64
	// Variants are the models of the checks that run on several; Variants() when nil.
	Variants []Variant
	// Parallel runs the checks, and a check's variants, in parallel. Leave it off for a backend that runs one
	// thing at a time anyway.
	Parallel bool
	// Skip names checks to skip, with the reason as the value.
	Skip map[string]string
	// Windows declares that the backend implements sliding-window layers (AttnSpec.Window); SlidingWindows is
	// skipped without it (such a backend must refuse to load a model with windows).
	Windows bool
	// Linear declares that the backend implements hybrid models: Gated DeltaNet layers (LayerLinear) and gated
	// attention (AttnSpec.OutputGate). LinearLayers is skipped without it (such a backend must refuse to load
	// them).
	Linear bool
}

// Variant is a generated model the suite runs on.
type Variant struct {
	Name    string
	Options modelgen.Options
}

// Variants cover each family, each KV dtype, quantized and float weights, and the shapes that change the KV
// layout (GQA, MHA-like explicit head_dim) or the forward pass (qwen2 biases, qwen3 q/k norms, tied embeddings).
func Variants() []Variant {
	return []Variant{
		TinyVariant("llama/f32", nil),
		TinyVariant("llama/bf16", func(o *modelgen.Options) { o.DType = dtype.BFloat16 }),
		TinyVariant("qwen3/f16/head_dim", func(o *modelgen.Options) { o.DType, o.Family, o.HeadDim = dtype.Float16, model.Qwen3, 32 }),
		TinyVariant("llama/bf16/q4g32", func(o *modelgen.Options) {
			o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 4, GroupSize: 32}
		}),
		TinyVariant("qwen2/f16/q8g64/tied", func(o *modelgen.Options) {
			o.Family, o.DType, o.TieWordEmbeddings = model.Qwen2, dtype.Float16, true
			o.Quantization = &modelgen.Quantization{Bits: 8, GroupSize: 64}
		}),
		TinyVariant("mistral/f32/q4g64", func(o *modelgen.Options) {
			o.Family, o.Quantization = model.Mistral, &modelgen.Quantization{Bits: 4, GroupSize: 64}
		}),
	}
}

// TinyVariant is the variant called name of the model Tiny(mod).
func TinyVariant(name string, mod func(*modelgen.Options)) Variant {
	return Variant{Name: name, Options: Tiny(mod)}
}

// Run runs the conformance suite against b, each check as a subtest named as in the list below.
func Run(t *testing.T, b backend.Backend, opts Options) {
	t.Helper()
	if !opts.Exact && opts.Tolerance == nil {
		t.Fatal("backendtest: Options.Tolerance is required unless Options.Exact")
	}
	if opts.Variants == nil {
		opts.Variants = Variants()
	}
	s := &suite{b: b, opts: opts}
	checks := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"KVTransferIsExact", s.eachVariant(s.kvTransfer)},
		{"CloneTruncateRelease", s.cloneTruncateRelease},
		{"ImportExportErrors", s.importExportErrors},
		{"ForwardErrors", s.forwardErrors},
		{"BatchedMatchesUnbatched", s.eachVariant(s.batched)},
		{"ChunkedPrefillMatchesOneShot", s.eachVariant(s.chunked)},
		{"ConcurrentForward", s.concurrentForward},
		{"ClosedModel", s.closedModel},
		{"SlidingWindows", s.slidingWindows},
		{"NoLinearLayers", s.noLinearLayers},
		{"LinearLayers", s.linearLayers},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if why, skip := opts.Skip[c.name]; skip {
				t.Skip(why)
			}
			s.parallel(t)
			c.fn(t)
		})
	}
}

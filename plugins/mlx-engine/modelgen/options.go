package modelgen

import (
	"errors"
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// TokenizerKind selects the tokenizer a generated model ships with.
type TokenizerKind string

// The tokenizer kinds.
const (
	// ByteLevel is byte-level BPE as in Llama 3 and Qwen: 256 byte symbols, a pre-tokenizer regex, merges.
	ByteLevel TokenizerKind = "bytelevel"
	// SentencePiece is SentencePiece-style BPE with byte fallback as in Llama 2 and Mistral: "▁" for spaces,
	// <0xNN> byte tokens for characters outside the vocabulary.
	SentencePiece TokenizerKind = "sentencepiece"
)

// Options describe a model to generate. The zero values of optional fields take the defaults noted.
type Options struct {
	Family           model.Family // default llama
	HiddenSize       int
	IntermediateSize int
	NumLayers        int
	NumHeads         int
	NumKVHeads       int // default NumHeads
	// HeadDim defaults to HiddenSize/NumHeads; it is written to config.json when it differs or for qwen3
	// (whose configs always carry it).
	HeadDim int
	// VocabSize is config.json's vocab_size, the rows of the embedding and output layers. The tokenizer fills
	// as much of it as its corpus allows (base symbols, learned merges, the family's special tokens and, Llama 3
	// style, reserved special tokens up to 256 specials); rows beyond the tokenizer are padding that no token maps
	// to, with a strongly negative logit, as Qwen models pad theirs. Tied models are shrunk to the tokenizer.
	VocabSize             int
	MaxPositionEmbeddings int     // default 4096
	RopeTheta             float64 // default 10000 (llama, mistral) or 1000000 (qwen)
	RopeScaling           *model.RopeScaling
	TieWordEmbeddings     bool
	DType                 dtype.DType // default bfloat16
	Quantization          *Quantization
	Shards                int           // default 1: model.safetensors; more: model-0000i-of-0000n + index
	Tokenizer             TokenizerKind // default ByteLevel
	Seed                  uint64
	// ResidualScale scales what each attention and MLP block adds to the residual stream relative to the token
	// embedding (default 0.25). Small values keep the embedding's bigram structure readable; larger ones make
	// context matter more, which numerical tests want.
	ResidualScale float64
	// Bigram shapes the output layer of untied models so that the model continues text like the training
	// corpus does (token bigram statistics); otherwise it is random. Default: on for Embedded.
	Bigram bool
}

// Quantization asks for MLX affine quantization of every linear layer and the embeddings.
type Quantization struct {
	Bits      int
	GroupSize int
	// Overrides maps module paths ("model.layers.0.mlp.down_proj", "lm_head") to their own parameters, or to
	// nil to leave that module in floating point; written to config.json as mlx-lm does.
	Overrides map[string]*model.QuantParams
}

// Embedded is the default model the gateway serves when no model is named: a 4-layer Llama-family model
// with ~13M parameters in bfloat16, a byte-level BPE tokenizer with Llama 3 special tokens and chat template,
// and an output layer shaped by the corpus's bigrams so that its answers read like (odd) English.
func Embedded() Options {
	return Options{
		Family:                model.Llama,
		HiddenSize:            512,
		IntermediateSize:      1408,
		NumLayers:             4,
		NumHeads:              8,
		NumKVHeads:            2,
		VocabSize:             2048,
		MaxPositionEmbeddings: 8192,
		RopeTheta:             500000,
		RopeScaling:           &model.RopeScaling{Type: "llama3", Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 2048},
		DType:                 dtype.BFloat16,
		Tokenizer:             ByteLevel,
		Seed:                  1,
		Bigram:                true,
	}
}

// Bench100M is a ~100M-parameter Llama-family float32 model for benchmarks: 12 layers of width 768 with GQA
// (12 query heads, 4 KV heads) and a 16384-token vocabulary.
func Bench100M() Options {
	return Options{
		Family:                model.Llama,
		HiddenSize:            768,
		IntermediateSize:      2048,
		NumLayers:             12,
		NumHeads:              12,
		NumKVHeads:            4,
		VocabSize:             16384,
		MaxPositionEmbeddings: 8192,
		RopeTheta:             500000,
		DType:                 dtype.Float32,
		Tokenizer:             ByteLevel,
		Seed:                  2,
	}
}

// PDBench is the model of the prefill/decode benchmarks (the engine's BenchmarkPD* and `duet bench pd`): a
// Llama-family bfloat16 model of 4 layers of width 256 with 2 KV heads and a 16k context, small enough to
// generate in a moment, wide and long enough that an 8k-token prefill takes seconds on one core of pure Go,
// while a decode step stays in milliseconds.
func PDBench() Options {
	return Options{
		Family: model.Llama, HiddenSize: 256, IntermediateSize: 704, NumLayers: 4, NumHeads: 4, NumKVHeads: 2,
		VocabSize: 2048, MaxPositionEmbeddings: 16384, RopeTheta: 500000, DType: dtype.BFloat16, Seed: 5,
	}
}

// Tiny is a very small model for tests: 2 layers of width 64, GQA, a 512-token vocabulary. Override fields
// (Family, DType, Quantization, ...) to cover the supported variants.
func Tiny() Options {
	return Options{
		Family:                model.Llama,
		HiddenSize:            64,
		IntermediateSize:      128,
		NumLayers:             2,
		NumHeads:              4,
		NumKVHeads:            2,
		VocabSize:             512,
		MaxPositionEmbeddings: 2048,
		DType:                 dtype.Float32,
		Tokenizer:             ByteLevel,
		Seed:                  3,
		ResidualScale:         1,
	}
}

func (o *Options) normalize() error {
	if o.Family == "" {
		o.Family = model.Llama
	}
	known := false
	for _, f := range model.Families {
		known = known || f == o.Family
	}
	if !known {
		return fmt.Errorf("modelgen: unknown family %q (supported: %v)", o.Family, model.Families)
	}
	if o.HiddenSize <= 0 || o.IntermediateSize <= 0 || o.NumLayers <= 0 || o.NumHeads <= 0 || o.VocabSize <= 0 {
		return errors.New("modelgen: HiddenSize, IntermediateSize, NumLayers, NumHeads and VocabSize must be positive")
	}
	if o.NumKVHeads == 0 {
		o.NumKVHeads = o.NumHeads
	}
	if o.NumKVHeads < 0 || o.NumHeads%o.NumKVHeads != 0 {
		return fmt.Errorf("modelgen: NumHeads %d is not a multiple of NumKVHeads %d", o.NumHeads, o.NumKVHeads)
	}
	if o.HeadDim == 0 {
		if o.HiddenSize%o.NumHeads != 0 {
			return errors.New("modelgen: HiddenSize must be a multiple of NumHeads when HeadDim is not given")
		}
		o.HeadDim = o.HiddenSize / o.NumHeads
	}
	if o.HeadDim%2 != 0 || o.HeadDim <= 0 {
		return fmt.Errorf("modelgen: HeadDim %d must be positive and even", o.HeadDim)
	}
	if o.MaxPositionEmbeddings == 0 {
		o.MaxPositionEmbeddings = 4096
	}
	if o.RopeTheta == 0 {
		o.RopeTheta = 10000
		if o.Family == model.Qwen2 || o.Family == model.Qwen3 {
			o.RopeTheta = 1000000
		}
	}
	if o.DType == "" {
		o.DType = dtype.BFloat16
	}
	if !o.DType.Valid() {
		return fmt.Errorf("modelgen: unknown dtype %q", o.DType)
	}
	if o.Shards == 0 {
		o.Shards = 1
	}
	if o.Shards < 0 || o.Shards > 99 {
		return fmt.Errorf("modelgen: %d shards is out of range", o.Shards)
	}
	if o.Tokenizer == "" {
		o.Tokenizer = ByteLevel
	}
	if o.Tokenizer != ByteLevel && o.Tokenizer != SentencePiece {
		return fmt.Errorf("modelgen: unknown tokenizer kind %q", o.Tokenizer)
	}
	if o.ResidualScale == 0 {
		o.ResidualScale = 0.25
	}
	if q := o.Quantization; q != nil {
		check := func(what string, p model.QuantParams) error {
			if p.Bits != 2 && p.Bits != 4 && p.Bits != 8 {
				return fmt.Errorf("modelgen: %s: %d-bit quantization is not supported (2, 4, 8)", what, p.Bits)
			}
			if p.GroupSize != 32 && p.GroupSize != 64 && p.GroupSize != 128 {
				return fmt.Errorf("modelgen: %s: group size %d is not supported (32, 64, 128)", what, p.GroupSize)
			}
			for _, in := range []int{o.HiddenSize, o.IntermediateSize, o.NumHeads * o.HeadDim} {
				if in%p.GroupSize != 0 {
					return fmt.Errorf("modelgen: %s: input size %d is not a multiple of group size %d", what, in, p.GroupSize)
				}
			}
			return nil
		}
		if err := check("quantization", model.QuantParams{GroupSize: q.GroupSize, Bits: q.Bits}); err != nil {
			return err
		}
		for k, p := range q.Overrides {
			if p != nil {
				if err := check(k, *p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

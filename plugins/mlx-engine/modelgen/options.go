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
	// Mixture of experts, for the families that have one (qwen3_moe, qwen2_moe, mixtral); zero values take
	// the tiny defaults of normalize: 4 experts, 2 per token, MoEIntermediate of IntermediateSize/2, and for
	// qwen2_moe a shared expert of that size in every second layer (decoder_sparse_step 2), for qwen3_moe a
	// dense layer 1 (mlp_only_layers). Mixtral's experts are its intermediate_size, so MoEIntermediate is
	// written there.
	NumExperts, TopK, MoEIntermediate int
	SharedIntermediate                int
	NormTopK                          bool
	SparseStep                        int   // decoder_sparse_step (qwen*_moe)
	MLPOnlyLayers                     []int // mlp_only_layers (qwen*_moe); nil takes the default, empty none
	// RouterTies makes the router rows of experts 0 and 1 identical, so every token ties them exactly and the
	// tie rule (the lower index first) decides whenever the top k ends between them.
	RouterTies bool
	// Layout is how experts are stored: LayoutHF (one module per expert, the Hugging Face names) or
	// LayoutMLX (mlx-lm's sanitize: switch_mlp stacks of [E, Out, In]). The values of a seed are the same.
	Layout Layout
	// Bigram shapes the output layer of untied models so that the model continues text like the training
	// corpus does (token bigram statistics); otherwise it is random. Default: on for Embedded.
	Bigram bool
}

// Layout is a checkpoint's naming of expert weights.
type Layout string

// The layouts.
const (
	LayoutHF  Layout = "hf"
	LayoutMLX Layout = "mlx"
)

// baseFamily is the dense family whose attention, tokenizer and names an MoE family shares.
func baseFamily(f model.Family) model.Family {
	switch f {
	case model.Qwen3MoE:
		return model.Qwen3
	case model.Qwen2MoE:
		return model.Qwen2
	case model.Mixtral:
		return model.Mistral
	}
	return f
}

// moe reports whether the family has a mixture of experts.
func (o *Options) moe() bool { return baseFamily(o.Family) != o.Family }

// sparse reports whether layer i is a mixture of experts.
func (o *Options) sparse(i int) bool {
	if !o.moe() {
		return false
	}
	if o.Family == model.Mixtral {
		return true
	}
	for _, d := range o.MLPOnlyLayers {
		if d == i {
			return false
		}
	}
	return (i+1)%o.SparseStep == 0
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

// MoE2B is a qwen3_moe model at a realistic shape for benchmarks, 4-bit (group 64, bfloat16 scales) as
// mlx-community publishes such models: 24 layers of width 1024 (16 query heads, 4 KV heads of 64), 64 experts
// of 512 with 4 per token, and a 16384-token vocabulary: 2.51B parameters, 0.23B active per token (1.4 GB).
func MoE2B() Options {
	return Options{
		Family:                model.Qwen3MoE,
		HiddenSize:            1024,
		IntermediateSize:      2048,
		NumLayers:             24,
		NumHeads:              16,
		NumKVHeads:            4,
		HeadDim:               64,
		VocabSize:             16384,
		MaxPositionEmbeddings: 8192,
		NumExperts:            64,
		TopK:                  4,
		MoEIntermediate:       512,
		NormTopK:              true,
		MLPOnlyLayers:         []int{},
		Layout:                LayoutMLX,
		DType:                 dtype.BFloat16,
		Quantization:          &Quantization{Bits: 4, GroupSize: 64},
		Tokenizer:             ByteLevel,
		Seed:                  5,
	}
}

// MoE2BDense is the dense model of MoE2B's active size: its attention, and an MLP of TopK·MoEIntermediate.
func MoE2BDense() Options {
	o := MoE2B()
	o.Family, o.IntermediateSize = model.Qwen3, o.TopK*o.MoEIntermediate
	o.NumExperts, o.TopK, o.MoEIntermediate, o.NormTopK, o.MLPOnlyLayers = 0, 0, 0, false, nil
	return o
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
		if f := baseFamily(o.Family); f == model.Qwen2 || f == model.Qwen3 || o.Family == model.Mixtral {
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
	if o.moe() {
		if o.NumExperts == 0 {
			o.NumExperts = 4
		}
		if o.TopK == 0 {
			o.TopK = 2
		}
		if o.MoEIntermediate == 0 {
			o.MoEIntermediate = o.IntermediateSize / 2
		}
		if o.SparseStep == 0 {
			o.SparseStep = 1
			if o.Family == model.Qwen2MoE {
				o.SparseStep = 2
			}
		}
		if o.MLPOnlyLayers == nil && o.Family == model.Qwen3MoE && o.NumLayers > 1 {
			o.MLPOnlyLayers = []int{1}
		}
		if o.SharedIntermediate == 0 && o.Family == model.Qwen2MoE {
			o.SharedIntermediate = o.MoEIntermediate
		}
		if o.Family == model.Mixtral {
			o.NormTopK = true
		}
		if o.NumExperts < 2 || o.TopK <= 0 || o.TopK > o.NumExperts || o.MoEIntermediate <= 0 || o.SparseStep <= 0 || o.SharedIntermediate < 0 {
			return fmt.Errorf("modelgen: %d experts, top %d, intermediate %d, sparse step %d", o.NumExperts, o.TopK, o.MoEIntermediate, o.SparseStep)
		}
	}
	if o.Layout == "" {
		o.Layout = LayoutHF
	}
	if o.Layout != LayoutHF && o.Layout != LayoutMLX {
		return fmt.Errorf("modelgen: unknown layout %q", o.Layout)
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
			for _, in := range []int{o.HiddenSize, o.IntermediateSize, o.NumHeads * o.HeadDim, max(o.MoEIntermediate, p.GroupSize), max(o.SharedIntermediate, p.GroupSize)} {
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

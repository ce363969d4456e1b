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
	VocabSize int
	// KeepVocabSize keeps VocabSize rows in a tied model too (random embeddings past the tokenizer, which the
	// model may well produce): for a test that replaces the generated tokenizer files with a real model's.
	KeepVocabSize         bool
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
	// written there. gpt_oss uses NumExperts and TopK with IntermediateSize as each expert's size.
	NumExperts, TopK, MoEIntermediate int
	SharedIntermediate                int
	NormTopK                          bool
	SparseStep                        int   // decoder_sparse_step (qwen*_moe)
	MLPOnlyLayers                     []int // mlp_only_layers (qwen*_moe); nil takes the default, empty none
	// RouterTies makes the router rows (and biases) of experts 0 and 1 identical, so every token ties them
	// exactly and the tie rule (the lower index first) decides whenever the top k ends between them.
	RouterTies bool
	// Bigram shapes the output layer of untied models so that the model continues text like the training
	// corpus does (token bigram statistics); otherwise it is random. Default: on for Embedded.
	Bigram bool

	// Layout picks the tensor names of families whose Hugging Face and mlx-community checkpoints differ:
	// experts one module each (LayoutHF, the default) or stacked by mlx-lm's sanitize (LayoutMLX: switch_mlp
	// [E, Out, In], gpt_oss's split experts), gemma3's prefix. The values of a seed are the same in both.
	Layout Layout
	// SlidingWindow is the window of sliding layers (gemma3*, default 8; gpt_oss, required); LayerTypes lists each layer's kind
	// ("sliding_attention" / "full_attention") explicitly, otherwise gemma3 writes SlidingPattern (a full layer
	// every SlidingPattern layers) and gpt_oss alternates sliding and full.
	SlidingWindow  int
	LayerTypes     []string
	SlidingPattern int
	// QueryPreAttnScalar (gemma3) scales attention scores by its inverse square root; default HeadDim.
	QueryPreAttnScalar float64
	// RopeLocalBase (gemma3) is the RoPE base of sliding layers; default 10000.
	RopeLocalBase float64
	// Yarn is gpt_oss's rope_scaling (RopeScaling carries llama3 and gemma3's linear scaling).
	Yarn *Yarn
	// SinkStd is the standard deviation of gpt_oss's attention sink logits (default 2: some heads are
	// dominated by their sink). SwiGLULimit is its clamp (default 7); ExpertScale is the standard deviation of
	// the experts' gate and up projections of a unit-RMS input (default 6, so that a good share of them cross
	// the clamp).
	SinkStd, SwiGLULimit, ExpertScale float64
	// ExpertsMXFP4 stores gpt_oss's experts in mxfp4: openai's _blocks/_scales in the HF layout, MLX's packed
	// weights with mode "mxfp4" entries in the MLX layout (beside Quantization for the other modules, if any).
	ExpertsMXFP4 bool

	// The hybrid families (qwen3_next, qwen3_5, qwen3_5_moe; hybrid.go): the Gated DeltaNet's key and value heads
	// and head sizes and its conv kernel (default 4), a full-attention layer every FullAttentionInterval layers
	// (default 4; LayerTypes, "linear_attention" / "full_attention", lists them instead), and the attention's
	// rotary fraction (default 0.25). Their MoE blocks use NumExperts, TopK, MoEIntermediate, SharedIntermediate
	// (always a shared expert), NormTopK, SparseStep and MLPOnlyLayers (qwen3_next).
	LinearKeyHeads, LinearValueHeads, LinearKeyDim, LinearValueDim int
	ConvKernel                                                     int
	FullAttentionInterval                                          int
	PartialRotary                                                  float64
}

// Layout is a checkpoint naming convention.
type Layout string

// The layouts.
const (
	// LayoutHF is the Hugging Face repository's: openai's gpt-oss experts (or transformers' float save),
	// gemma3's model.language_model. prefix.
	LayoutHF Layout = "hf"
	// LayoutMLX is what mlx-lm / mlx-vlm write (mlx-community): gpt-oss experts split and stacked by
	// sanitize, gemma3's language_model.model. prefix.
	LayoutMLX Layout = "mlx"
)

// tokenizerFamily is the family whose tokenizer and chat template a generated model of family f ships.
func tokenizerFamily(f model.Family) model.Family {
	if hybrid(f) {
		return model.Qwen3
	}
	return baseFamily(f)
}

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

// Yarn is a yarn rope_scaling entry.
type Yarn struct {
	Factor             float64
	OrigMaxPos         int
	BetaFast, BetaSlow float64
	Truncate           bool
}

// TinyFamily is a tiny model of a family whose blocks differ from Llama's, shaped so that a 64-token prompt
// crosses every sliding window several times (window 8) and exercises what is easy to get wrong: Gemma's
// (1+w) norms, embedding scale (√128 is not a bfloat16), query_pre_attn_scalar ≠ head_dim, a RoPE base per
// layer kind and linear scaling on full layers; gpt-oss's sinks, clamping, yarn with non-integer correction
// dims and truncate false, and exact router ties; the hybrid families' shape of docs/hybrid-design.md §6.1
// (tinyHybrid). Other families get Tiny.
func TinyFamily(f model.Family) Options {
	o := Tiny()
	o.Family = f
	switch f {
	case model.Gemma3Text, model.Gemma3:
		// Hidden and intermediate sizes are multiples of 64, so that every group size of MLX quantization fits.
		o.HiddenSize, o.IntermediateSize, o.NumLayers, o.NumHeads, o.NumKVHeads, o.HeadDim = 128, 192, 6, 4, 2, 16
		o.TieWordEmbeddings = true
		o.SlidingWindow, o.SlidingPattern = 8, 3
		o.QueryPreAttnScalar, o.RopeLocalBase, o.RopeTheta = 24, 10000, 1000000
		o.RopeScaling = &model.RopeScaling{Type: "linear", Factor: 8}
	case model.Qwen3Next, model.Qwen35, model.Qwen35MoE:
		tinyHybrid(&o)
	case model.GptOSS:
		// H ≠ I and H ≠ 2I: transformers' float experts are [E, in, out], told apart from [E, out, in] by shape.
		// Both multiples of 64, so that every group size of MLX quantization fits.
		o.HiddenSize, o.IntermediateSize, o.NumLayers, o.NumHeads, o.NumKVHeads, o.HeadDim = 64, 128, 4, 4, 2, 16
		o.NumExperts, o.TopK = 8, 2
		o.SlidingWindow = 8
		o.LayerTypes = []string{"sliding_attention", "full_attention", "sliding_attention", "full_attention"}
		o.RopeTheta = 150000
		o.MaxPositionEmbeddings = 4096
		// corr(r) = 16·ln(1024/(2πr))/(2·ln 150000): lo = 1.09, hi = 3.42, so truncating changes the ramp.
		o.Yarn = &Yarn{Factor: 4, OrigMaxPos: 1024, BetaFast: 32, BetaSlow: 1}
		o.RouterTies = true
	}
	return o
}

// TinyWith is Tiny changed by mod (when not nil); when mod names another family, it starts again from that
// family's preset (TinyFamily: its windows, experts, ...), so that a variant says only what it changes. A
// quantized model of a family whose MLX quantization exists in mlx-community's layout only (quantizedMLXOnly)
// is written in that layout.
func TinyWith(mod func(*Options)) Options {
	o := Tiny()
	if mod == nil {
		return o
	}
	mod(&o)
	if o.Family == Tiny().Family {
		return o
	}
	o = TinyFamily(o.Family)
	mod(&o)
	if o.Quantization != nil && quantizedMLXOnly(o.Family) {
		o.Layout = LayoutMLX
	}
	return o
}

// quantizedMLXOnly reports whether f's MLX-quantized checkpoints exist in mlx-community's layout only: openai's
// gpt-oss layout has mxfp4 experts only, and the hybrids' quantized checkpoints are mlx-lm's, which quantizes
// after its sanitize has rewritten the Hugging Face tensors.
func quantizedMLXOnly(f model.Family) bool {
	return f == model.GptOSS || hybrid(f)
}

// Quantization asks for MLX quantization of every linear layer and the embeddings.
type Quantization struct {
	Bits      int
	GroupSize int
	// Mode is model.ModeAffine (the default) or model.ModeMXFP4 (4 bits in groups of 32, e8m0 scales).
	Mode string
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
	o.Layout = "" // a dense family has one naming convention: the layout option is refused
	return o
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
	if err := o.normalizeBlocks(); err != nil {
		return err
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
	if (o.Family == model.Gemma3 || o.Family == model.Gemma3Text) && o.QueryPreAttnScalar == 0 {
		o.QueryPreAttnScalar = float64(o.HeadDim)
	}
	if o.MaxPositionEmbeddings == 0 {
		o.MaxPositionEmbeddings = 4096
	}
	if o.RopeTheta == 0 {
		switch f := baseFamily(o.Family); {
		case f == model.Qwen2 || f == model.Qwen3 || o.Family == model.Mixtral || o.Family == model.Gemma3 || o.Family == model.Gemma3Text:
			o.RopeTheta = 1000000
		case o.Family == model.GptOSS:
			o.RopeTheta = 150000
		default:
			o.RopeTheta = 10000
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
		checkInputs := !hybrid(o.Family) // hybrids quantize what divides into groups, as mlx-lm does
		check := func(what string, p model.QuantParams) error {
			if p.Mode == model.ModeMXFP4 {
				if p.Bits != 4 || p.GroupSize != 32 {
					return fmt.Errorf("modelgen: %s: mxfp4 is 4 bits in groups of 32", what)
				}
			} else if p.Mode != "" && p.Mode != model.ModeAffine {
				return fmt.Errorf("modelgen: %s: unknown quantization mode %q", what, p.Mode)
			}
			if p.Bits != 2 && p.Bits != 4 && p.Bits != 8 {
				return fmt.Errorf("modelgen: %s: %d-bit quantization is not supported (2, 4, 8)", what, p.Bits)
			}
			if p.GroupSize != 32 && p.GroupSize != 64 && p.GroupSize != 128 {
				return fmt.Errorf("modelgen: %s: group size %d is not supported (32, 64, 128)", what, p.GroupSize)
			}
			for _, in := range []int{o.HiddenSize, o.IntermediateSize, o.NumHeads * o.HeadDim, max(o.MoEIntermediate, p.GroupSize), max(o.SharedIntermediate, p.GroupSize)} {
				if checkInputs && in%p.GroupSize != 0 {
					return fmt.Errorf("modelgen: %s: input size %d is not a multiple of group size %d", what, in, p.GroupSize)
				}
			}
			return nil
		}
		if err := check("quantization", model.QuantParams{GroupSize: q.GroupSize, Bits: q.Bits, Mode: q.Mode}); err != nil {
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

// normalizeBlocks checks and defaults the options of the families built from more than Llama's blocks.
func (o *Options) normalizeBlocks() error {
	if o.Layout == "" {
		o.Layout = LayoutHF
	}
	if o.Layout != LayoutHF && o.Layout != LayoutMLX {
		return fmt.Errorf("modelgen: unknown layout %q", o.Layout)
	}
	if hybrid(o.Family) {
		return o.normalizeHybrid()
	}
	if o.LinearKeyHeads != 0 || o.LinearValueHeads != 0 || o.LinearKeyDim != 0 || o.LinearValueDim != 0 || o.ConvKernel != 0 ||
		o.FullAttentionInterval != 0 || o.PartialRotary != 0 {
		return fmt.Errorf("modelgen: linear attention and partial rotary options are options of the hybrid families, not of %s", o.Family)
	}
	gemma, oss := o.Family == model.Gemma3 || o.Family == model.Gemma3Text, o.Family == model.GptOSS
	if !gemma && !oss {
		if (o.Layout != LayoutHF || o.NumExperts != 0) && !o.moe() || o.SlidingWindow != 0 || o.LayerTypes != nil || o.ExpertsMXFP4 || o.Yarn != nil {
			return fmt.Errorf("modelgen: layouts and experts are options of the mixture-of-experts families, gemma3 and gpt_oss; windows and yarn of gemma3 and gpt_oss; not of %s", o.Family)
		}
		return nil
	}
	if o.SlidingWindow == 0 && gemma {
		o.SlidingWindow = 8 // Tiny's shape: a 30-token test crosses it
	}
	if o.SlidingWindow <= 0 {
		return errors.New("modelgen: SlidingWindow must be positive")
	}
	if o.LayerTypes != nil && len(o.LayerTypes) != o.NumLayers {
		return fmt.Errorf("modelgen: %d LayerTypes for %d layers", len(o.LayerTypes), o.NumLayers)
	}
	if gemma {
		o.TieWordEmbeddings = true // Gemma's head is its embedding
		if o.SlidingPattern == 0 {
			o.SlidingPattern = 6
		}
		if o.RopeLocalBase == 0 {
			o.RopeLocalBase = 10000
		}
		if rs := o.RopeScaling; rs != nil && rs.Type != "linear" {
			return fmt.Errorf("modelgen: gemma3 takes linear rope scaling, not %q", rs.Type)
		}
		if o.NumExperts != 0 || o.ExpertsMXFP4 || o.Yarn != nil {
			return errors.New("modelgen: gemma3 has no experts and no yarn")
		}
		return nil
	}
	if o.NumExperts <= 0 || o.TopK <= 0 || o.TopK > o.NumExperts {
		return fmt.Errorf("modelgen: gpt_oss needs 0 < TopK <= NumExperts, got %d of %d", o.TopK, o.NumExperts)
	}
	if o.RopeScaling != nil {
		return errors.New("modelgen: gpt_oss takes Yarn, not RopeScaling")
	}
	if o.SinkStd == 0 {
		o.SinkStd = 2
	}
	if o.SwiGLULimit == 0 {
		o.SwiGLULimit = 7
	}
	if o.ExpertScale == 0 {
		o.ExpertScale = 6
	}
	if o.TieWordEmbeddings {
		return errors.New("modelgen: gpt_oss has an untied head")
	}
	if o.Layout == LayoutHF && o.Quantization != nil {
		return errors.New("modelgen: the Hugging Face gpt_oss layout has no MLX quantization (use LayoutMLX, or ExpertsMXFP4 for openai's mxfp4 experts)")
	}
	if o.ExpertsMXFP4 && (o.HiddenSize%32 != 0 || o.IntermediateSize%32 != 0) {
		return errors.New("modelgen: mxfp4 experts need HiddenSize and IntermediateSize multiples of 32")
	}
	if o.HiddenSize == 2*o.IntermediateSize || o.HiddenSize == o.IntermediateSize {
		// The loader tells transformers' [E, in, out] expert tensors from [E, out, in] by their shape.
		return errors.New("modelgen: gpt_oss needs HiddenSize ≠ IntermediateSize and ≠ 2·IntermediateSize")
	}
	return nil
}

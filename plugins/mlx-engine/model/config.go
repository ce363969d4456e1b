package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Family is a supported architecture family, named by config.json's model_type.
type Family string

// The supported families.
const (
	Llama   Family = "llama"
	Mistral Family = "mistral"
	Qwen2   Family = "qwen2"
	Qwen3   Family = "qwen3"
	// The mixture-of-experts families (familyDefs).
	Qwen3MoE Family = "qwen3_moe"
	Qwen2MoE Family = "qwen2_moe"
	Mixtral  Family = "mixtral"
	// Gemma3Text is gemma-3-1b and the text-only saves of the larger Gemma 3 models.
	Gemma3Text Family = "gemma3_text"
	// Gemma3 is a multimodal Gemma 3 checkpoint, of which duet serves the text part.
	Gemma3 Family = "gemma3"
	// GptOSS is OpenAI's gpt-oss (20b, 120b).
	GptOSS Family = "gpt_oss"
	// Qwen3Next is Qwen3-Next: Gated DeltaNet and gated attention layers, MoE with a shared expert.
	Qwen3Next Family = "qwen3_next"
	// Qwen35 is a Qwen3.5 dense model (multimodal config), of which duet serves the text part.
	Qwen35 Family = "qwen3_5"
	// Qwen35MoE is a Qwen3.5 / Qwen3.6 mixture-of-experts model (multimodal config), text part.
	Qwen35MoE Family = "qwen3_5_moe"
)

// Families lists the supported families (familyDefs): those whose config and weights Load reads and the
// backends run.
var Families = func() []Family {
	var fs []Family
	for _, d := range familyDefs {
		fs = append(fs, d.name)
	}
	return fs
}()

// Config is the part of config.json that determines the computation, with family defaults applied and
// derived values (HeadDim) filled in.
type Config struct {
	Family                Family
	HiddenSize            int
	IntermediateSize      int
	NumLayers             int
	NumHeads              int
	NumKVHeads            int
	HeadDim               int
	VocabSize             int
	RMSNormEps            float64
	RopeTheta             float64
	RopeScaling           *RopeScaling // nil: plain RoPE
	MaxPositionEmbeddings int
	// SlidingWindow is the attention window of mistral-style configs (0: none). The engine does not implement
	// windowed attention, so a model with a window is served with its context limited to the window, where
	// full and windowed attention agree; see MaxContext.
	SlidingWindow     int
	TieWordEmbeddings bool
	// AttentionBias: q, k and v projections carry biases (always for qwen2; llama/qwen3's attention_bias adds
	// one to o_proj as well, see OutputBias).
	AttentionBias bool
	OutputBias    bool
	MLPBias       bool
	QKNorm        bool // qwen3: RMSNorm over each head of q and k before RoPE
	BOSTokenID    *int
	EOSTokenIDs   []int
	TorchDType    string
	Quantization  *Quantization // nil: not quantized
	// Arch is the computation as blocks; the global fields above describe the first layer of models whose
	// layers differ.
	Arch Arch
	// embedScaleSqrtHidden: Arch.EmbedScale is sqrt(HiddenSize) rounded to the compute dtype, which Load learns
	// from the weights (ParseConfig rounds to torch_dtype).
	embedScaleSqrtHidden bool
}

// RopeScaling is a supported rope_scaling entry (type "llama3").
type RopeScaling struct {
	Type                          string
	Factor                        float64
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// MaxContext is the longest sequence the model computes correctly: max_position_embeddings, capped by the
// sliding window when there is one.
func (c *Config) MaxContext() int {
	n := c.MaxPositionEmbeddings
	if c.SlidingWindow > 0 && (n == 0 || c.SlidingWindow < n) {
		n = c.SlidingWindow
	}
	return n
}

// rawConfig mirrors config.json; pointers distinguish "absent" from zero.
type rawConfig struct {
	ModelType             string          `json:"model_type"`
	Architectures         []string        `json:"architectures"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	VocabSize             *int            `json:"vocab_size"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	SlidingWindow         *int            `json:"sliding_window"`
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	HiddenAct             string          `json:"hidden_act"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	TorchDType            string          `json:"torch_dtype"`
	DType                 string          `json:"dtype"`
	Quantization          json.RawMessage `json:"quantization"`
	QuantizationConfig    json.RawMessage `json:"quantization_config"`
	// Mixture of experts (qwen2_moe, qwen3_moe: num_experts; mixtral: num_local_experts).
	NumExperts                   *int  `json:"num_experts"`
	NumLocalExperts              *int  `json:"num_local_experts"`
	NumExpertsPerTok             *int  `json:"num_experts_per_tok"`
	MoEIntermediateSize          *int  `json:"moe_intermediate_size"`
	NormTopKProb                 *bool `json:"norm_topk_prob"`
	DecoderSparseStep            *int  `json:"decoder_sparse_step"`
	MLPOnlyLayers                []int `json:"mlp_only_layers"`
	SharedExpertIntermediateSize *int  `json:"shared_expert_intermediate_size"`
	// raw is the whole file, for the keys only one family reads.
	raw []byte
	// ext holds what a family's prepare read for its spec.
	ext any
	// family is the family model_type or architectures named, for prepare.
	family Family
}

// maxDim bounds every size in config.json so that a hostile file cannot make a backend allocate absurdly.
const maxDim = 1 << 24

// LoadConfig reads dir/config.json (and generation_config.json for extra EOS ids, when present).
func LoadConfig(dir string) (*Config, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	if g, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		var gen struct {
			EOSTokenID json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(g, &gen); err != nil {
			return nil, fmt.Errorf("model: %s: %w", filepath.Join(dir, "generation_config.json"), err)
		}
		ids, err := tokenIDs(gen.EOSTokenID)
		if err != nil {
			return nil, fmt.Errorf("model: %s: eos_token_id: %w", filepath.Join(dir, "generation_config.json"), err)
		}
		c.EOSTokenIDs = mergeIDs(c.EOSTokenIDs, ids)
	}
	return c, nil
}

// ParseConfig parses and validates the bytes of a config.json.
func ParseConfig(b []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("not a valid config: %w", err)
	}
	r.raw = b
	fam, err := family(&r)
	if err != nil {
		return nil, err
	}
	def := lookupFamily(fam)
	r.family = fam
	if def.prepare != nil {
		if err := def.prepare(&r); err != nil {
			return nil, err
		}
	}
	c := &Config{Family: fam, TorchDType: r.TorchDType}
	if c.TorchDType == "" {
		c.TorchDType = r.DType
	}
	req := func(name string, v *int, dst *int) error {
		if v == nil {
			return fmt.Errorf("%s is missing", name)
		}
		if *v <= 0 || *v > maxDim {
			return fmt.Errorf("%s = %d is out of range", name, *v)
		}
		*dst = *v
		return nil
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{
		{"hidden_size", r.HiddenSize, &c.HiddenSize},
		{"intermediate_size", r.IntermediateSize, &c.IntermediateSize},
		{"num_hidden_layers", r.NumHiddenLayers, &c.NumLayers},
		{"num_attention_heads", r.NumAttentionHeads, &c.NumHeads},
		{"vocab_size", r.VocabSize, &c.VocabSize},
	} {
		if err := req(f.name, f.v, f.dst); err != nil {
			return nil, err
		}
	}
	c.NumKVHeads = c.NumHeads
	if r.NumKeyValueHeads != nil {
		if err := req("num_key_value_heads", r.NumKeyValueHeads, &c.NumKVHeads); err != nil {
			return nil, err
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return nil, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if r.HeadDim != nil {
		if err := req("head_dim", r.HeadDim, &c.HeadDim); err != nil {
			return nil, err
		}
	} else {
		if c.HiddenSize%c.NumHeads != 0 {
			return nil, fmt.Errorf("hidden_size %d is not divisible by num_attention_heads %d and head_dim is not given", c.HiddenSize, c.NumHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("head_dim %d must be even for RoPE", c.HeadDim)
	}
	c.RMSNormEps = 1e-6
	if r.RMSNormEps != nil {
		c.RMSNormEps = *r.RMSNormEps
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return nil, fmt.Errorf("rms_norm_eps %g is out of range", c.RMSNormEps)
	}
	c.RopeTheta = 10000
	if fam == Qwen2 || fam == Qwen3 || fam == Qwen2MoE || fam == Mixtral {
		c.RopeTheta = 1000000
	}
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	}
	scaling := r.RopeScaling
	if isNull(scaling) && !isNull(r.RopeParameters) {
		// transformers v5 moves rope_theta and rope_scaling into rope_parameters.
		scaling = r.RopeParameters
		var p struct {
			RopeTheta *float64 `json:"rope_theta"`
		}
		if json.Unmarshal(scaling, &p) == nil && p.RopeTheta != nil && r.RopeTheta == nil {
			c.RopeTheta = *p.RopeTheta
		}
	}
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		return nil, fmt.Errorf("rope_theta %g is out of range", c.RopeTheta)
	}
	if c.RopeScaling, err = ropeScaling(scaling); err != nil {
		return nil, err
	}
	if r.MaxPositionEmbeddings != nil {
		if err := req("max_position_embeddings", r.MaxPositionEmbeddings, &c.MaxPositionEmbeddings); err != nil {
			return nil, err
		}
	}
	if r.HiddenAct != "" && r.HiddenAct != "silu" {
		return nil, fmt.Errorf("hidden_act %q is not supported (only silu)", r.HiddenAct)
	}
	switch fam {
	case Qwen2, Qwen3, Qwen2MoE, Qwen3MoE:
		// Qwen configs always carry a sliding_window size; it only applies when use_sliding_window is true.
		if r.UseSlidingWindow != nil && *r.UseSlidingWindow {
			return nil, errors.New("use_sliding_window is true: sliding-window attention is not supported for qwen models")
		}
	default:
		if r.SlidingWindow != nil && *r.SlidingWindow > 0 {
			c.SlidingWindow = *r.SlidingWindow
		}
	}
	c.TieWordEmbeddings = r.TieWordEmbeddings != nil && *r.TieWordEmbeddings
	bias := r.AttentionBias != nil && *r.AttentionBias
	switch fam {
	case Qwen2, Qwen2MoE:
		c.AttentionBias = true // Qwen2 always has q/k/v biases and never an o_proj bias
	default:
		c.AttentionBias, c.OutputBias = bias, bias
	}
	c.MLPBias = r.MLPBias != nil && *r.MLPBias
	c.QKNorm = fam == Qwen3 || fam == Qwen3MoE
	if !isNull(r.BOSTokenID) {
		ids, err := tokenIDs(r.BOSTokenID)
		if err != nil || len(ids) != 1 {
			return nil, fmt.Errorf("bos_token_id must be one token id, got %s", r.BOSTokenID)
		}
		c.BOSTokenID = &ids[0]
	}
	if c.EOSTokenIDs, err = tokenIDs(r.EOSTokenID); err != nil {
		return nil, fmt.Errorf("eos_token_id: %w", err)
	}
	q := r.Quantization
	if isNull(q) {
		q = r.QuantizationConfig
	}
	if c.Quantization, err = parseQuantization(q); err != nil {
		return nil, err
	}
	if def.spec != nil {
		if err := def.spec(&r, c); err != nil {
			return nil, err
		}
	} else {
		c.Arch = denseArch(c)
	}
	if err := c.Arch.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func family(r *rawConfig) (Family, error) {
	supported := fmt.Sprintf("supported: %v", Families)
	if r.ModelType != "" {
		for _, f := range Families {
			if Family(r.ModelType) == f {
				return f, nil
			}
		}
		return "", fmt.Errorf("unsupported architecture: model_type %q (%s)", r.ModelType, supported)
	}
	for _, a := range r.Architectures {
		for _, d := range familyDefs {
			for _, da := range d.architectures {
				if a == da {
					return d.name, nil
				}
			}
		}
	}
	if len(r.Architectures) > 0 {
		return "", fmt.Errorf("unsupported architecture: %v (%s)", r.Architectures, supported)
	}
	return "", fmt.Errorf("config names no model_type or architectures (%s)", supported)
}

func ropeScaling(raw json.RawMessage) (*RopeScaling, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s struct {
		RopeType                      string   `json:"rope_type"`
		Type                          string   `json:"type"`
		Factor                        *float64 `json:"factor"`
		LowFreqFactor                 *float64 `json:"low_freq_factor"`
		HighFreqFactor                *float64 `json:"high_freq_factor"`
		OriginalMaxPositionEmbeddings *int     `json:"original_max_position_embeddings"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("rope_scaling: %w", err)
	}
	t := s.RopeType
	if t == "" {
		t = s.Type
	}
	switch t {
	case "", "default":
		return nil, nil
	case "llama3":
	default:
		return nil, fmt.Errorf("rope_scaling type %q is not supported (supported: llama3)", t)
	}
	if s.Factor == nil || s.LowFreqFactor == nil || s.HighFreqFactor == nil || s.OriginalMaxPositionEmbeddings == nil {
		return nil, errors.New("rope_scaling llama3 needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings")
	}
	rs := &RopeScaling{Type: t, Factor: *s.Factor, LowFreqFactor: *s.LowFreqFactor, HighFreqFactor: *s.HighFreqFactor,
		OriginalMaxPositionEmbeddings: *s.OriginalMaxPositionEmbeddings}
	if !(rs.Factor >= 1) || !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor) || rs.OriginalMaxPositionEmbeddings <= 0 {
		return nil, fmt.Errorf("rope_scaling llama3 values out of range: %+v", *rs)
	}
	return rs, nil
}

// tokenIDs accepts a token id as JSON null, an integer or a list of integers.
func tokenIDs(raw json.RawMessage) ([]int, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		if one < 0 {
			return nil, fmt.Errorf("negative token id %d", one)
		}
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want an integer or a list of integers, got %s", raw)
	}
	for _, id := range many {
		if id < 0 {
			return nil, fmt.Errorf("negative token id %d", id)
		}
	}
	return mergeIDs(nil, many), nil
}

func mergeIDs(a, b []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, id := range append(append([]int(nil), a...), b...) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	sort.Ints(out)
	return out
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

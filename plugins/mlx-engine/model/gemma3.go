package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// Gemma 3 (transformers models/gemma3: configuration_gemma3.py, modeling_gemma3.py; mlx-lm gemma3_text.py).
// A gemma3_text layer is Llama's with four norms, all Gemma's (1+w) RMSNorm: input_layernorm before attention,
// post_attention_layernorm on its output, pre_feedforward_layernorm before the GeGLU MLP and
// post_feedforward_layernorm on its output; q_norm and k_norm over each head. Sliding layers attend over the
// last sliding_window positions with rope_local_base_freq, full ones over everything with rope_theta and
// rope_scaling; scores are scaled by query_pre_attn_scalar^-0.5 and embeddings by sqrt(hidden_size) rounded
// to the compute dtype; the head is tied. A multimodal gemma3 config nests these keys under text_config with
// most of them left to Gemma3TextConfig's defaults.

// gemma3Keys are the config keys only Gemma 3 reads.
type gemma3Keys struct {
	TextConfig            json.RawMessage `json:"text_config"`
	QueryPreAttnScalar    *float64        `json:"query_pre_attn_scalar"`
	RopeLocalBaseFreq     *float64        `json:"rope_local_base_freq"`
	SlidingWindowPattern  *int            `json:"sliding_window_pattern"`
	LayerTypes            []string        `json:"layer_types"`
	HiddenActivation      *string         `json:"hidden_activation"`
	AttnLogitSoftcapping  json.RawMessage `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping json.RawMessage `json:"final_logit_softcapping"`
	UseBidirectionalAttn  *bool           `json:"use_bidirectional_attention"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	SlidingWindow         *int            `json:"sliding_window"`
	HiddenAct             *string         `json:"hidden_act"`
}

// gemma3Ext is what gemma3Prepare hands to gemma3Spec.
type gemma3Ext struct {
	scalar             float64
	window             int
	sliding            []bool
	fullRope, slideRop *ropeEntry
	localBase          float64
}

// Layer kinds of layer_types.
const (
	fullAttention    = "full_attention"
	slidingAttention = "sliding_attention"
)

// setDefault points *p at v when config.json left the key out.
func setDefault[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}

// positiveKey is config.json's key name (p), def when it is absent; it must be positive and finite.
func positiveKey(name string, p *float64, def float64) (float64, error) {
	v := def
	if p != nil {
		v = *p
	}
	if !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s %g is out of range", name, v)
	}
	return v, nil
}

// windowKey is config.json's sliding_window (p), def when it is absent.
func windowKey(p *int, def int) (int, error) {
	w := def
	if p != nil {
		w = *p
	}
	if w <= 0 || w > maxDim {
		return 0, fmt.Errorf("sliding_window %d is out of range", w)
	}
	return w, nil
}

// slidingByType is, for each of n layers, whether config.json's layer_types gives it a sliding window.
func slidingByType(types []string, n int) ([]bool, error) {
	if len(types) != n {
		return nil, fmt.Errorf("layer_types has %d entries for %d layers", len(types), n)
	}
	sliding := make([]bool, 0, n)
	for i, t := range types {
		switch t {
		case fullAttention, slidingAttention:
			sliding = append(sliding, t == slidingAttention)
		default:
			return nil, fmt.Errorf("layer_types[%d] = %q is not supported (supported: %s, %s)", i, t, fullAttention, slidingAttention)
		}
	}
	return sliding, nil
}

func gemma3Prepare(r *rawConfig) error {
	var k gemma3Keys
	if err := json.Unmarshal(r.raw, &k); err != nil {
		return fmt.Errorf("not a valid config: %w", err)
	}
	if !isNull(k.TextConfig) {
		// The text model's keys override the top level's; ids and dtype stay the top level's when it has them.
		// Copies: unmarshalling into a RawMessage reuses its bytes.
		bos, eos := bytes.Clone(r.BOSTokenID), bytes.Clone(r.EOSTokenID)
		q, qc := bytes.Clone(r.Quantization), bytes.Clone(r.QuantizationConfig)
		dt, dt2 := r.TorchDType, r.DType
		if err := json.Unmarshal(k.TextConfig, r); err != nil {
			return fmt.Errorf("text_config: %w", err)
		}
		if err := json.Unmarshal(k.TextConfig, &k); err != nil {
			return fmt.Errorf("text_config: %w", err)
		}
		for _, keep := range []struct {
			top json.RawMessage
			dst *json.RawMessage
		}{{bos, &r.BOSTokenID}, {eos, &r.EOSTokenID}, {q, &r.Quantization}, {qc, &r.QuantizationConfig}} {
			if !isNull(keep.top) {
				*keep.dst = keep.top
			}
		}
		if dt != "" {
			r.TorchDType = dt
		}
		if dt2 != "" {
			r.DType = dt2
		}
	}
	// Gemma3TextConfig's defaults.
	setDefault(&r.HiddenSize, 2304)
	setDefault(&r.IntermediateSize, 9216)
	setDefault(&r.NumHiddenLayers, 26)
	setDefault(&r.NumAttentionHeads, 8)
	setDefault(&r.NumKeyValueHeads, 4)
	setDefault(&r.HeadDim, 256)
	setDefault(&r.VocabSize, 262208)
	setDefault(&r.MaxPositionEmbeddings, 131072)
	setDefault(&r.RMSNormEps, 1e-6)
	theta := 1e6
	if r.RopeTheta != nil {
		theta = *r.RopeTheta
	}
	setDefault(&r.TieWordEmbeddings, true)
	if isNull(r.BOSTokenID) {
		r.BOSTokenID = json.RawMessage("2")
	}
	if isNull(r.EOSTokenID) {
		r.EOSTokenID = json.RawMessage("1")
	}

	// Keys that change the computation and that the blocks do not implement.
	if !isNull(k.AttnLogitSoftcapping) {
		return fmt.Errorf("attn_logit_softcapping = %s is not supported (only null)", k.AttnLogitSoftcapping)
	}
	if !isNull(k.FinalLogitSoftcapping) {
		return fmt.Errorf("final_logit_softcapping = %s is not supported (only null)", k.FinalLogitSoftcapping)
	}
	if k.UseBidirectionalAttn != nil && *k.UseBidirectionalAttn {
		return errors.New("use_bidirectional_attention is true: bidirectional attention (EmbeddingGemma) is not supported")
	}
	act := "gelu_pytorch_tanh"
	if k.HiddenActivation != nil {
		act = *k.HiddenActivation
	} else if k.HiddenAct != nil {
		act = *k.HiddenAct
	}
	if act != "gelu_pytorch_tanh" {
		return fmt.Errorf("hidden_activation %q is not supported (only gelu_pytorch_tanh)", act)
	}
	r.HiddenAct = "" // read here; the common check knows only silu

	ext := &gemma3Ext{scalar: 256, window: 4096, localBase: 10000}
	var err error
	if ext.scalar, err = positiveKey("query_pre_attn_scalar", k.QueryPreAttnScalar, ext.scalar); err != nil {
		return err
	}
	if ext.window, err = windowKey(k.SlidingWindow, ext.window); err != nil {
		return err
	}
	if k.RopeLocalBaseFreq != nil {
		ext.localBase = *k.RopeLocalBaseFreq
	}
	n := *r.NumHiddenLayers
	if n <= 0 || n > maxDim {
		return fmt.Errorf("num_hidden_layers = %d is out of range", n)
	}
	if k.LayerTypes != nil {
		if ext.sliding, err = slidingByType(k.LayerTypes, n); err != nil {
			return err
		}
	} else {
		pattern := 6
		if k.SlidingWindowPattern != nil {
			pattern = *k.SlidingWindowPattern
		}
		if pattern <= 0 {
			return fmt.Errorf("sliding_window_pattern %d is out of range", pattern)
		}
		for i := range n {
			ext.sliding = append(ext.sliding, (i+1)%pattern != 0)
		}
	}
	if !isNull(k.RopeParameters) && isNull(k.RopeScaling) {
		// transformers v5: {"full_attention": {...}, "sliding_attention": {...}}.
		var byKind map[string]json.RawMessage
		if err := json.Unmarshal(k.RopeParameters, &byKind); err != nil {
			return fmt.Errorf("rope_parameters: %w", err)
		}
		if _, nested := byKind[fullAttention]; nested {
			if ext.fullRope, err = parseRopeEntry("rope_parameters."+fullAttention, byKind[fullAttention]); err != nil {
				return err
			}
			if ext.slideRop, err = parseRopeEntry("rope_parameters."+slidingAttention, byKind[slidingAttention]); err != nil {
				return err
			}
		} else if ext.fullRope, err = parseRopeEntry("rope_parameters", k.RopeParameters); err != nil {
			return err
		}
	} else if ext.fullRope, err = parseRopeEntry("rope_scaling", k.RopeScaling); err != nil {
		return err
	}
	if ext.fullRope.RopeTheta == nil {
		ext.fullRope.RopeTheta = &theta
	}
	if ext.slideRop == nil {
		ext.slideRop = &ropeEntry{RopeTheta: &ext.localBase}
	} else if ext.slideRop.RopeTheta == nil {
		ext.slideRop.RopeTheta = &ext.localBase
	}
	// Read here: the common code would take sliding_window for a context cap and rope_scaling for llama3.
	r.RopeScaling, r.RopeParameters, r.SlidingWindow = nil, nil, nil
	r.ext = ext
	return nil
}

func gemma3Spec(r *rawConfig, c *Config) error {
	ext := r.ext.(*gemma3Ext)
	full, err := ext.fullRope.spec("rope_scaling", c.RopeTheta, c.HeadDim, RopeDefault, RopeLinear)
	if err != nil {
		return err
	}
	slide, err := ext.slideRop.spec("rope_local_base_freq", ext.localBase, c.HeadDim, RopeDefault, RopeLinear)
	if err != nil {
		return err
	}
	c.RopeTheta = full.Base
	norm := NormSpec{Kind: NormRMSPlusOne, Eps: c.RMSNormEps}
	c.embedScaleSqrtHidden = true
	a := Arch{Hidden: c.HiddenSize, Vocab: c.VocabSize, FinalNorm: norm, TiedHead: c.TieWordEmbeddings,
		EmbedScale: float64(torchDType(c.TorchDType).Round(float32(math.Sqrt(float64(c.HiddenSize))))),
		Layers:     make([]LayerSpec, c.NumLayers)}
	for i := range a.Layers {
		l := &a.Layers[i]
		n0, n1, n2, n3, qk := norm, norm, norm, norm, norm
		l.AttnIn, l.AttnOut, l.FFNIn, l.FFNOut = &n0, &n1, &n2, &n3
		l.Attn = AttnSpec{Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
			QBias: c.AttentionBias, KBias: c.AttentionBias, VBias: c.AttentionBias, OBias: c.AttentionBias,
			QKNorm: &qk, Rope: full, Scale: 1 / math.Sqrt(ext.scalar)}
		if ext.sliding[i] {
			l.Attn.Rope, l.Attn.Window = slide, ext.window
		}
		l.FFN = FFNSpec{Kind: FFNDense, Act: ActGELUTanh, Intermediate: c.IntermediateSize}
	}
	c.QKNorm = true
	c.OutputBias = c.AttentionBias
	c.Arch = a
	return nil
}

// torchDType is the dtype config.json names, bfloat16 (Gemma's) when it names none the engine knows.
func torchDType(s string) dtype.DType {
	if d, err := dtype.Parse(s); err == nil {
		return d
	}
	return dtype.BFloat16
}

// gemma3Prefixes: transformers ≥ 4.5x saves the text model under model.language_model., older saves and
// mlx-vlm's conversions under language_model.model.; a text-only save of a multimodal config uses model.
var gemma3Prefixes = []string{"model.language_model.", "language_model.model.", "model."}

// gemma3Ignore leaves a multimodal checkpoint's vision tower and projector unbound (quantized or not), and a
// tied head saved under the language model.
func gemma3Ignore(name string) bool {
	for _, p := range []string{"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.",
		"language_model.lm_head."} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// gemma3Layer binds the Llama names, then moves post_attention_layernorm to the attention's output slot and
// adds the feed-forward's pre and post norms.
func gemma3Layer(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error {
	if err := b.denseLayer(l, spec, p, hidden); err != nil {
		return err
	}
	l.AttnOut = l.FFNIn
	var err error
	if l.FFNIn, err = b.vector(p+"pre_feedforward_layernorm.weight", hidden); err != nil {
		return err
	}
	l.FFNOut, err = b.vector(p+"post_feedforward_layernorm.weight", hidden)
	return err
}

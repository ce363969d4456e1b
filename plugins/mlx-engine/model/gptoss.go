package model

import (
	"encoding/json"
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// gpt-oss (transformers models/gpt_oss: configuration_gpt_oss.py, modeling_gpt_oss.py; mlx-lm gpt_oss.py).
// A layer is Llama's pre-norm layer with biased q/k/v/o projections, a learned sink logit per head, yarn RoPE
// and, by layer_types, a sliding window of sliding_window positions on every other layer; its feed-forward
// block is a mixture of experts routed by a biased router whose top-k logits are softmaxed, each expert a
// clamped SwiGLU with biases. Checkpoints come in three expert layouts, all bound here:
//
//   - openai's (the Hugging Face repository): mlp.experts.gate_up_proj_blocks [E, 2I, H/32, 16] U8 with
//     _scales [E, 2I, H/32] U8 (mxfp4) and _bias [E, 2I], gate and up rows interleaved; down_proj_* likewise;
//   - transformers-saved float: mlp.experts.gate_up_proj [E, H, 2I] (input-major, columns interleaved) and
//     down_proj [E, I, H], transposed into owned buffers at load;
//   - mlx-community's (mlx-lm's sanitize): mlp.experts.{gate,up,down}_proj.{weight,scales,bias} stacked over
//     experts, mxfp4 or affine per the quantization entry of each module, or float.

// gptossKeys are the config keys only gpt-oss reads.
type gptossKeys struct {
	NumLocalExperts  *int            `json:"num_local_experts"`
	NumExpertsPerTok *int            `json:"num_experts_per_tok"`
	ExpertsPerToken  *int            `json:"experts_per_token"`
	SwigluLimit      *float64        `json:"swiglu_limit"`
	LayerTypes       []string        `json:"layer_types"`
	SlidingWindow    *int            `json:"sliding_window"`
	RopeScaling      json.RawMessage `json:"rope_scaling"`
	RopeParameters   json.RawMessage `json:"rope_parameters"`
}

type gptossExt struct {
	experts, topK int
	limit         float64
	window        int
	sliding       []bool
	rope          *ropeEntry
}

// gptossAlpha is the clamped SwiGLU's sigmoid scale, a constant of the modeling code.
const gptossAlpha = 1.702

func gptossPrepare(r *rawConfig) error {
	var k gptossKeys
	if err := json.Unmarshal(r.raw, &k); err != nil {
		return fmt.Errorf("not a valid config: %w", err)
	}
	// GptOssConfig's defaults.
	setDefault(&r.NumHiddenLayers, 36)
	setDefault(&r.VocabSize, 201088)
	setDefault(&r.HiddenSize, 2880)
	setDefault(&r.IntermediateSize, 2880)
	setDefault(&r.HeadDim, 64)
	setDefault(&r.NumAttentionHeads, 64)
	setDefault(&r.NumKeyValueHeads, 8)
	setDefault(&r.MaxPositionEmbeddings, 131072)
	setDefault(&r.RMSNormEps, 1e-5)
	setDefault(&r.RopeTheta, 150000.0)
	setDefault(&r.AttentionBias, true)
	ext := &gptossExt{experts: 128, topK: 4, limit: 7, window: 128}
	if k.NumLocalExperts != nil {
		ext.experts = *k.NumLocalExperts
	}
	if k.NumExpertsPerTok != nil {
		ext.topK = *k.NumExpertsPerTok
	} else if k.ExpertsPerToken != nil {
		ext.topK = *k.ExpertsPerToken
	}
	if ext.experts <= 0 || ext.experts > 1<<16 || ext.topK <= 0 || ext.topK > ext.experts {
		return fmt.Errorf("num_local_experts %d and num_experts_per_tok %d are out of range", ext.experts, ext.topK)
	}
	var err error
	if ext.limit, err = positiveKey("swiglu_limit", k.SwigluLimit, ext.limit); err != nil {
		return err
	}
	if ext.window, err = windowKey(k.SlidingWindow, ext.window); err != nil {
		return err
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
		// GptOssConfig (and mlx-lm): sliding, full, sliding, full, ...
		for i := range n {
			ext.sliding = append(ext.sliding, i%2 == 0)
		}
	}
	rope := k.RopeScaling
	if isNull(rope) && !isNull(k.RopeParameters) {
		rope = k.RopeParameters
	}
	if rope == nil && k.RopeParameters == nil {
		// Absent: GptOssConfig's default argument. An explicit null is plain RoPE.
		rope = json.RawMessage(`{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
			"truncate": false, "original_max_position_embeddings": 4096}`)
	}
	if ext.rope, err = parseRopeEntry("rope_scaling", rope); err != nil {
		return err
	}
	if isNull(r.Quantization) && !isNull(r.QuantizationConfig) {
		// openai's checkpoint: {"quant_method": "mxfp4", "modules_to_not_convert": [...]}. Its experts'
		// _blocks/_scales say what they are; everything else is float.
		var qc struct {
			QuantMethod string `json:"quant_method"`
		}
		if json.Unmarshal(r.QuantizationConfig, &qc) == nil && qc.QuantMethod == ModeMXFP4 {
			r.QuantizationConfig = nil
		}
	}
	r.RopeScaling, r.RopeParameters, r.SlidingWindow = nil, nil, nil
	r.ext = ext
	return nil
}

func gptossSpec(r *rawConfig, c *Config) error {
	ext := r.ext.(*gptossExt)
	rope, err := ext.rope.spec("rope_scaling", c.RopeTheta, c.HeadDim, RopeDefault, RopeYarn)
	if err != nil {
		return err
	}
	c.OutputBias = c.AttentionBias
	a := preNormArch(c, NormSpec{Kind: NormRMS, Eps: c.RMSNormEps}, rope)
	for i := range a.Layers {
		l := &a.Layers[i]
		l.Attn.Sinks = true
		if ext.sliding[i] {
			l.Attn.Window = ext.window
		}
		l.FFN = FFNSpec{Kind: FFNMoE, Act: ActClampedSwiGLU, Alpha: gptossAlpha, Limit: ext.limit,
			MoE: &MoESpec{Experts: ext.experts, TopK: ext.topK, Intermediate: c.IntermediateSize,
				Order: TopKThenSoftmax, RouterBias: true, ExpertBias: true}}
	}
	c.Arch = a
	return nil
}

// gptossLayer binds one gpt-oss layer in any of the three layouts.
func gptossLayer(b *binder, l *Layer, spec *LayerSpec, p string, hidden int) error {
	at, moe := &spec.Attn, spec.FFN.MoE
	l.MoE = &MoE{}
	err := b.layerSteps(l, spec, p, hidden, []func() error{
		func() (err error) { l.Attn.Sinks, err = b.vector(p+"self_attn.sinks", at.Heads); return },
		func() (err error) {
			l.MoE.Router, err = b.linear(p+"mlp.router", moe.Experts, hidden, moe.RouterBias)
			return
		},
	})
	if err != nil {
		return err
	}
	E, I := moe.Experts, moe.Intermediate
	ex := p + "mlp.experts."
	switch {
	case b.has(ex + "gate_up_proj_blocks"):
		l.MoE.Interleaved = true
		if l.MoE.GateUp, err = b.gptossBlocks(ex+"gate_up_proj", E, 2*I, hidden); err != nil {
			return err
		}
	case b.has(ex + "gate_up_proj"):
		l.MoE.Interleaved = true
		if l.MoE.GateUp, err = b.gptossFloat(ex+"gate_up_proj", E, 2*I, hidden); err != nil {
			return err
		}
	default:
		if l.MoE.Gate, err = b.gptossStacked(ex+"gate_proj", E, I, hidden); err != nil {
			return err
		}
		if l.MoE.Up, err = b.gptossStacked(ex+"up_proj", E, I, hidden); err != nil {
			return err
		}
	}
	switch {
	case b.has(ex + "down_proj_blocks"):
		l.MoE.Down, err = b.gptossBlocks(ex+"down_proj", E, hidden, I)
	case b.has(ex + "down_proj"):
		l.MoE.Down, err = b.gptossFloat(ex+"down_proj", E, hidden, I)
	default:
		l.MoE.Down, err = b.gptossStacked(ex+"down_proj", E, hidden, I)
	}
	return err
}

func (b *binder) has(name string) bool {
	_, ok := b.tensors[name]
	return ok
}

// gptossBias binds an experts' bias [E, out].
func (b *binder) gptossBias(name string, E, out int) (*safetensors.Tensor, error) {
	t, err := b.get(name)
	if err != nil {
		return nil, err
	}
	if _, err := floatDType(t); err != nil {
		return nil, err
	}
	if !sameShape(t.Shape, []int{E, out}) {
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d]", name, t.Shape, E, out)
	}
	return t, nil
}

// gptossBlocks binds openai's mxfp4 experts, base+"_blocks" [E, out, in/32, 16] U8, base+"_scales"
// [E, out, in/32] U8 and base+"_bias" [E, out], zero copy: the blocks are MLX's packed words byte for byte.
func (b *binder) gptossBlocks(base string, E, out, in int) (*Experts, error) {
	blocks, err := b.get(base + "_blocks")
	if err != nil {
		return nil, err
	}
	if in%32 != 0 {
		return nil, fmt.Errorf("tensor %q: mxfp4 input size %d is not a multiple of 32", blocks.Name, in)
	}
	if blocks.DType != safetensors.U8 || !sameShape(blocks.Shape, []int{E, out, in / 32, 16}) {
		return nil, fmt.Errorf("tensor %q is %s %v, want U8 [%d %d %d 16] (mxfp4 blocks)", blocks.Name, blocks.DType, blocks.Shape, E, out, in/32)
	}
	scales, err := b.get(base + "_scales")
	if err != nil {
		return nil, err
	}
	if scales.DType != safetensors.U8 || !sameShape(scales.Shape, []int{E, out, in / 32}) {
		return nil, fmt.Errorf("tensor %q is %s %v, want U8 [%d %d %d] (mxfp4 e8m0 scales)", scales.Name, scales.DType, scales.Shape, E, out, in/32)
	}
	bias, err := b.gptossBias(base+"_bias", E, out)
	if err != nil {
		return nil, err
	}
	w := &safetensors.Tensor{Name: blocks.Name, DType: safetensors.U32, Shape: []int{E, out, in / 8}, Data: blocks.Data}
	stacked := &Linear{Name: base, Out: E * out, In: in, Weight: w,
		Quant: &Quant{QuantParams: QuantParams{GroupSize: 32, Bits: 4, Mode: ModeMXFP4}, Scales: scales}}
	return newStackedExperts(base, stacked, bias, E, out, in), nil
}

// gptossFloat binds transformers' float experts, base [E, in, out] (input-major: the layout of torch.bmm(x, W))
// and base+"_bias" [E, out], by transposing each expert into an owned [out, in] buffer. A file already in
// [E, out, in] is taken as it is (out ≠ in in every real config, so the shape tells them apart).
func (b *binder) gptossFloat(base string, E, out, in int) (*Experts, error) {
	t, err := b.get(base)
	if err != nil {
		return nil, err
	}
	if _, err := floatDType(t); err != nil {
		return nil, err
	}
	bias, err := b.gptossBias(base+"_bias", E, out)
	if err != nil {
		return nil, err
	}
	w := t
	switch {
	case sameShape(t.Shape, []int{E, in, out}):
		sz := t.DType.Size()
		data := make([]byte, len(t.Data))
		for e := range E {
			src, dst := t.Data[e*in*out*sz:(e+1)*in*out*sz], data[e*in*out*sz:(e+1)*in*out*sz]
			for i := range in {
				for o := range out {
					copy(dst[(o*in+i)*sz:(o*in+i+1)*sz], src[(i*out+o)*sz:(i*out+o+1)*sz])
				}
			}
		}
		w = &safetensors.Tensor{Name: t.Name, DType: t.DType, Shape: []int{E, out, in}, Data: data}
	case sameShape(t.Shape, []int{E, out, in}):
	default:
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d %d] (or [%d %d %d])", t.Name, t.Shape, E, in, out, E, out, in)
	}
	return newStackedExperts(base, &Linear{Name: base, Out: E * out, In: in, Weight: w}, bias, E, out, in), nil
}

// gptossStacked binds mlx-community's experts: path+".weight" [E, out, in] float, or packed with
// path+".scales" (and path+".biases" when affine) per the module's quantization entry, and path+".bias".
func (b *binder) gptossStacked(path string, E, out, in int) (*Experts, error) {
	w, err := b.get(path + ".weight")
	if err != nil {
		return nil, err
	}
	bias, err := b.gptossBias(path+".bias", E, out)
	if err != nil {
		return nil, err
	}
	l := &Linear{Name: path, Out: E * out, In: in, Weight: w}
	params, quantized, explicit := b.quant.For(path)
	if quantized && !explicit {
		quantized = b.has(path + ".scales")
	}
	switch {
	case !quantized && w.DType == safetensors.U32:
		return nil, fmt.Errorf("missing tensor %q (module %q has packed U32 weights, so it is quantized)", path+".scales", path)
	case !quantized:
		if _, err := floatDType(w); err != nil {
			return nil, err
		}
		if !sameShape(w.Shape, []int{E, out, in}) {
			return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d %d]", w.Name, w.Shape, E, out, in)
		}
	case w.DType != safetensors.U32:
		return nil, fmt.Errorf("tensor %q is %s, but quantized weights are packed into U32", w.Name, w.DType)
	case params.Mode == ModeMXFP4:
		if l.Quant, err = b.mxfp4(path, w, []int{E}, out, in); err != nil {
			return nil, err
		}
	default:
		if in%params.GroupSize != 0 || in*params.Bits%32 != 0 {
			return nil, fmt.Errorf("module %q: input size %d does not divide into groups of %d / words of %d-bit values", path, in, params.GroupSize, params.Bits)
		}
		if !sameShape(w.Shape, []int{E, out, in * params.Bits / 32}) {
			return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d %d] (%d-bit packed)", w.Name, w.Shape, E, out, in*params.Bits/32, params.Bits)
		}
		q := &Quant{QuantParams: params}
		for _, s := range []struct {
			dst  **safetensors.Tensor
			name string
		}{{&q.Scales, path + ".scales"}, {&q.Biases, path + ".biases"}} {
			if *s.dst, err = b.get(s.name); err != nil {
				return nil, fmt.Errorf("%w (module %q is quantized)", err, path)
			}
			if _, err := floatDType(*s.dst); err != nil {
				return nil, err
			}
			if !sameShape((*s.dst).Shape, []int{E, out, in / params.GroupSize}) {
				return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d %d] (group size %d)", s.name, (*s.dst).Shape, E, out, in/params.GroupSize, params.GroupSize)
			}
		}
		if q.Scales.DType != q.Biases.DType {
			return nil, fmt.Errorf("module %q: scales are %s but biases are %s", path, q.Scales.DType, q.Biases.DType)
		}
		l.Quant = q
	}
	return newStackedExperts(path, l, bias, E, out, in), nil
}

// newStackedExperts makes the per-expert views of a stacked [E·out, in] module: expert e's rows, scales and
// biases are the e-th of E equal slices of each tensor's bytes (no copy). The experts' output bias stays in
// Experts.Bias, not in the views.
func newStackedExperts(name string, stacked *Linear, bias *safetensors.Tensor, E, out, in int) *Experts {
	x := &Experts{Name: name, E: E, Out: out, In: in, Stacked: stacked, Bias: bias, Each: make([]Linear, E)}
	view := func(t *safetensors.Tensor, e int) *safetensors.Tensor {
		if t == nil {
			return nil
		}
		n := len(t.Data) / E
		return &safetensors.Tensor{Name: fmt.Sprintf("%s[%d]", t.Name, e), DType: t.DType,
			Shape: append([]int(nil), t.Shape[1:]...), Data: t.Data[e*n : (e+1)*n : (e+1)*n]}
	}
	for e := range E {
		l := Linear{Name: fmt.Sprintf("%s.%d", name, e), Out: out, In: in, Weight: view(stacked.Weight, e)}
		if q := stacked.Quant; q != nil {
			l.Quant = &Quant{QuantParams: q.QuantParams, Scales: view(q.Scales, e), Biases: view(q.Biases, e)}
		}
		x.Each[e] = l
	}
	return x
}

package modelgen

import (
	"fmt"
	"math"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// matrix describes one generated weight: a linear layer's [out, in] matrix, or a vector when in == 0.
type matrix struct {
	module  string // module path ("model.layers.0.self_attn.q_proj"); vectors use their full tensor name
	out, in int
	experts int                 // > 0: a stack of that many [out, in] matrices, one tensor [experts, out, in]
	values  func(dst []float32) // fills max(experts,1)*out*in (or out) float32 values
	linear  bool                // quantizable
	suffix  string              // ".weight", ".bias", or "" for vectors named in full
	// emit, when set, writes the module's tensors itself: layouts that are not one tensor per matrix
	// (openai's fused, interleaved gpt-oss experts).
	emit func(add addFunc) error
}

type addFunc func(name string, dt safetensors.DType, shape []int, fill func([]byte) error) error

// weights lists every tensor of the model in a fixed order with deterministic contents.
func (g *generator) weights() []matrix {
	switch g.o.Family {
	case model.Gemma3, model.Gemma3Text:
		return g.gemma3Weights()
	case model.GptOSS:
		return g.gptossWeights()
	case model.Qwen3Next, model.Qwen35, model.Qwen35MoE:
		return g.hybridWeights()
	}
	o := &g.o
	h, qDim, kvDim := o.HiddenSize, o.NumHeads*o.HeadDim, o.NumKVHeads*o.HeadDim
	resid := float32(o.ResidualScale)
	var ms []matrix
	lin, vec := g.fillers(&ms, nil)
	ms = append(ms, matrix{module: "model.embed_tokens", out: o.VocabSize, in: h, linear: true, suffix: ".weight", values: g.embedding})
	for i := 0; i < o.NumLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		vec(p+"input_layernorm.weight", h, 1, 0.1)
		vec(p+"post_attention_layernorm.weight", h, 1, 0.1)
		lin(p+"self_attn.q_proj", qDim, h, invSqrt(h))
		lin(p+"self_attn.k_proj", kvDim, h, invSqrt(h))
		lin(p+"self_attn.v_proj", kvDim, h, invSqrt(h))
		lin(p+"self_attn.o_proj", h, qDim, resid*invSqrt(qDim))
		base := baseFamily(o.Family)
		if base == model.Qwen2 {
			for _, n := range []string{"q_proj", "k_proj", "v_proj"} {
				out := kvDim
				if n == "q_proj" {
					out = qDim
				}
				vec(p+"self_attn."+n+".bias", out, 0, 0.1)
			}
		}
		if base == model.Qwen3 {
			vec(p+"self_attn.q_norm.weight", o.HeadDim, 1, 0.1)
			vec(p+"self_attn.k_norm.weight", o.HeadDim, 1, 0.1)
		}
		if !o.sparse(i) {
			lin(p+"mlp.gate_proj", o.IntermediateSize, h, invSqrt(h))
			lin(p+"mlp.up_proj", o.IntermediateSize, h, invSqrt(h))
			lin(p+"mlp.down_proj", h, o.IntermediateSize, resid*invSqrt(o.IntermediateSize))
			continue
		}
		ms = append(ms, g.moeWeights(p, resid)...)
	}
	if o.TieWordEmbeddings {
		// The output layer is the embedding itself; a zero-mean final norm keeps the model from simply
		// predicting its current token again (E·diag(g)·E[t] has no bias towards t when g averages zero).
		vec("model.norm.weight", h, 0, 1)
	} else {
		vec("model.norm.weight", h, 1, 0.1)
		ms = append(ms, matrix{module: "lm_head", out: o.VocabSize, in: h, linear: true, suffix: ".weight", values: g.outputLayer})
	}
	return ms
}

// invSqrt is 1/√n: the standard deviation of a weight that keeps a sum over n unit inputs at unit scale.
func invSqrt(n int) float32 { return float32(1 / math.Sqrt(float64(n))) }

// fillers are the two ways a weights list adds a tensor, appending to *ms: lin, a linear module's .weight
// (normal, mean 0); vec, a named vector. Values are seeded by the name, or by seed(name) when seed is given.
func (g *generator) fillers(ms *[]matrix, seed func(string) string) (lin func(module string, out, in int, std float32), vec func(name string, n int, mean, std float32)) {
	if seed == nil {
		seed = func(name string) string { return name }
	}
	lin = func(module string, out, in int, std float32) {
		*ms = append(*ms, matrix{module: module, out: out, in: in, linear: true, suffix: ".weight", values: g.normal(seed(module)+".weight", std, 0)})
	}
	vec = func(name string, n int, mean, std float32) {
		*ms = append(*ms, matrix{module: name, out: n, values: g.normal(seed(name), std, mean)})
	}
	return lin, vec
}

// moeWeights are the router, experts and shared expert of the sparse layer at module path p. An expert's
// values are seeded by its Hugging Face name whatever the layout, so both layouts of a seed hold the same model.
func (g *generator) moeWeights(p string, resid float32) []matrix {
	o := &g.o
	h, inter, e := o.HiddenSize, o.MoEIntermediate, o.NumExperts
	moe, each := p+"mlp.", "experts"
	names := [3]string{"gate_proj", "up_proj", "down_proj"}
	if o.Family == model.Mixtral {
		moe = p + "block_sparse_moe."
		names = [3]string{"w1", "w3", "w2"}
	}
	router := moe + "gate"
	// Router logits of about unit spread, so that the top k changes from token to token.
	var ms []matrix
	ms = append(ms, matrix{module: router, out: e, in: h, linear: true, suffix: ".weight", values: func(dst []float32) {
		g.normal(router+".weight", invSqrt(h), 0)(dst)
		if o.RouterTies {
			copy(dst[h:2*h], dst[:h])
		}
	}})
	shapes := [3][2]int{{inter, h}, {inter, h}, {h, inter}}
	stds := [3]float32{invSqrt(h), invSqrt(h), resid * invSqrt(inter)}
	for i, stacked := range [3]string{"gate_proj", "up_proj", "down_proj"} {
		out, in, std := shapes[i][0], shapes[i][1], stds[i]
		hf := func(x int) string { return fmt.Sprintf("%s%s.%d.%s", moe, each, x, names[i]) }
		if o.Layout == LayoutMLX {
			ms = append(ms, matrix{module: moe + "switch_mlp." + stacked, out: out, in: in, linear: true, suffix: ".weight",
				experts: e, values: func(dst []float32) {
					for x := range e {
						g.normal(hf(x)+".weight", std, 0)(dst[x*out*in : (x+1)*out*in])
					}
				}})
			continue
		}
		for x := range e {
			ms = append(ms, matrix{module: hf(x), out: out, in: in, linear: true, suffix: ".weight", values: g.normal(hf(x)+".weight", std, 0)})
		}
	}
	if si := o.SharedIntermediate; si > 0 && o.Family == model.Qwen2MoE {
		sh := moe + "shared_expert."
		for _, l := range []struct {
			name    string
			out, in int
			std     float32
		}{{"gate_proj", si, h, invSqrt(h)}, {"up_proj", si, h, invSqrt(h)}, {"down_proj", h, si, resid * invSqrt(si)}} {
			ms = append(ms, matrix{module: sh + l.name, out: l.out, in: l.in, linear: true, suffix: ".weight", values: g.normal(sh+l.name+".weight", l.std, 0)})
		}
		ms = append(ms, matrix{module: moe + "shared_expert_gate", out: 1, in: h, linear: true, suffix: ".weight",
			values: g.normal(moe+"shared_expert_gate.weight", invSqrt(h), 0)})
	}
	return ms
}

// normal returns a filler of mean + std·N(0,1) values seeded by the tensor's name, so every tensor is
// independent of the order tensors are written in.
func (g *generator) normal(name string, std, mean float32) func([]float32) {
	return func(dst []float32) {
		r := newRNG(g.o.Seed, name)
		for i := range dst {
			dst[i] = mean + std*r.normal()
		}
	}
}

// embedding rows are unit-RMS random vectors. In untied models they also share a component along one fixed
// direction, which gives the output layer a context-independent handle on each token's logit (a bias without a
// bias tensor); see outputLayer.
func (g *generator) embedding(dst []float32) {
	h := g.o.HiddenSize
	r := newRNG(g.o.Seed, "model.embed_tokens.weight")
	for i := range dst {
		dst[i] = r.normal()
	}
	if g.o.TieWordEmbeddings {
		return
	}
	u := g.sharedDirection()
	a := float32(shared * math.Sqrt(float64(h)))
	norm := float32(math.Sqrt(1 + shared*shared))
	for i := range dst {
		dst[i] = (dst[i] + a*u[i%h]) / norm
	}
}

// shared is the weight of the shared embedding direction relative to the random part.
const shared = 0.5

// neverLogit is the logit offset of ids the model should never produce: padding rows beyond the tokenizer,
// reserved special tokens, and with Bigram tokens that never follow another in the training text.
const neverLogit = -30

func (g *generator) sharedDirection() []float32 {
	h := g.o.HiddenSize
	r := newRNG(g.o.Seed, "shared-direction")
	u := make([]float32, h)
	var n float64
	for i := range u {
		u[i] = r.normal()
		n += float64(u[i]) * float64(u[i])
	}
	for i := range u {
		u[i] /= float32(math.Sqrt(n))
	}
	return u
}

// outputLayer builds lm_head. After the final norm, the hidden state of a context ending in token p is close
// to sqrt(h)·(r̂_p + a·u)/sqrt(1+a²), where r̂_p is the unit random part of p's embedding (nearly orthogonal to
// the other tokens' in high dimension) and u the shared direction. So a row Σ_p w(p,n)·k·r̂_p + (β_n·k/a)·u with
// k = sqrt(1+a²)/sqrt(h) gives logit(n) ≈ w(p,n) + β_n.
//
// Without Bigram, rows are random (logits of standard deviation about 2). With Bigram, w(p,n) = log(P(n|p)/floor)
// from the training text's token bigrams (positive part only), so sampling continues text the way the corpus
// does. Either way β_n = neverLogit for ids that must not be produced, 0 otherwise.
func (g *generator) outputLayer(dst []float32) {
	o := &g.o
	h := o.HiddenSize
	k := float32(math.Sqrt(1+shared*shared) / math.Sqrt(float64(h)))
	r := newRNG(o.Seed, "lm_head.weight")
	noise := float32(2 / math.Sqrt(float64(h)))
	if o.Bigram {
		noise = 0.05 / float32(math.Sqrt(float64(h)))
	}
	for i := range dst {
		dst[i] = noise * r.normal()
	}
	never := make([]bool, o.VocabSize)
	for n := range never {
		never[n] = n >= g.tok.size() || n >= g.tok.size()-g.tok.reserved
	}
	if o.Bigram {
		follows := make([]bool, o.VocabSize)
		unit := g.unitEmbeddings()
		const floor = 0.002
		for p, next := range g.bigramCounts() {
			var total float64
			for _, c := range next {
				total += c
			}
			for n, c := range next {
				w := float32(math.Log(c / total / floor))
				if w <= 0 {
					continue
				}
				follows[n] = true
				row, up := dst[n*h:(n+1)*h], unit[p*h:(p+1)*h]
				for i := range row {
					row[i] += k * w * up[i]
				}
			}
		}
		for n := range never {
			never[n] = never[n] || !follows[n]
		}
	}
	u := g.sharedDirection()
	for n, nv := range never {
		if !nv {
			continue
		}
		row := dst[n*h : (n+1)*h]
		for i := range row {
			row[i] += k * neverLogit / shared * u[i]
		}
	}
}

// unitEmbeddings recomputes the random part of every embedding row (same stream as embedding), normalised to
// unit length.
func (g *generator) unitEmbeddings() []float32 {
	h := g.o.HiddenSize
	r := newRNG(g.o.Seed, "model.embed_tokens.weight")
	unit := make([]float32, g.o.VocabSize*h)
	for t := 0; t < g.o.VocabSize; t++ {
		row := unit[t*h : (t+1)*h]
		var n float64
		for i := range row {
			row[i] = r.normal()
			n += float64(row[i]) * float64(row[i])
		}
		for i := range row {
			row[i] /= float32(math.Sqrt(n))
		}
	}
	return unit
}

// bigramCounts counts token pairs of the training text, plus an end-of-turn after 15% of sentence ends so the
// model finishes its answers.
func (g *generator) bigramCounts() map[int]map[int]float64 {
	counts := map[int]map[int]float64{}
	add := func(p, n int, c float64) {
		if counts[p] == nil {
			counts[p] = map[int]float64{}
		}
		counts[p][n] += c
	}
	s := g.tok.stream
	for i := 0; i+1 < len(s); i++ {
		add(int(s[i]), int(s[i+1]), 1)
	}
	eot := g.tok.eosIDs[len(g.tok.eosIDs)-1]
	for p, next := range counts {
		tok := g.tok.vocab[p]
		if strings.HasSuffix(tok, ".") || strings.HasSuffix(tok, "?") || strings.HasSuffix(tok, "!") {
			var total float64
			for _, c := range next {
				total += c
			}
			add(p, eot, 0.15*total)
		}
	}
	return counts
}

// tensorsFor turns one generated matrix into the tensors stored for it: a float tensor in the model dtype,
// or MLX-packed weights with scales and biases when the module is quantized.
func (g *generator) tensorsFor(m matrix, add addFunc) error {
	if m.emit != nil {
		return m.emit(add)
	}
	o := &g.o
	st := g.floatType()
	n := max(m.experts, 1) * m.out * max(m.in, 1)
	var lead []int
	if m.experts > 0 {
		lead = []int{m.experts}
	}
	shaped := func(dims ...int) []int { return append(append([]int(nil), lead...), dims...) }
	shape := shaped(m.out)
	if m.in > 0 {
		shape = shaped(m.out, m.in)
	}
	params, quantized := g.quantFor(m)
	if quantized && params.Mode == model.ModeMXFP4 {
		var memo [][]byte
		get := func() [][]byte {
			if memo == nil {
				v := make([]float32, n)
				m.values(v)
				packed, scales := model.QuantizeMXFP4(v)
				memo = [][]byte{packed, scales}
			}
			return memo
		}
		if err := add(m.module+".weight", safetensors.U32, shaped(m.out, m.in/8), func(dst []byte) error {
			copy(dst, get()[0])
			return nil
		}); err != nil {
			return err
		}
		return add(m.module+".scales", safetensors.U8, shaped(m.out, m.in/32), func(dst []byte) error {
			copy(dst, get()[1])
			return nil
		})
	}
	if !quantized {
		return add(m.module+m.suffix, st, shape, func(dst []byte) error {
			v := make([]float32, n)
			m.values(v)
			return dtype.Encode(o.DType, dst, v)
		})
	}
	var memo *quantized3
	get := func() *quantized3 {
		if memo == nil {
			v := make([]float32, n)
			m.values(v)
			packed, s, b := model.Quantize(v, params.Bits, params.GroupSize, o.DType.Round)
			memo = &quantized3{packed, s, b}
		}
		return memo
	}
	groups := shaped(m.out, m.in/params.GroupSize)
	if err := add(m.module+".weight", safetensors.U32, shaped(m.out, m.in*params.Bits/32), func(dst []byte) error {
		copy(dst, get().packed)
		return nil
	}); err != nil {
		return err
	}
	if err := add(m.module+".scales", st, groups, func(dst []byte) error { return dtype.Encode(o.DType, dst, get().scales) }); err != nil {
		return err
	}
	return add(m.module+".biases", st, groups, func(dst []byte) error { return dtype.Encode(o.DType, dst, get().biases) })
}

type quantized3 struct {
	packed         []byte
	scales, biases []float32
}

func (g *generator) quantFor(m matrix) (model.QuantParams, bool) {
	if !m.linear {
		return model.QuantParams{}, false
	}
	if p, ok := g.overrides[m.module]; ok {
		if p == nil {
			return model.QuantParams{}, false
		}
		return *p, true
	}
	q := g.o.Quantization
	if q == nil {
		return model.QuantParams{}, false
	}
	mode := q.Mode
	if mode == "" {
		mode = model.ModeAffine
	}
	return model.QuantParams{GroupSize: q.GroupSize, Bits: q.Bits, Mode: mode}, true
}

// floatType is the safetensors dtype of the model's float tensors.
func (g *generator) floatType() safetensors.DType {
	return map[dtype.DType]safetensors.DType{dtype.Float32: safetensors.F32, dtype.Float16: safetensors.F16, dtype.BFloat16: safetensors.BF16}[g.o.DType]
}

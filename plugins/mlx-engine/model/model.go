package model

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// Model is a loaded, validated model directory. Its tensors alias memory-mapped files: keep the Model open
// (Close it last) while a backend uses them.
type Model struct {
	Dir    string
	Config Config
	// DType is the compute dtype the model was published in: the dtype of the embedding, or of its scales when
	// the embedding is quantized. It is the dtype of the KV cache and of KV on the wire.
	DType  dtype.DType
	Embed  *Linear // token embedding, [VocabSize, HiddenSize]
	Layers []Layer
	Norm   *safetensors.Tensor // final RMSNorm weight
	// LMHead projects the final hidden state to logits; it is Embed itself when the embeddings are tied.
	LMHead *Linear

	files       []*safetensors.File
	fingerprint string
}

// Layer is one decoder layer's weights, in the block structure of its Spec. A norm slot is nil where the spec
// has none; exactly one of Attn (Spec.Kind LayerAttention) and DeltaNet (LayerLinear) is set, and exactly one
// of MLP and MoE.
type Layer struct {
	Spec                           *LayerSpec
	AttnIn, AttnOut, FFNIn, FFNOut *safetensors.Tensor // [Hidden]
	Attn                           *Attention
	DeltaNet                       *DeltaNet
	MLP                            *MLP
	MoE                            *MoE
}

// Attention holds an attention block's weights.
type Attention struct {
	// Q is q_proj as stored: [Heads·HeadDim, Hidden], or with the spec's OutputGate [Heads·2·HeadDim, Hidden],
	// each head's rows [query (HeadDim) | gate (HeadDim)].
	Q, K, V, O *Linear
	// Query and Gate, with the spec's OutputGate, are Q's query rows and gate rows, each [Heads·HeadDim, Hidden]
	// head-major, as views of Q (no copy).
	Query, Gate  *Projection
	QNorm, KNorm *safetensors.Tensor // [HeadDim], when the spec has QKNorm
	Sinks        *safetensors.Tensor // [Heads], when the spec has Sinks
}

// DeltaNet holds a Gated DeltaNet block's weights (LayerSpec.DeltaNet gives the sizes; docs/hybrid-design.md
// §1.2 and §2). Both checkpoint layouts bind to the same values: the projections are regrouped into the block's
// order by row views of the stored matrices, the conv weight is transposed to tap-major float32, and the
// (1+w) norms of a Hugging Face layout are folded by the layer (Layer.AttnIn and FFNIn, never Norm here).
type DeltaNet struct {
	// QKV produces the conv's input channels [Q (Nk·Dk) | K (Nk·Dk) | V (Nv·Dv)], each head-major: [ConvDim,
	// Hidden]. Z produces the gated norm's gate, [Nv·Dv, Hidden] head-major; B and A one value per value head
	// ([Nv, Hidden]), for β = σ(b) and the decay's a.
	QKV, Z, B, A *Projection
	// Stored are the checkpoint's projection modules the four read: in_proj_qkvz and in_proj_ba (qwen3_next), or
	// in_proj_qkv, in_proj_z, in_proj_b and in_proj_a (qwen3_5).
	Stored []*Linear
	// Conv is the depthwise conv weight, F32 [K, ConvDim] tap-major: the conv output of channel c at position t
	// is Σ_τ Conv[τ][c]·x_{t−K+1+τ}[c], so tap K−1 multiplies the current position. Built at load (owned).
	Conv *safetensors.Tensor
	// DtBias and ALog are F32 [Nv] (converted at load when stored otherwise): g = −exp(ALog)·softplus(a+DtBias).
	DtBias, ALog *safetensors.Tensor
	// Norm is the gated RMSNorm's weight [Dv], a plain weight in every layout, as stored.
	Norm *safetensors.Tensor
	// Out is out_proj, [Hidden, Nv·Dv].
	Out *Linear
}

// Projection is a matrix whose output rows are stored in pieces: rows [0, Parts[0].Out) are Parts[0]'s, the next
// Parts[1].Out rows Parts[1]'s, and so on. Each part is a row view of a stored Linear (RowView: same bytes, no
// copy), so a quantized matrix stays quantized. A backend may compute each part into its range of the output, or
// concatenate the parts at load.
type Projection struct {
	Name    string
	Out, In int
	Parts   []Linear
}

// Row writes row r of the projection, dequantized, into dst (In values).
func (p *Projection) Row(r int, dst []float32) {
	if r < 0 || r >= p.Out {
		panic(fmt.Sprintf("model: %s: row %d of %d", p.Name, r, p.Out))
	}
	for i := range p.Parts {
		if r < p.Parts[i].Out {
			p.Parts[i].Row(r, dst)
			return
		}
		r -= p.Parts[i].Out
	}
}

// Float32 writes the whole projection, [Out, In] row-major and dequantized, into dst.
func (p *Projection) Float32(dst []float32) {
	if len(dst) != p.Out*p.In {
		panic(fmt.Sprintf("model: %s: %d×%d matrix into %d values", p.Name, p.Out, p.In, len(dst)))
	}
	off := 0
	for i := range p.Parts {
		n := p.Parts[i].Out * p.In
		p.Parts[i].Float32(dst[off : off+n])
		off += n
	}
}

// newProjection makes a projection of the given row ranges of stored matrices, merging ranges that continue
// each other in the same matrix.
func newProjection(name string, in int, ranges []rowRange) *Projection {
	p := &Projection{Name: name, In: in}
	var merged []rowRange
	for _, r := range ranges {
		if n := len(merged); n > 0 && merged[n-1].src == r.src && merged[n-1].lo+merged[n-1].n == r.lo {
			merged[n-1].n += r.n
			continue
		}
		merged = append(merged, r)
	}
	for _, r := range merged {
		p.Parts = append(p.Parts, r.src.RowView(r.lo, r.n))
		p.Out += r.n
	}
	return p
}

// rowRange is rows [lo, lo+n) of src.
type rowRange struct {
	src   *Linear
	lo, n int
}

// RowView is rows [lo, lo+n) of l as a Linear over the same bytes (weight, bias, scales and biases of a
// quantized matrix: a row's groups run along the input, so rows split cleanly).
func (l *Linear) RowView(lo, n int) Linear {
	if lo < 0 || n <= 0 || lo+n > l.Out {
		panic(fmt.Sprintf("model: %s: rows [%d, %d) of %d", l.Name, lo, lo+n, l.Out))
	}
	if lo == 0 && n == l.Out {
		return *l
	}
	rows := func(t *safetensors.Tensor) *safetensors.Tensor {
		if t == nil {
			return nil
		}
		per := len(t.Data) / l.Out
		shape := append([]int{n}, t.Shape[1:]...)
		return &safetensors.Tensor{Name: fmt.Sprintf("%s[%d:%d]", t.Name, lo, lo+n), DType: t.DType, Shape: shape,
			Data: t.Data[lo*per : (lo+n)*per : (lo+n)*per]}
	}
	v := Linear{Name: fmt.Sprintf("%s[%d:%d]", l.Name, lo, lo+n), Out: n, In: l.In, Weight: rows(l.Weight), Bias: rows(l.Bias)}
	if q := l.Quant; q != nil {
		v.Quant = &Quant{QuantParams: q.QuantParams, Scales: rows(q.Scales), Biases: rows(q.Biases)}
	}
	return v
}

// MLP holds a gated feed-forward block's weights.
type MLP struct {
	Gate, Up, Down *Linear
}

// MoE holds a mixture of experts' weights.
type MoE struct {
	Router *Linear // [Experts, Hidden], optional bias
	// Gate and Up are [E, I, Hidden] each; when the checkpoint fuses them (gpt-oss), GateUp is [E, 2I, Hidden]
	// with its rows interleaved (gate, up, gate, up, ...) when Interleaved holds, else I gate rows then I up.
	Gate, Up    *Experts
	GateUp      *Experts
	Interleaved bool
	Down        *Experts // [E, Hidden, I]
	Shared      *MLP     // optional shared expert
	SharedGate  *Linear  // [1, Hidden], optional
}

// Experts are E matrices of the same shape [Out, In], stored stacked in one tensor or one tensor per expert.
type Experts struct {
	Name       string
	E, Out, In int
	// Stacked is the one [E, Out, In] tensor (with scales/biases [E, Out, groups]) when the file stacks them,
	// as a Linear of E·Out rows (its tensors' shapes flattened to two dimensions, over the same bytes).
	Stacked *Linear
	// Each is always filled: views into Stacked's bytes (no copy), or the per-expert tensors.
	Each []Linear
	Bias *safetensors.Tensor // [E, Out], optional
}

// Linears are the layer's matrices as stored, token mixer first; expert matrices are counted by eachTensorUse.
func (l *Layer) Linears() []*Linear {
	var out []*Linear
	if a := l.Attn; a != nil {
		out = append(out, a.Q, a.K, a.V, a.O)
	}
	if d := l.DeltaNet; d != nil {
		out = append(append(out, d.Stored...), d.Out)
	}
	if m := l.MLP; m != nil {
		out = append(out, m.Gate, m.Up, m.Down)
	}
	return out
}

// Linear is a weight matrix [Out, In] (a linear layer y = W x + b, or the embedding table), dense or quantized.
type Linear struct {
	Name    string // module path, e.g. "model.layers.0.self_attn.q_proj"
	Out, In int
	// Weight is [Out, In] in F32, F16 or BF16, or when Quant is set the MLX-packed U32 [Out, In*Bits/32].
	Weight *safetensors.Tensor
	Bias   *safetensors.Tensor // optional, [Out]
	Quant  *Quant
}

// Quant holds the quantization of a Linear: per row, In/GroupSize groups, each with a scale and a bias
// (both [Out, In/GroupSize], in the model's float dtype). An mxfp4 Linear has U8 e8m0 scales and no biases
// (Biases is nil).
type Quant struct {
	QuantParams
	Scales, Biases *safetensors.Tensor
}

// Load opens and validates the model in dir: config.json (plus generation_config.json for EOS ids) and the
// safetensors weights, either model.safetensors, model.safetensors.index.json with its shards, or every
// model*.safetensors file.
func Load(dir string) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	files, err := openWeights(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Dir: dir, Config: *cfg, files: files}
	if err := m.bind(); err != nil {
		m.Close()
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	m.fingerprint = m.computeFingerprint()
	return m, nil
}

// Close releases the weight files.
func (m *Model) Close() error {
	var errs []error
	for _, f := range m.files {
		errs = append(errs, f.Close())
	}
	m.files = nil
	return errors.Join(errs...)
}

// NumParams is the number of logical (dequantized) parameters, counting tied embeddings once.
func (m *Model) NumParams() int64 {
	var n int64
	m.eachTensorUse(func(l *Linear, v *safetensors.Tensor) {
		if l != nil {
			n += int64(l.Out) * int64(l.In)
			if l.Bias != nil {
				n += int64(l.Out)
			}
		} else {
			n += int64(v.NumElements())
		}
	})
	return n
}

// ActiveParams is the number of parameters one token's forward pass uses: one embedding row, every layer's
// attention, norms, dense MLP, router and shared expert, only TopK of its experts, and the output layer (the
// whole embedding table when tied). For a dense model it is NumParams less the embedding rows a token does not
// read.
func (m *Model) ActiveParams() int64 {
	lin := func(l *Linear) int64 {
		if l == nil {
			return 0
		}
		n := int64(l.Out) * int64(l.In)
		if l.Bias != nil {
			n += int64(l.Out)
		}
		return n
	}
	var n int64
	if m.Embed != nil {
		n += int64(m.Embed.In)
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		for _, v := range []*safetensors.Tensor{l.AttnIn, l.AttnOut, l.FFNIn, l.FFNOut} {
			if v != nil {
				n += int64(v.NumElements())
			}
		}
		for _, v := range l.mixerVectors() {
			n += int64(v.NumElements())
		}
		for _, x := range l.Linears() {
			n += lin(x)
		}
		e := l.MoE
		if e == nil {
			continue
		}
		n += lin(e.Router) + lin(e.SharedGate)
		if s := e.Shared; s != nil {
			n += lin(s.Gate) + lin(s.Up) + lin(s.Down)
		}
		k := int64(l.Spec.FFN.MoE.TopK)
		for _, x := range []*Experts{e.Gate, e.Up, e.GateUp, e.Down} {
			if x == nil {
				continue
			}
			n += k * int64(x.Out) * int64(x.In)
			if x.Bias != nil {
				n += k * int64(x.Out)
			}
		}
	}
	if m.Norm != nil {
		n += int64(m.Norm.NumElements())
	}
	return n + lin(m.LMHead)
}

// WeightBytes is the size of all tensor data the model uses, as stored.
func (m *Model) WeightBytes() int64 {
	var n int64
	m.eachTensorUse(func(l *Linear, v *safetensors.Tensor) {
		if l != nil {
			for _, t := range l.tensors() {
				n += int64(len(t.Data))
			}
		} else {
			n += int64(len(v.Data))
		}
	})
	return n
}

func (m *Model) eachTensorUse(fn func(*Linear, *safetensors.Tensor)) {
	fn(m.Embed, nil)
	for i := range m.Layers {
		l := &m.Layers[i]
		vs := append([]*safetensors.Tensor{l.AttnIn, l.AttnOut, l.FFNIn, l.FFNOut}, l.mixerVectors()...)
		for _, v := range vs {
			if v != nil {
				fn(nil, v)
			}
		}
		for _, lin := range l.Linears() {
			fn(lin, nil)
		}
		if e := l.MoE; e != nil {
			fn(e.Router, nil)
			if e.Shared != nil {
				fn(e.Shared.Gate, nil)
				fn(e.Shared.Up, nil)
				fn(e.Shared.Down, nil)
			}
			if e.SharedGate != nil {
				fn(e.SharedGate, nil)
			}
			for _, x := range []*Experts{e.Gate, e.Up, e.GateUp, e.Down} {
				if x == nil {
					continue
				}
				for j := range x.Each { // views of a stacked tensor add up to its bytes
					fn(&x.Each[j], nil)
				}
				if x.Bias != nil {
					fn(nil, x.Bias)
				}
			}
		}
	}
	fn(nil, m.Norm)
	if m.LMHead != m.Embed {
		fn(m.LMHead, nil)
	}
}

// mixerVectors are the token mixer's tensors that are not matrices.
func (l *Layer) mixerVectors() []*safetensors.Tensor {
	var vs []*safetensors.Tensor
	if a := l.Attn; a != nil {
		vs = append(vs, a.QNorm, a.KNorm, a.Sinks)
	}
	if d := l.DeltaNet; d != nil {
		vs = append(vs, d.Conv, d.DtBias, d.ALog, d.Norm)
	}
	out := vs[:0]
	for _, v := range vs {
		if v != nil {
			out = append(out, v)
		}
	}
	return out
}

func (l *Linear) tensors() []*safetensors.Tensor {
	ts := []*safetensors.Tensor{l.Weight}
	if l.Bias != nil {
		ts = append(ts, l.Bias)
	}
	if l.Quant != nil {
		ts = append(ts, l.Quant.Scales)
		if l.Quant.Biases != nil {
			ts = append(ts, l.Quant.Biases)
		}
	}
	return ts
}

// openWeights opens the safetensors files of dir.
func openWeights(dir string) ([]*safetensors.File, error) {
	var names []string
	index := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(index); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("model: %s: %w", index, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("model: %s: empty weight_map", index)
		}
		seen := map[string]bool{}
		for tensor, file := range idx.WeightMap {
			if file == "" || filepath.Base(file) != file || file == "." || file == ".." {
				return nil, fmt.Errorf("model: %s: tensor %q maps to %q, which is not a file name in the model directory", index, tensor, file)
			}
			if !seen[file] {
				seen[file] = true
				names = append(names, file)
			}
		}
		sort.Strings(names)
		files, err := openAll(dir, names)
		if err != nil {
			return nil, err
		}
		byName := map[string]*safetensors.File{}
		for _, f := range files {
			byName[filepath.Base(f.Path())] = f
		}
		for tensor, file := range idx.WeightMap {
			if _, ok := byName[file].Tensor(tensor); !ok {
				closeAll(files)
				return nil, fmt.Errorf("model: %s lists tensor %q in %s, which does not hold it", index, tensor, file)
			}
		}
		return files, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("model: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		names = []string{"model.safetensors"}
	} else {
		matches, _ := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
		for _, p := range matches {
			names = append(names, filepath.Base(p))
		}
		sort.Strings(names)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("model: %s: no model.safetensors, model.safetensors.index.json or model*.safetensors", dir)
	}
	return openAll(dir, names)
}

func openAll(dir string, names []string) ([]*safetensors.File, error) {
	var files []*safetensors.File
	for _, n := range names {
		f, err := safetensors.Open(filepath.Join(dir, n))
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("model: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*safetensors.File) {
	for _, f := range files {
		f.Close()
	}
}

// binder resolves tensor names to tensors and remembers which ones were used.
type binder struct {
	tensors map[string]*safetensors.Tensor
	used    map[string]bool
	quant   *Quantization
	// foldNorms: the checkpoint stores (1+w) norms as w (a Hugging Face qwen3_next/qwen3_5 layout); norm binds
	// them as owned float32 1+w, so that every layout reaches the backends as a plain RMSNorm weight.
	foldNorms bool
}

func (m *Model) bind() error {
	b := &binder{tensors: map[string]*safetensors.Tensor{}, used: map[string]bool{}, quant: m.Config.Quantization}
	for _, f := range m.files {
		for _, n := range f.Names() {
			if _, dup := b.tensors[n]; dup {
				return fmt.Errorf("tensor %q appears in more than one file", n)
			}
			t, _ := f.Tensor(n)
			b.tensors[n] = t
		}
	}
	c := &m.Config
	var err error
	def := lookupFamily(c.Family)
	pre := def.modulePrefix(b.tensors)
	if def.begin != nil {
		if err := def.begin(b, c, pre); err != nil {
			return err
		}
	}
	if m.Embed, err = b.linear(pre+"embed_tokens", c.VocabSize, c.HiddenSize, false); err != nil {
		return err
	}
	switch {
	case m.Embed.Quant == nil:
		m.DType, err = floatDType(m.Embed.Weight)
	case m.Embed.Quant.Mode == ModeMXFP4: // scales are exponents; the final norm is in the compute dtype
		if n, ok := b.tensors[pre+"norm.weight"]; ok {
			m.DType, err = floatDType(n)
		} else {
			err = fmt.Errorf("missing tensor %q", pre+"norm.weight")
		}
	default:
		m.DType, err = floatDType(m.Embed.Quant.Scales)
	}
	if err != nil {
		return err
	}
	if c.embedScaleSqrtHidden {
		// Gemma: torch.tensor(hidden_size**0.5).to(dtype), a float32 rounded to the compute dtype.
		c.Arch.EmbedScale = float64(m.DType.Round(float32(math.Sqrt(float64(c.HiddenSize)))))
	}
	m.Layers = make([]Layer, c.NumLayers)
	for i := range m.Layers {
		if err := def.bindLayer(b, &m.Layers[i], &c.Arch.Layers[i], fmt.Sprintf("%slayers.%d.", pre, i), c.HiddenSize); err != nil {
			return err
		}
	}
	if m.Norm, err = b.norm(pre+"norm.weight", c.HiddenSize); err != nil {
		return err
	}
	if c.TieWordEmbeddings {
		m.LMHead = m.Embed
		head := def.headPath(pre) + "."
		for n := range b.tensors { // mlx-lm drops a stray lm_head of tied models; so do we
			if strings.HasPrefix(n, "lm_head.") || strings.HasPrefix(n, head) {
				b.used[n] = true
			}
		}
	} else if m.LMHead, err = b.linear(def.headPath(pre), c.VocabSize, c.HiddenSize, false); err != nil {
		if _, ok := b.tensors[def.headPath(pre)+".weight"]; !ok {
			return fmt.Errorf("%w (and tie_word_embeddings is false)", err)
		}
		return err
	}
	var extra []string
	for n := range b.tensors {
		if !b.used[n] && !strings.HasSuffix(n, ".rotary_emb.inv_freq") && (def.ignore == nil || !def.ignore(n)) {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		if len(extra) > 5 {
			extra = append(extra[:5], fmt.Sprintf("and %d more", len(extra)-5))
		}
		return fmt.Errorf("unexpected tensors for a %s model with this config (an unsupported variant?): %s", c.Family, strings.Join(extra, ", "))
	}
	return nil
}

// denseLayer binds a Llama-shaped layer: input_layernorm and post_attention_layernorm in the AttnIn and FFNIn
// slots, self_attn.{q,k,v,o}_proj with optional q_norm/k_norm, and mlp.{gate,up,down}_proj.
func (b *binder) denseLayer(l *Layer, spec *LayerSpec, p string, hidden int) error {
	l.MLP = &MLP{}
	ff := &spec.FFN
	mlp := []func() error{
		func() (err error) {
			l.MLP.Gate, err = b.linear(p+"mlp.gate_proj", ff.Intermediate, hidden, ff.Bias)
			return
		},
		func() (err error) {
			l.MLP.Up, err = b.linear(p+"mlp.up_proj", ff.Intermediate, hidden, ff.Bias)
			return
		},
		func() (err error) {
			l.MLP.Down, err = b.linear(p+"mlp.down_proj", hidden, ff.Intermediate, ff.Bias)
			return
		},
	}
	return b.layerSteps(l, spec, p, hidden, mlp)
}

// attentionLayer binds the norms and the attention block of a Llama-shaped layer, for families whose
// feed-forward block is bound separately.
func (b *binder) attentionLayer(l *Layer, spec *LayerSpec, p string, hidden int) error {
	return b.layerSteps(l, spec, p, hidden, nil)
}

// layerSteps binds the norms, q/k/v/o, then ffn's steps, then q_norm/k_norm: the order in which a missing
// tensor is reported.
func (b *binder) layerSteps(l *Layer, spec *LayerSpec, p string, hidden int, ffn []func() error) error {
	at := &spec.Attn
	qDim, kvDim := at.Heads*at.HeadDim, at.KVHeads*at.HeadDim
	qOut := qDim
	if at.OutputGate {
		qOut = 2 * qDim
	}
	l.Spec = spec
	l.Attn = &Attention{}
	steps := []func() error{
		func() (err error) { l.AttnIn, err = b.norm(p+"input_layernorm.weight", hidden); return },
		func() (err error) { l.FFNIn, err = b.norm(p+"post_attention_layernorm.weight", hidden); return },
		func() (err error) { l.Attn.Q, err = b.linear(p+"self_attn.q_proj", qOut, hidden, at.QBias); return },
		func() (err error) { l.Attn.K, err = b.linear(p+"self_attn.k_proj", kvDim, hidden, at.KBias); return },
		func() (err error) { l.Attn.V, err = b.linear(p+"self_attn.v_proj", kvDim, hidden, at.VBias); return },
		func() (err error) { l.Attn.O, err = b.linear(p+"self_attn.o_proj", hidden, qDim, at.OBias); return },
	}
	steps = append(steps, ffn...)
	if at.QKNorm != nil {
		steps = append(steps,
			func() (err error) { l.Attn.QNorm, err = b.norm(p+"self_attn.q_norm.weight", at.HeadDim); return },
			func() (err error) { l.Attn.KNorm, err = b.norm(p+"self_attn.k_norm.weight", at.HeadDim); return },
		)
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	if at.OutputGate {
		var query, gate []rowRange
		for h := 0; h < at.Heads; h++ {
			query = append(query, rowRange{l.Attn.Q, 2 * h * at.HeadDim, at.HeadDim})
			gate = append(gate, rowRange{l.Attn.Q, (2*h + 1) * at.HeadDim, at.HeadDim})
		}
		l.Attn.Query = newProjection(p+"self_attn.q_proj(query)", hidden, query)
		l.Attn.Gate = newProjection(p+"self_attn.q_proj(gate)", hidden, gate)
	}
	return nil
}

// norm binds a norm weight of n values: as stored, or with foldNorms as an owned float32 1+w.
func (b *binder) norm(name string, n int) (*safetensors.Tensor, error) {
	t, err := b.vector(name, n)
	if err != nil || !b.foldNorms {
		return t, err
	}
	v, err := Vector(t)
	if err != nil {
		return nil, err
	}
	for i := range v {
		v[i]++
	}
	return float32Tensor(t.Name, v, n), nil
}

// float32Tensor is an owned F32 tensor of the values v with the given shape.
func float32Tensor(name string, v []float32, shape ...int) *safetensors.Tensor {
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
	}
	return &safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: data}
}

func (b *binder) get(name string) (*safetensors.Tensor, error) {
	t, ok := b.tensors[name]
	if !ok {
		return nil, fmt.Errorf("missing tensor %q", name)
	}
	b.used[name] = true
	return t, nil
}

func (b *binder) vector(name string, n int) (*safetensors.Tensor, error) {
	t, err := b.get(name)
	if err != nil {
		return nil, err
	}
	if _, err := floatDType(t); err != nil {
		return nil, err
	}
	if len(t.Shape) != 1 || t.Shape[0] != n {
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d]", name, t.Shape, n)
	}
	return t, nil
}

func (b *binder) linear(path string, out, in int, bias bool) (*Linear, error) {
	l := &Linear{Name: path, Out: out, In: in}
	var err error
	if l.Weight, err = b.get(path + ".weight"); err != nil {
		return nil, err
	}
	if bias {
		if l.Bias, err = b.vector(path+".bias", out); err != nil {
			return nil, err
		}
	}
	params, quantized, explicit := b.quant.For(path)
	if quantized && !explicit {
		_, quantized = b.tensors[path+".scales"] // mlx-lm: unlisted modules are quantized iff they have scales
	}
	if !quantized && l.Weight.DType == safetensors.U32 && b.quant != nil {
		return nil, fmt.Errorf("missing tensor %q (module %q has packed U32 weights, so it is quantized)", path+".scales", path)
	}
	if !quantized {
		if _, err := floatDType(l.Weight); err != nil {
			return nil, err
		}
		if len(l.Weight.Shape) != 2 || l.Weight.Shape[0] != out || l.Weight.Shape[1] != in {
			return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d]", l.Weight.Name, l.Weight.Shape, out, in)
		}
		return l, nil
	}
	if l.Weight.DType != safetensors.U32 {
		return nil, fmt.Errorf("tensor %q is %s, but quantized weights are packed into U32", l.Weight.Name, l.Weight.DType)
	}
	if params.Mode == ModeMXFP4 {
		if l.Quant, err = b.mxfp4(path, l.Weight, nil, out, in); err != nil {
			return nil, err
		}
		return l, nil
	}
	if in%params.GroupSize != 0 || in*params.Bits%32 != 0 {
		return nil, fmt.Errorf("module %q: input size %d does not divide into groups of %d / words of %d-bit values", path, in, params.GroupSize, params.Bits)
	}
	if len(l.Weight.Shape) != 2 || l.Weight.Shape[0] != out || l.Weight.Shape[1] != in*params.Bits/32 {
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d] (%d-bit packed)", l.Weight.Name, l.Weight.Shape, out, in*params.Bits/32, params.Bits)
	}
	q := &Quant{QuantParams: params}
	groups := in / params.GroupSize
	for _, s := range []struct {
		dst  **safetensors.Tensor
		name string
	}{{&q.Scales, path + ".scales"}, {&q.Biases, path + ".biases"}} {
		if *s.dst, err = b.get(s.name); err != nil {
			return nil, fmt.Errorf("%w (module %q is quantized)", err, path)
		}
		t := *s.dst
		if _, err := floatDType(t); err != nil {
			return nil, err
		}
		if len(t.Shape) != 2 || t.Shape[0] != out || t.Shape[1] != groups {
			return nil, fmt.Errorf("tensor %q has shape %v, want [%d %d] (group size %d)", t.Name, t.Shape, out, groups, params.GroupSize)
		}
	}
	if q.Scales.DType != q.Biases.DType {
		return nil, fmt.Errorf("module %q: scales are %s but biases are %s", path, q.Scales.DType, q.Biases.DType)
	}
	l.Quant = q
	return l, nil
}

// mxfp4 checks an mxfp4 module: U32 weights [lead..., out, in/8] and U8 scales [lead..., out, in/32] (lead
// is the experts' dimension of a stacked module), 4-bit values in groups of 32, and no affine biases.
func (b *binder) mxfp4(path string, w *safetensors.Tensor, lead []int, out, in int) (*Quant, error) {
	if in%32 != 0 {
		return nil, fmt.Errorf("module %q: mxfp4 input size %d is not a multiple of 32", path, in)
	}
	want := append(append([]int(nil), lead...), out, in/8)
	if !sameShape(w.Shape, want) {
		return nil, fmt.Errorf("tensor %q has shape %v, want %v (mxfp4 packed)", w.Name, w.Shape, want)
	}
	sc, err := b.get(path + ".scales")
	if err != nil {
		return nil, fmt.Errorf("%w (module %q is quantized)", err, path)
	}
	want = append(append([]int(nil), lead...), out, in/32)
	if sc.DType != safetensors.U8 || !sameShape(sc.Shape, want) {
		return nil, fmt.Errorf("tensor %q is %s %v, want U8 %v (mxfp4 e8m0 scales)", sc.Name, sc.DType, sc.Shape, want)
	}
	if _, ok := b.tensors[path+".biases"]; ok {
		return nil, fmt.Errorf("module %q is mxfp4, which has no biases, but %q exists", path, path+".biases")
	}
	return &Quant{QuantParams: QuantParams{GroupSize: 32, Bits: 4, Mode: ModeMXFP4}, Scales: sc}, nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// floatDType maps a floating-point tensor's dtype to the engine's names, rejecting everything else.
func floatDType(t *safetensors.Tensor) (dtype.DType, error) {
	switch t.DType {
	case safetensors.F32:
		return dtype.Float32, nil
	case safetensors.F16:
		return dtype.Float16, nil
	case safetensors.BF16:
		return dtype.BFloat16, nil
	}
	return "", fmt.Errorf("tensor %q has unsupported dtype %s (want F32, F16 or BF16)", t.Name, t.DType)
}

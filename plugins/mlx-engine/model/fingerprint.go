package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// Fingerprint identifies the computation this model performs. Two nodes holding the same fingerprint produce
// interchangeable KV caches; the KV transfer refuses KV from a node whose fingerprint differs.
//
// It is a SHA-256 over (1) the architecture, normalised (family, sizes, heads, head_dim, norm epsilon, RoPE
// base and scaling, biases, q/k norms, tied embeddings, quantization, compute dtype; not names, token ids or
// context limits, which do not change KV) and (2) every tensor the model uses, in name order: its name, dtype,
// shape and a digest of its bytes. Tensors up to 64 KiB are hashed whole; larger ones by their first and last
// 4 KiB and 64 evenly spaced 256-byte windows. That reads about 24 KiB per tensor (milliseconds for an 8B
// model, against ~10 s to hash 16 GB), while any re-training, fine-tune, merge, re-quantization or dtype change,
// which touch all of a tensor's values, changes it. A deliberate edit of a few unsampled bytes would not:
// the fingerprint guards against mistakes, not adversaries. It does not depend on how the weights are sharded.
// A model with sliding-window or linear-attention layers also hashes every layer's kind and shapes (layerKinds), so
// that it never matches the same weights run with other windows; a model without them keeps the dense
// fingerprint.
func (m *Model) Fingerprint() string {
	kinds := m.Config.Arch.layerKinds()
	if kinds == nil {
		return m.fingerprint
	}
	sum := sha256.Sum256(append([]byte(m.fingerprint+"\x00"), kinds...))
	return "fp1:" + hex.EncodeToString(sum[:16])
}

// layerKinds is the canonical encoding of what each layer's cache keeps, for a model with sliding-window or
// linear-attention layers: per layer its kind, window and shape, under scheme 2; a hybrid model's attention
// layers add their output gate and rotary dims, and its linear layers their DeltaNet sizes and the shapes and
// dtypes of the state arrays a cache holds and the KV wire carries (docs/hybrid-design.md §4.3). It is nil for a
// model with neither, whose Fingerprint and KVCompat strings stay those of scheme 1; a model with windows and no
// linear layers encodes what it did before hybrids existed.
func (a *Arch) layerKinds() []byte {
	hybrid := a.HasLinear()
	if !a.HasWindows() && !hybrid {
		return nil
	}
	type stateArray struct {
		DType string // "kv": the model's KV dtype
		Shape []int
	}
	type linearKV struct {
		KeyHeads, ValueHeads, KeyDim, ValueDim, ConvKernel int
		State                                              []stateArray
	}
	type layerKV struct {
		Kind                     string
		Window, KVHeads, HeadDim int
		Gate                     bool      `json:",omitempty"`
		RotaryDims               int       `json:",omitempty"`
		Linear                   *linearKV `json:",omitempty"`
	}
	kinds := struct {
		Scheme int
		Layers []layerKV
	}{Scheme: 2}
	for _, l := range a.Layers {
		if d := l.DeltaNet; l.Kind == LayerLinear && d != nil {
			kinds.Layers = append(kinds.Layers, layerKV{Kind: "linear", Linear: &linearKV{d.KeyHeads, d.ValueHeads, d.KeyDim,
				d.ValueDim, d.ConvKernel, []stateArray{{"kv", d.ConvStateShape()}, {"float32", d.StateShape()}}}})
			continue
		}
		kind := "full"
		if l.Attn.Window > 0 {
			kind = "sliding"
		}
		kv := layerKV{Kind: kind, Window: l.Attn.Window, KVHeads: l.Attn.KVHeads, HeadDim: l.Attn.HeadDim}
		if hybrid {
			kv.Gate, kv.RotaryDims = l.Attn.OutputGate, l.Attn.Rope.RotaryDims
		}
		kinds.Layers = append(kinds.Layers, kv)
	}
	b, _ := json.Marshal(kinds)
	return b
}

const (
	fpWhole   = 64 << 10
	fpEdge    = 4 << 10
	fpWindows = 64
	fpWindow  = 256
)

func (m *Model) computeFingerprint() string {
	c := &m.Config
	arch := struct {
		Scheme                                int
		Family                                string
		Hidden, Intermediate, Layers          int
		Heads, KVHeads, HeadDim, Vocab        int
		Eps, Theta                            float64
		Scaling                               *RopeScaling
		Tied, QKVBias, OBias, MLPBias, QKNorm bool
		Quant                                 *fpQuant
		DType                                 string
		MoE                                   []*MoESpec `json:",omitempty"` // dense models: absent, as before
		Blocks                                *Arch      `json:",omitempty"` // beyond the Llama blocks only
	}{1, string(c.Family), c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim,
		c.VocabSize, c.RMSNormEps, c.RopeTheta, c.RopeScaling, c.TieWordEmbeddings, c.AttentionBias, c.OutputBias,
		c.MLPBias, c.QKNorm, fingerprintQuant(c.Quantization), string(m.DType), c.moeLayers(), blocks(c)}
	h := sha256.New()
	a, _ := json.Marshal(arch) // struct field order and sorted map keys make this canonical
	h.Write(a)
	seen := map[*safetensors.Tensor]bool{}
	var ts []*safetensors.Tensor
	add := func(t *safetensors.Tensor) {
		if t != nil && !seen[t] {
			seen[t] = true
			ts = append(ts, t)
		}
	}
	m.eachTensorUse(func(l *Linear, v *safetensors.Tensor) {
		if l != nil {
			for _, t := range l.tensors() {
				add(t)
			}
		} else {
			add(v)
		}
	})
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	var n [8]byte
	for _, t := range ts {
		fmt.Fprintf(h, "\x00%s\x00%s%v", t.Name, t.DType, t.Shape)
		binary.LittleEndian.PutUint64(n[:], uint64(len(t.Data)))
		h.Write(n[:])
		sampleBytes(h.Write, t.Data)
	}
	return "fp1:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// fpParams and fpQuant keep the JSON that fingerprints hashed before quantization had modes: an affine
// module reads {"group_size", "bits"} as it did, so the fingerprints of existing models do not change.
type fpParams struct {
	GroupSize int    `json:"group_size"`
	Bits      int    `json:"bits"`
	Mode      string `json:"mode,omitempty"` // only when not affine
}

type fpQuant struct {
	fpParams
	Mode      string
	Overrides map[string]*fpParams
}

func fingerprintQuant(q *Quantization) *fpQuant {
	if q == nil {
		return nil
	}
	conv := func(p QuantParams) fpParams {
		f := fpParams{GroupSize: p.GroupSize, Bits: p.Bits}
		if p.Mode != ModeAffine {
			f.Mode = p.Mode
		}
		return f
	}
	out := &fpQuant{fpParams: conv(q.QuantParams), Mode: q.Mode, Overrides: map[string]*fpParams{}}
	out.fpParams.Mode = "" // the top level's mode is Mode, as before
	for k, p := range q.Overrides {
		if p == nil {
			out.Overrides[k] = nil
			continue
		}
		f := conv(*p)
		out.Overrides[k] = &f
	}
	return out
}

// KVCompat names what two models must share for one's KV cache to stand in for the other's: the architecture
// (family, sizes, heads, head_dim, RoPE base and scaling, q/k norms) and the tokenizer (tokenizerID), but not
// the weights' quantization, their dtype or their values. The same base model at another quantization (bf16
// and 4-bit) has the same KVCompat and another Fingerprint: its KV is exchangeable approximately, as exo
// allows, while equal Fingerprints exchange it exactly. A model with sliding-window or linear-attention layers
// adds its layers' kinds, windows and state shapes (layerKinds): two models whose layers keep different things
// never match.
func (m *Model) KVCompat(tokenizerID string) string {
	c := &m.Config
	arch := struct {
		Scheme                         int
		Family                         string
		Hidden, Intermediate, Layers   int
		Heads, KVHeads, HeadDim, Vocab int
		Eps, Theta                     float64
		Scaling                        *RopeScaling
		QKNorm                         bool
		Tokenizer                      string
		MoE                            []*MoESpec `json:",omitempty"` // routing changes every later layer's KV
	}{1, string(c.Family), c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim,
		c.VocabSize, c.RMSNormEps, c.RopeTheta, c.RopeScaling, c.QKNorm, tokenizerID, c.moeLayers()}
	a, _ := json.Marshal(arch)
	a = append(a, c.Arch.layerKinds()...)
	sum := sha256.Sum256(a)
	return fmt.Sprintf("kv1:%s-%s", c.Family, hex.EncodeToString(sum[:8]))
}

func sampleBytes(write func([]byte) (int, error), d []byte) {
	if len(d) <= fpWhole {
		write(d)
		return
	}
	write(d[:fpEdge])
	write(d[len(d)-fpEdge:])
	span := len(d) - fpWindow
	for i := 0; i < fpWindows; i++ {
		off := int(int64(span) * int64(i) / (fpWindows - 1))
		write(d[off : off+fpWindow])
	}
}

// moeLayers is each layer's mixture of experts (nil for a dense layer), or nil when the model has none: the
// routing options that the tensor shapes do not show (top k, normalisation) are part of the computation.
func (c *Config) moeLayers() []*MoESpec {
	var out []*MoESpec
	sparse := false
	for i := range c.Arch.Layers {
		m := c.Arch.Layers[i].FFN.MoE
		sparse = sparse || m != nil
		out = append(out, m)
	}
	if !sparse {
		return nil
	}
	return out
}

// blocks is the whole arch of a model that uses blocks beyond the Llama layer, whose global config fields do not
// determine its computation; nil for the Llama-shaped families, whose fingerprints stay as they were.
func blocks(c *Config) *Arch {
	if c.Arch.Dense() {
		return nil
	}
	return &c.Arch
}

package modelgen_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

var hybridFamilies = []model.Family{model.Qwen3Next, model.Qwen35MoE, model.Qwen35}

func hybridModel(t *testing.T, f model.Family, mod func(*modelgen.Options)) (*model.Model, string) {
	t.Helper()
	o := modelgen.TinyFamily(f)
	if mod != nil {
		mod(&o)
	}
	dir := generate(t, o)
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, dir
}

// weightList is every weight of a loaded model as the blocks see it, in a fixed order: labelled values, with
// the (1+w) norms marked (they hold 1+w in both layouts).
type weight struct {
	label string
	v     []float32
	norm  bool
}

func weightList(t *testing.T, m *model.Model) []weight {
	t.Helper()
	var out []weight
	vec := func(label string, v *safetensors.Tensor, norm bool) {
		f, err := model.Vector(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, weight{label, f, norm})
	}
	lin := func(label string, l *model.Linear) {
		v := make([]float32, l.Out*l.In)
		l.Float32(v)
		out = append(out, weight{label, v, false})
	}
	proj := func(label string, p *model.Projection) {
		v := make([]float32, p.Out*p.In)
		p.Float32(v)
		out = append(out, weight{label, v, false})
	}
	lin("embed", m.Embed)
	vec("norm", m.Norm, true)
	lin("lm_head", m.LMHead)
	for i := range m.Layers {
		l, p := &m.Layers[i], fmt.Sprintf("layer %d ", i)
		vec(p+"input norm", l.AttnIn, true)
		vec(p+"post-attention norm", l.FFNIn, true)
		if a := l.Attn; a != nil {
			for _, x := range []*model.Linear{a.Q, a.K, a.V, a.O} {
				lin(p+x.Name[strings.LastIndex(x.Name, ".")+1:], x)
			}
			proj(p+"query", a.Query)
			proj(p+"gate", a.Gate)
			vec(p+"q_norm", a.QNorm, true)
			vec(p+"k_norm", a.KNorm, true)
		}
		if d := l.DeltaNet; d != nil {
			proj(p+"qkv", d.QKV)
			proj(p+"z", d.Z)
			proj(p+"b", d.B)
			proj(p+"a", d.A)
			vec(p+"conv", d.Conv, false)
			vec(p+"dt_bias", d.DtBias, false)
			vec(p+"A_log", d.ALog, false)
			vec(p+"gated norm", d.Norm, false)
			lin(p+"out_proj", d.Out)
		}
		if x := l.MLP; x != nil {
			lin(p+"mlp gate", x.Gate)
			lin(p+"mlp up", x.Up)
			lin(p+"mlp down", x.Down)
		}
		if e := l.MoE; e != nil {
			lin(p+"router", e.Router)
			for _, x := range []*model.Experts{e.Gate, e.Up, e.Down} {
				for j := range x.Each {
					lin(fmt.Sprintf("%sexpert %d %s", p, j, x.Name), &x.Each[j])
				}
			}
			lin(p+"shared gate_proj", e.Shared.Gate)
			lin(p+"shared up_proj", e.Shared.Up)
			lin(p+"shared down_proj", e.Shared.Down)
			lin(p+"shared_expert_gate", e.SharedGate)
		}
	}
	return out
}

// TestHybridLayoutsAgree: the mlx-community layout, made from the Hugging Face tensors by the sanitize port,
// loads to the same block weights: bit for bit in float32; in bfloat16 everything but the (1+w) norms, which
// mlx-lm folded in bfloat16 (so they are the Hugging Face layout's float32 1+w rounded once more).
func TestHybridLayoutsAgree(t *testing.T) {
	t.Parallel()
	for _, f := range hybridFamilies {
		for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
			t.Run(fmt.Sprintf("%s/%s", f, dt), func(t *testing.T) {
				t.Parallel()
				hf, _ := hybridModel(t, f, func(o *modelgen.Options) { o.DType = dt })
				mx, _ := hybridModel(t, f, func(o *modelgen.Options) { o.DType, o.Layout = dt, modelgen.LayoutMLX })
				a, b := weightList(t, hf), weightList(t, mx)
				if len(a) != len(b) {
					t.Fatalf("%d weights against %d", len(a), len(b))
				}
				for i := range a {
					want := a[i].v
					if a[i].norm && dt != dtype.Float32 {
						want = append([]float32(nil), want...)
						for j := range want {
							want[j] = dt.Round(want[j])
						}
					}
					if len(want) != len(b[i].v) {
						t.Fatalf("%s: %d values against %s's %d", a[i].label, len(want), b[i].label, len(b[i].v))
					}
					for j := range want {
						if math.Float32bits(want[j]) != math.Float32bits(b[i].v[j]) {
							t.Fatalf("%s[%d]: %g (hf) vs %g (mlx)", a[i].label, j, want[j], b[i].v[j])
						}
					}
				}
				if hf.KVCompat("t") != mx.KVCompat("t") {
					t.Error("the layouts' KVCompat differ")
				}
			})
		}
	}
}

// tensorShapes reads the names, dtypes and shapes of a generated model's tensors.
func tensorShapes(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	for _, n := range f.Names() {
		x, _ := f.Tensor(n)
		out[n] = fmt.Sprintf("%s%v", x.DType, x.Shape)
	}
	return out
}

// TestHybridCheckpointNames: both layouts hold exactly the names and shapes of their real counterparts.
func TestHybridCheckpointNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		family       model.Family
		layout       modelgen.Layout
		want, absent []string
	}{
		{model.Qwen3Next, modelgen.LayoutHF, []string{
			"model.layers.0.linear_attn.in_proj_qkvz.weight F32[128 64]", "model.layers.0.linear_attn.in_proj_ba.weight F32[8 64]",
			"model.layers.0.linear_attn.conv1d.weight F32[96 1 4]", "model.layers.0.linear_attn.A_log F32[4]",
			"model.layers.0.linear_attn.norm.weight F32[8]", "model.layers.0.linear_attn.out_proj.weight F32[64 32]",
			"model.layers.2.self_attn.q_proj.weight F32[128 64]", "model.layers.2.self_attn.q_norm.weight F32[16]",
			"model.layers.0.mlp.experts.7.down_proj.weight F32[64 32]", "model.layers.1.mlp.gate_proj.weight F32[96 64]",
			"model.layers.0.mlp.shared_expert_gate.weight F32[1 64]", "mtp.fc.weight F32[64 128]", "lm_head.weight F32[512 64]",
		}, []string{"model.layers.1.mlp.gate.weight", "model.layers.0.mlp.switch_mlp.up_proj.weight"}},
		{model.Qwen3Next, modelgen.LayoutMLX, []string{
			"model.layers.0.linear_attn.in_proj_qkvz.weight F32[128 64]", "model.layers.0.linear_attn.conv1d.weight F32[96 4 1]",
			"model.layers.0.mlp.switch_mlp.gate_proj.weight F32[8 32 64]", "model.layers.0.mlp.switch_mlp.down_proj.weight F32[8 64 32]",
		}, []string{"mtp.fc.weight", "model.layers.0.mlp.experts.0.up_proj.weight"}},
		{model.Qwen35MoE, modelgen.LayoutHF, []string{
			"model.language_model.layers.0.linear_attn.in_proj_qkv.weight F32[96 64]", "model.language_model.layers.0.linear_attn.in_proj_z.weight F32[32 64]",
			"model.language_model.layers.0.linear_attn.in_proj_b.weight F32[4 64]", "model.language_model.layers.0.linear_attn.A_log F32[4]",
			"model.language_model.layers.0.mlp.experts.gate_up_proj F32[8 64 64]", "model.language_model.layers.0.mlp.experts.down_proj F32[8 64 32]",
			"model.language_model.embed_tokens.weight F32[512 64]", "lm_head.weight F32[512 64]", "mtp.fc.weight F32[64 128]",
			"model.visual.blocks.0.attn.qkv.weight F32[96 32]",
		}, nil},
		{model.Qwen35MoE, modelgen.LayoutMLX, []string{
			"language_model.model.layers.0.linear_attn.conv1d.weight BF16[96 4 1]", "language_model.model.layers.0.linear_attn.A_log F32[4]",
			"language_model.model.layers.0.mlp.switch_mlp.up_proj.weight U32[8 32 8]", "language_model.model.layers.0.mlp.switch_mlp.up_proj.scales BF16[8 32 1]",
			"language_model.model.layers.0.mlp.gate.weight U32[8 16]", "language_model.model.layers.0.mlp.shared_expert_gate.weight U32[1 16]",
			"language_model.model.layers.0.linear_attn.out_proj.weight BF16[64 32]", "language_model.lm_head.weight U32[512 8]",
			"language_model.model.norm.weight BF16[64]",
		}, []string{"mtp.fc.weight", "language_model.mtp.fc.weight", "model.visual.blocks.0.attn.qkv.weight"}},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.family, tc.layout), func(t *testing.T) {
			t.Parallel()
			_, dir := hybridModel(t, tc.family, func(o *modelgen.Options) {
				o.Layout = tc.layout
				if tc.layout == modelgen.LayoutMLX && tc.family == model.Qwen35MoE {
					o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 4, GroupSize: 64}
				}
			})
			got := tensorShapes(t, dir)
			for _, w := range tc.want {
				name, shape, _ := strings.Cut(w, " ")
				if got[name] != shape {
					t.Errorf("%s: %q, want %q", name, got[name], shape)
				}
			}
			for _, n := range tc.absent {
				if _, ok := got[n]; ok {
					t.Errorf("%s is present", n)
				}
			}
			for n := range got {
				if tc.layout == modelgen.LayoutMLX && (strings.Contains(n, "mtp.") || strings.Contains(n, "visual")) {
					t.Errorf("the mlx layout keeps %s", n)
				}
			}
		})
	}
}

// TestHybridQuantized: the 4-bit mlx-community layout quantizes every linear module whose input divides into
// groups, keeps the router and the shared expert's gate at 8 bits in groups of 64 (mlx-lm's quant_predicate, as
// per-module entries), and leaves the conv, norms, A_log and dt_bias in floating point.
func TestHybridQuantized(t *testing.T) {
	t.Parallel()
	for _, f := range hybridFamilies {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			m, _ := hybridModel(t, f, func(o *modelgen.Options) {
				o.Layout, o.DType, o.Quantization = modelgen.LayoutMLX, dtype.BFloat16, &modelgen.Quantization{Bits: 4, GroupSize: 64}
			})
			if m.Embed.Quant == nil || m.Embed.Quant.Bits != 4 || m.LMHead.Quant == nil {
				t.Errorf("embedding / head not quantized")
			}
			for i := range m.Layers {
				l := &m.Layers[i]
				if d := l.DeltaNet; d != nil {
					for _, s := range d.Stored {
						if s.Quant == nil || s.Quant.Bits != 4 || s.Quant.GroupSize != 64 {
							t.Errorf("layer %d: %s not 4-bit", i, s.Name)
						}
					}
					if d.Out.Quant != nil { // input Nv·Dv = 32 does not divide into groups of 64
						t.Errorf("layer %d: out_proj quantized", i)
					}
					if d.Conv.DType != safetensors.F32 || d.ALog.DType != safetensors.F32 || d.Norm.DType != safetensors.BF16 {
						t.Errorf("layer %d: conv %s, A_log %s, norm %s", i, d.Conv.DType, d.ALog.DType, d.Norm.DType)
					}
				}
				if e := l.MoE; e != nil {
					for _, x := range []*model.Linear{e.Router, e.SharedGate} {
						if x.Quant == nil || x.Quant.Bits != 8 || x.Quant.GroupSize != 64 {
							t.Errorf("layer %d: %s is %+v, want 8 bits in groups of 64", i, x.Name, x.Quant)
						}
					}
					if q := e.Gate.Each[0].Quant; q == nil || q.Bits != 4 {
						t.Errorf("layer %d: experts not 4-bit", i)
					}
				}
			}
		})
	}
}

// TestHybridConfigRoundTrip: the config.json modelgen writes parses back to the options' blocks.
func TestHybridConfigRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range hybridFamilies {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			o := modelgen.TinyFamily(f)
			m, dir := hybridModel(t, f, nil)
			b, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			c, err := model.ParseConfig(b)
			if err != nil {
				t.Fatal(err)
			}
			if c.Family != f || !reflect.DeepEqual(c.Arch, m.Config.Arch) {
				t.Fatalf("family %s", c.Family)
			}
			want := model.DeltaNetSpec{KeyHeads: o.LinearKeyHeads, ValueHeads: o.LinearValueHeads, KeyDim: o.LinearKeyDim,
				ValueDim: o.LinearValueDim, ConvKernel: o.ConvKernel, Eps: 1e-6}
			var kinds []string
			for i, l := range c.Arch.Layers {
				k := "L"
				if l.Kind == model.LayerAttention {
					k = "A"
					if !l.Attn.OutputGate || l.Attn.Rope.RotaryDims != 4 || l.Attn.Heads != 4 || l.Attn.KVHeads != 2 || l.Attn.HeadDim != 16 {
						t.Errorf("layer %d: attention %+v", i, l.Attn)
					}
				} else if *l.DeltaNet != want {
					t.Errorf("layer %d: %+v, want %+v", i, *l.DeltaNet, want)
				}
				switch l.FFN.Kind {
				case model.FFNMoE:
					k += "m"
					if mo := l.FFN.MoE; mo.Experts != 8 || mo.TopK != 2 || mo.Intermediate != 32 || mo.SharedIntermediate != 48 || !mo.SharedGate || !mo.NormTopK {
						t.Errorf("layer %d: moe %+v", i, mo)
					}
				case model.FFNDense:
					if l.FFN.Intermediate != 96 {
						t.Errorf("layer %d: intermediate %d", i, l.FFN.Intermediate)
					}
				}
				kinds = append(kinds, k)
			}
			want3 := map[model.Family]string{model.Qwen3Next: "Lm L Am Lm Lm Am", model.Qwen35MoE: "Lm Lm Am Lm Lm Am", model.Qwen35: "L L A L L A"}[f]
			if got := strings.Join(kinds, " "); got != want3 {
				t.Errorf("layers %q, want %q", got, want3)
			}
			if c.RopeTheta != o.RopeTheta || c.TieWordEmbeddings || c.HiddenSize != 64 || c.NumLayers != 6 {
				t.Errorf("config %+v", c)
			}
		})
	}
}

// TestHybridValueRanges: the tiny preset's weights cover §6.1's ranges, which exercise the delta rule's pitfalls.
func TestHybridValueRanges(t *testing.T) {
	t.Parallel()
	m, _ := hybridModel(t, model.Qwen3Next, nil)
	d := m.Layers[0].DeltaNet
	alog, _ := model.Vector(d.ALog)
	if a0, a1 := math.Exp(float64(alog[0])), math.Exp(float64(alog[len(alog)-1])); math.Abs(a0-1e-3) > 1e-6 || math.Abs(a1-16) > 1e-4 {
		t.Errorf("A = exp(A_log) spans [%g, %g], want [1e-3, 16]", a0, a1)
	}
	dt, _ := model.Vector(d.DtBias)
	if dt[0] != -18 || dt[len(dt)-1] != 18 {
		t.Errorf("dt_bias spans [%g, %g]", dt[0], dt[len(dt)-1])
	}
	mean := func(v []float32) (mu, sd float64) {
		for _, x := range v {
			mu += float64(x)
		}
		mu /= float64(len(v))
		for _, x := range v {
			sd += (float64(x) - mu) * (float64(x) - mu)
		}
		return mu, math.Sqrt(sd / float64(len(v)))
	}
	conv, _ := model.Vector(d.Conv)
	if _, sd := mean(conv); sd < 0.4 || sd > 0.6 {
		t.Errorf("conv weights' std %g, want about 0.5", sd)
	}
	gn, _ := model.Vector(d.Norm)
	if mu, _ := mean(gn); math.Abs(mu-1) > 0.15 {
		t.Errorf("gated norm weight mean %g, want about 1", mu)
	}
	// The (1+w) norms are stored as w ~ N(0, 0.1) and loaded as 1+w.
	in, _ := model.Vector(m.Layers[0].AttnIn)
	if mu, sd := mean(in); math.Abs(mu-1) > 0.05 || sd < 0.05 || sd > 0.15 {
		t.Errorf("input norm 1+w: mean %g, std %g", mu, sd)
	}
	// b's rows give β = σ(b) across (0.02, 0.98) for unit-RMS inputs: std of b ≈ 2.
	b := make([]float32, d.B.Out*d.B.In)
	d.B.Float32(b)
	if _, sd := mean(b); math.Abs(sd*math.Sqrt(float64(d.B.In))-2) > 0.4 {
		t.Errorf("b rows give std %g per unit input, want about 2", sd*math.Sqrt(float64(d.B.In)))
	}
}

// TestHybridGroupedProjections: qwen3_next's grouped in_proj_qkvz and in_proj_ba, regrouped by the loader, hold
// the same projections as qwen3_5's separate in_proj_qkv, in_proj_z, in_proj_b and in_proj_a of the same seed:
// the generator's grouping and the loader's regrouping are each other's inverse.
func TestHybridGroupedProjections(t *testing.T) {
	t.Parallel()
	next, _ := hybridModel(t, model.Qwen3Next, nil)
	flat, _ := hybridModel(t, model.Qwen35MoE, nil)
	for _, i := range []int{0, 1, 3, 4} {
		a, b := next.Layers[i].DeltaNet, flat.Layers[i].DeltaNet
		for _, p := range [][2]*model.Projection{{a.QKV, b.QKV}, {a.Z, b.Z}, {a.B, b.B}, {a.A, b.A}} {
			x, y := make([]float32, p[0].Out*p[0].In), make([]float32, p[1].Out*p[1].In)
			p[0].Float32(x)
			p[1].Float32(y)
			if !reflect.DeepEqual(x, y) {
				t.Errorf("layer %d: %s differs from %s", i, p[0].Name, p[1].Name)
			}
		}
	}
}

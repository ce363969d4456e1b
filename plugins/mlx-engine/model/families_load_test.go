package model_test

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// genFamily writes modelgen's tiny preset of family f, changed by mod.
func genFamily(t *testing.T, f model.Family, mod func(*modelgen.Options)) string {
	t.Helper()
	o := modelgen.TinyFamily(f)
	if mod != nil {
		mod(&o)
	}
	dir := t.TempDir()
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

type familyVariant struct {
	name   string
	family model.Family
	mod    func(*modelgen.Options)
}

func familyVariants() []familyVariant {
	with := func(layout modelgen.Layout, dt dtype.DType, q *modelgen.Quantization, mxfp4 bool) func(*modelgen.Options) {
		return func(o *modelgen.Options) {
			o.Layout, o.DType, o.Quantization, o.ExpertsMXFP4 = layout, dt, q, mxfp4
		}
	}
	q4 := &modelgen.Quantization{Bits: 4, GroupSize: 32}
	q8 := &modelgen.Quantization{Bits: 8, GroupSize: 32}
	return []familyVariant{
		{"gemma3_text/f32", model.Gemma3Text, with(modelgen.LayoutHF, dtype.Float32, nil, false)},
		{"gemma3_text/bf16", model.Gemma3Text, with(modelgen.LayoutHF, dtype.BFloat16, nil, false)},
		{"gemma3_text/q4", model.Gemma3Text, with(modelgen.LayoutHF, dtype.BFloat16, q4, false)},
		{"gemma3_text/layer_types", model.Gemma3Text, func(o *modelgen.Options) {
			o.LayerTypes = []string{"sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention", "full_attention"}
		}},
		{"gemma3/hf/f32", model.Gemma3, with(modelgen.LayoutHF, dtype.Float32, nil, false)},
		{"gemma3/hf/bf16", model.Gemma3, with(modelgen.LayoutHF, dtype.BFloat16, nil, false)},
		{"gemma3/mlx/bf16", model.Gemma3, with(modelgen.LayoutMLX, dtype.BFloat16, nil, false)},
		{"gemma3/mlx/q4", model.Gemma3, with(modelgen.LayoutMLX, dtype.BFloat16, q4, false)},
		{"gpt_oss/hf/f32", model.GptOSS, with(modelgen.LayoutHF, dtype.Float32, nil, false)},
		{"gpt_oss/hf/bf16", model.GptOSS, with(modelgen.LayoutHF, dtype.BFloat16, nil, false)},
		{"gpt_oss/hf/mxfp4", model.GptOSS, with(modelgen.LayoutHF, dtype.BFloat16, nil, true)},
		{"gpt_oss/mlx/f32", model.GptOSS, with(modelgen.LayoutMLX, dtype.Float32, nil, false)},
		{"gpt_oss/mlx/bf16", model.GptOSS, with(modelgen.LayoutMLX, dtype.BFloat16, nil, false)},
		{"gpt_oss/mlx/q4", model.GptOSS, with(modelgen.LayoutMLX, dtype.BFloat16, q4, false)},
		{"gpt_oss/mlx/mxfp4", model.GptOSS, with(modelgen.LayoutMLX, dtype.BFloat16, nil, true)},
		{"gpt_oss/mlx/mxfp4+q8", model.GptOSS, with(modelgen.LayoutMLX, dtype.BFloat16, q8, true)},
	}
}

// TestLoadFamilyVariants loads every layout × dtype × quantization modelgen writes for gemma3_text, gemma3
// and gpt_oss: Load binds every tensor (an unbound one fails it), and the weights sit in the block slots.
func TestLoadFamilyVariants(t *testing.T) {
	t.Parallel()
	for _, v := range familyVariants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			m, err := model.Load(genFamily(t, v.family, v.mod))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			c := &m.Config
			if c.Family != v.family || len(m.Layers) != c.NumLayers {
				t.Fatalf("family %s, %d layers", c.Family, len(m.Layers))
			}
			switch v.family {
			case model.Gemma3, model.Gemma3Text:
				checkGemma3(t, m)
			case model.GptOSS:
				checkGptOSS(t, m)
			}
			if m.NumParams() <= 0 || m.WeightBytes() <= 0 {
				t.Errorf("params %d, bytes %d", m.NumParams(), m.WeightBytes())
			}
		})
	}
}

func checkGemma3(t *testing.T, m *model.Model) {
	t.Helper()
	c := &m.Config
	if want := float64(m.DType.Round(float32(math.Sqrt(float64(c.HiddenSize))))); c.Arch.EmbedScale != want {
		t.Errorf("embed scale %v, want %v (dtype %s)", c.Arch.EmbedScale, want, m.DType)
	}
	if m.LMHead != m.Embed || !c.Arch.TiedHead {
		t.Error("head is not tied")
	}
	windows := 0
	for i := range m.Layers {
		l := &m.Layers[i]
		if l.AttnIn == nil || l.AttnOut == nil || l.FFNIn == nil || l.FFNOut == nil || l.Attn.QNorm == nil || l.Attn.KNorm == nil || l.MLP == nil {
			t.Fatalf("layer %d: a slot is empty: %+v", i, l)
		}
		if l.AttnOut == l.FFNIn || l.AttnIn == l.FFNOut {
			t.Errorf("layer %d: one norm in two slots", i)
		}
		if l.Spec.Attn.Window > 0 {
			windows++
			if l.Spec.Attn.Window != 8 || l.Spec.Attn.Rope.Base != 10000 || l.Spec.Attn.Rope.Type != model.RopeDefault {
				t.Errorf("sliding layer %d: %+v", i, l.Spec.Attn)
			}
		} else if l.Spec.Attn.Rope.Base != 1e6 || l.Spec.Attn.Rope.Type != model.RopeLinear || l.Spec.Attn.Rope.Factor != 8 {
			t.Errorf("full layer %d: %+v", i, l.Spec.Attn.Rope)
		}
		if l.Spec.Attn.Scale != 1/math.Sqrt(24) {
			t.Errorf("layer %d: scale %v", i, l.Spec.Attn.Scale)
		}
	}
	if windows != 3 && windows != 4 {
		t.Errorf("%d sliding layers of 6", windows)
	}
}

func checkGptOSS(t *testing.T, m *model.Model) {
	t.Helper()
	if m.LMHead == m.Embed {
		t.Error("gpt-oss's head is untied")
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		if l.Attn.Sinks == nil || l.Attn.Q.Bias == nil || l.Attn.O.Bias == nil || l.MoE == nil || l.MoE.Router.Bias == nil || l.MLP != nil {
			t.Fatalf("layer %d: %+v", i, l)
		}
		if want := []int{0, 8}[(i+1)%2]; l.Spec.Attn.Window != want || !l.Spec.Attn.Sinks {
			t.Errorf("layer %d: window %d, want %d", i, l.Spec.Attn.Window, want)
		}
		e := l.MoE
		var gateUp []*model.Experts
		if e.GateUp != nil {
			if !e.Interleaved || e.Gate != nil || e.Up != nil || e.GateUp.Out != 256 || e.GateUp.In != 64 {
				t.Errorf("layer %d: fused experts %+v", i, e.GateUp)
			}
			gateUp = []*model.Experts{e.GateUp}
		} else {
			if e.Gate == nil || e.Up == nil || e.Gate.Out != 128 || e.Gate.In != 64 {
				t.Fatalf("layer %d: gate %+v, up %+v", i, e.Gate, e.Up)
			}
			gateUp = []*model.Experts{e.Gate, e.Up}
		}
		for _, x := range append(gateUp, e.Down) {
			if x.E != 8 || len(x.Each) != 8 || x.Stacked == nil || x.Bias == nil || x.Bias.Shape[0] != 8 || x.Bias.Shape[1] != x.Out {
				t.Errorf("layer %d: experts %s: E %d, %d views, bias %v", i, x.Name, x.E, len(x.Each), x.Bias)
			}
		}
	}
}

func loadFamily(t *testing.T, f model.Family, mod func(*modelgen.Options)) *model.Model {
	t.Helper()
	m, err := model.Load(genFamily(t, f, mod))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func rows(l *model.Linear) []float32 {
	out := make([]float32, l.Out*l.In)
	l.Float32(out)
	return out
}

func floats(t *testing.T, v *safetensors.Tensor) []float32 {
	t.Helper()
	x, err := model.Vector(v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestGptOSSLayoutsAgree: the mlx-community layout of a seed is mlx-lm's sanitize of its Hugging Face layout,
// expert by expert (gate = even rows of the fused gate_up, up = odd rows, biases split the same way), in
// float (transformers' input-major save, transposed at load) and in mxfp4 (openai's blocks, zero copy).
func TestGptOSSLayoutsAgree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		dt    dtype.DType
		mxfp4 bool
	}{{"f32", dtype.Float32, false}, {"bf16", dtype.BFloat16, false}, {"mxfp4", dtype.BFloat16, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			load := func(layout modelgen.Layout) *model.Model {
				return loadFamily(t, model.GptOSS, func(o *modelgen.Options) { o.Layout, o.DType, o.ExpertsMXFP4 = layout, tc.dt, tc.mxfp4 })
			}
			hf, mlx := load(modelgen.LayoutHF), load(modelgen.LayoutMLX)
			for i := range hf.Layers {
				a, b := hf.Layers[i].MoE, mlx.Layers[i].MoE
				if tc.mxfp4 && (a.GateUp.Each[0].Quant == nil || a.GateUp.Each[0].Quant.Mode != model.ModeMXFP4 ||
					b.Gate.Each[0].Quant == nil || b.Gate.Each[0].Quant.Mode != model.ModeMXFP4 || b.Down.Each[7].Quant.Biases != nil) {
					t.Fatalf("layer %d: experts are not mxfp4", i)
				}
				gub := floats(t, a.GateUp.Bias)
				gb := floats(t, b.Gate.Bias)
				ub := floats(t, b.Up.Bias)
				for e := 0; e < a.GateUp.E; e++ {
					gu, g, u := rows(&a.GateUp.Each[e]), rows(&b.Gate.Each[e]), rows(&b.Up.Each[e])
					in := a.GateUp.In
					for j := 0; j < b.Gate.Out; j++ {
						if !equal(gu[2*j*in:(2*j+1)*in], g[j*in:(j+1)*in]) || !equal(gu[(2*j+1)*in:(2*j+2)*in], u[j*in:(j+1)*in]) {
							t.Fatalf("layer %d expert %d row %d: fused gate/up differs from the split ones", i, e, j)
						}
						k := e*b.Gate.Out + j
						if gub[2*k] != gb[k] || gub[2*k+1] != ub[k] {
							t.Fatalf("layer %d expert %d row %d: biases differ", i, e, j)
						}
					}
					if !equal(rows(&a.Down.Each[e]), rows(&b.Down.Each[e])) {
						t.Fatalf("layer %d expert %d: down differs", i, e)
					}
				}
				if !equal(rows(a.Down.Stacked), rows(b.Down.Stacked)) || !equal(rows(hf.Layers[i].Attn.Q), rows(mlx.Layers[i].Attn.Q)) {
					t.Fatalf("layer %d: stacked down or q differ", i)
				}
			}
		})
	}
}

// TestGemma3LayoutsAgree: gemma3_text, and gemma3 in both multimodal prefixes, hold the same text model.
func TestGemma3LayoutsAgree(t *testing.T) {
	t.Parallel()
	text := loadFamily(t, model.Gemma3Text, nil)
	for _, layout := range []modelgen.Layout{modelgen.LayoutHF, modelgen.LayoutMLX} {
		mm := loadFamily(t, model.Gemma3, func(o *modelgen.Options) { o.Layout = layout })
		if !equal(rows(text.Embed), rows(mm.Embed)) {
			t.Errorf("%s: embeddings differ", layout)
		}
		for i := range text.Layers {
			a, b := &text.Layers[i], &mm.Layers[i]
			if !equal(rows(a.MLP.Down), rows(b.MLP.Down)) || !equal(rows(a.Attn.K), rows(b.Attn.K)) {
				t.Errorf("%s: layer %d differs", layout, i)
			}
			if !equal(floats(t, a.FFNOut), floats(t, b.FFNOut)) {
				t.Errorf("%s: layer %d post_feedforward_layernorm differs", layout, i)
			}
		}
	}
}

// TestGptOSSPresetExercises checks that the tiny gpt-oss preset hits what its design says it does: gate and up
// projections of unit-RMS inputs cross the clamp (gate above the limit, up beyond ±limit) for at least 5% of
// values, some heads' sinks dominate, and router rows 0 and 1 tie exactly.
func TestGptOSSPresetExercises(t *testing.T) {
	t.Parallel()
	m := loadFamily(t, model.GptOSS, func(o *modelgen.Options) { o.Layout = modelgen.LayoutMLX })
	limit := m.Config.Arch.Layers[0].FFN.Limit
	h := m.Config.HiddenSize
	x := make([]float32, h)
	var gateOver, upOver, n int
	for tok := 0; tok < 32; tok++ {
		m.Embed.Row(tok, x)
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		for k := range x {
			x[k] = float32(float64(x[k]) / math.Sqrt(ss/float64(h)))
		}
		for _, l := range m.Layers {
			for e := 0; e < l.MoE.Gate.E; e++ {
				g, u := rows(&l.MoE.Gate.Each[e]), rows(&l.MoE.Up.Each[e])
				for j := 0; j < l.MoE.Gate.Out; j++ {
					var a, b float64
					for k := range x {
						a += float64(g[j*h+k]) * float64(x[k])
						b += float64(u[j*h+k]) * float64(x[k])
					}
					n++
					if a > limit {
						gateOver++
					}
					if math.Abs(b) > limit {
						upOver++
					}
				}
			}
		}
	}
	if gateOver*20 < n || upOver*20 < n {
		t.Errorf("clamped: gate %d, up %d of %d", gateOver, upOver, n)
	}
	sinks := floats(t, m.Layers[0].Attn.Sinks)
	big := 0
	for _, s := range sinks {
		if math.Abs(float64(s)) > 1 {
			big++
		}
	}
	if big == 0 {
		t.Errorf("sinks %v are all small", sinks)
	}
	r := rows(m.Layers[0].MoE.Router)
	rb := floats(t, m.Layers[0].MoE.Router.Bias)
	if !equal(r[:h], r[h:2*h]) || rb[0] != rb[1] || equal(r[:h], r[2*h:3*h]) {
		t.Error("router rows 0 and 1 do not tie (or every row does)")
	}
}

// TestStackedMXFP4Experts: experts stacked by mlx-lm (switch_mlp) in mxfp4 have e8m0 scales and no biases; each
// expert's view has its scales and no biases either.
func TestStackedMXFP4Experts(t *testing.T) {
	t.Parallel()
	m, err := model.Load(genFamily(t, model.Qwen3MoE, func(o *modelgen.Options) {
		o.Layout, o.Quantization = modelgen.LayoutMLX, &modelgen.Quantization{Mode: model.ModeMXFP4, Bits: 4, GroupSize: 32}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x := m.Layers[0].MoE.Gate
	if x.Stacked == nil || x.Stacked.Quant == nil || x.Stacked.Quant.Mode != model.ModeMXFP4 {
		t.Fatalf("layer 0's gate experts are not stacked mxfp4: %+v", x.Stacked)
	}
	for i, l := range x.Each {
		if l.Quant == nil || l.Quant.Scales == nil || l.Quant.Biases != nil {
			t.Fatalf("expert %d: quant %+v, want scales and no biases", i, l.Quant)
		}
	}
}

package model_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

func gen(t *testing.T, mod func(*modelgen.Options)) string {
	t.Helper()
	o := modelgen.TinyWith(mod)
	dir := t.TempDir()
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLoadEveryGeneratedVariant loads each family × dtype × quantization the generator makes and checks what
// the loader derived from the files.
func TestLoadEveryGeneratedVariant(t *testing.T) {
	t.Parallel()
	quants := map[string]*modelgen.Quantization{
		"float": nil,
		"q4g32": {Bits: 4, GroupSize: 32},
		"q8g64": {Bits: 8, GroupSize: 64},
		"q2g32": {Bits: 2, GroupSize: 32},
		"mixed": {Bits: 4, GroupSize: 64, Overrides: map[string]*model.QuantParams{"lm_head": nil, "model.embed_tokens": {Bits: 8, GroupSize: 32}}},
	}
	fingerprints := map[string]string{}
	for _, fam := range model.Families {
		for _, dt := range []dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16} {
			for qn, q := range quants {
				name := string(fam) + "/" + string(dt) + "/" + qn
				gemma := fam == model.Gemma3 || fam == model.Gemma3Text
				if qn == "mixed" {
					// mlx-lm keys its overrides by module path, and a multimodal checkpoint keeps its text model
					// elsewhere: under model.language_model. in the HF layout modelgen writes gemma3 in, under
					// language_model.model. (head language_model.lm_head) in the mlx layout quantized qwen3_5 is
					// written in.
					switch fam {
					case model.Gemma3:
						q = &modelgen.Quantization{Bits: 4, GroupSize: 64, Overrides: map[string]*model.QuantParams{"lm_head": nil, "model.language_model.embed_tokens": {Bits: 8, GroupSize: 32}}}
					case model.Qwen35, model.Qwen35MoE:
						q = &modelgen.Quantization{Bits: 4, GroupSize: 64, Overrides: map[string]*model.QuantParams{"language_model.lm_head": nil, "language_model.model.embed_tokens": {Bits: 8, GroupSize: 32}}}
					}
				}
				dir := gen(t, func(o *modelgen.Options) { o.Family, o.DType, o.Quantization = fam, dt, q })
				m, err := model.Load(dir)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if m.Config.Family != fam || m.DType != dt {
					t.Errorf("%s: loaded as %s %s", name, m.Config.Family, m.DType)
				}
				// The first attention layer: a hybrid's layer 0 is linear attention.
				attn := m.Layers[0].Attn
				for i := 1; attn == nil && i < len(m.Layers); i++ {
					attn = m.Layers[i].Attn
				}
				if (attn.Q.Quant != nil) != (q != nil) {
					t.Errorf("%s: q_proj quantized = %v", name, attn.Q.Quant != nil)
				}
				// Gemma's head is its embedding (always tied), so an lm_head override has nothing to apply to and the
				// head takes the embedding's quantization.
				if qn == "mixed" && (m.LMHead.Quant != nil && !gemma || m.Embed.Quant.Bits != 8 || m.Embed.Quant.GroupSize != 32) {
					t.Errorf("%s: overrides not applied: lm_head %+v, embed %+v", name, m.LMHead.Quant, m.Embed.Quant)
				}
				if gemma && m.LMHead != m.Embed {
					t.Errorf("%s: head is not the embedding", name)
				}
				hybrid := fam == model.Qwen3Next || fam == model.Qwen35 || fam == model.Qwen35MoE
				qkNorm := fam == model.Qwen3 || fam == model.Qwen3MoE || gemma || hybrid
				qkvBias := fam == model.Qwen2 || fam == model.Qwen2MoE || fam == model.GptOSS
				if (attn.QNorm != nil) != qkNorm || (attn.Q.Bias != nil) != qkvBias || (m.Layers[0].DeltaNet != nil) != hybrid {
					t.Errorf("%s: family features wrong", name)
				}
				lo, hi := int64(100000), int64(200000)
				switch fam {
				case model.GptOSS:
					// Its preset (TinyFamily): 4 layers of 8 experts of 64×128.
					lo, hi = 800000, 1000000
				case model.Gemma3, model.Gemma3Text:
					// Its preset (TinyFamily): 6 layers of width 128 with an MLP of 192.
					lo, hi = 600000, 700000
				case model.Qwen35:
					// Its preset (TinyFamily): 6 layers of width 64, 4 of them Gated DeltaNet.
					lo, hi = 200000, 300000
				case model.Qwen3Next, model.Qwen35MoE:
					// Its preset: qwen3_5's layers with 8 experts of 32 and a shared expert of 48.
					lo, hi = 400000, 550000
				}
				if n := m.NumParams(); n < lo || n > hi {
					t.Errorf("%s: %d parameters", name, n)
				}
				fp := m.Fingerprint()
				if !strings.HasPrefix(fp, "fp1:") || len(fp) != 36 {
					t.Errorf("%s: fingerprint %q", name, fp)
				}
				if other, dup := fingerprints[fp]; dup {
					t.Errorf("%s and %s share fingerprint %s", name, other, fp)
				}
				fingerprints[fp] = name
				m.Close()
			}
		}
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	load := func(dir string) *model.Model {
		m, err := model.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a := load(gen(t, nil))
	again := load(gen(t, nil))
	sharded := load(gen(t, func(o *modelgen.Options) { o.Shards = 3 }))
	reseeded := load(gen(t, func(o *modelgen.Options) { o.Seed = 99 }))
	if a.Fingerprint() != again.Fingerprint() {
		t.Error("the same model has two fingerprints")
	}
	if a.Fingerprint() != sharded.Fingerprint() {
		t.Error("sharding changed the fingerprint")
	}
	if a.Fingerprint() == reseeded.Fingerprint() {
		t.Error("different weights, same fingerprint")
	}
	// One changed weight inside a sampled window changes it too.
	dir := gen(t, nil)
	rewrite(t, dir, func(name string, shape []int, dt safetensors.DType, data []byte) ([]int, safetensors.DType, []byte, bool) {
		if name == "model.layers.1.mlp.up_proj.weight" {
			data[0] ^= 1
		}
		return shape, dt, data, true
	})
	if load(dir).Fingerprint() == a.Fingerprint() {
		t.Error("a changed weight left the fingerprint unchanged")
	}
}

// rewrite replaces dir/model.safetensors with a copy edited by fn (return keep=false to drop a tensor).
func rewrite(t *testing.T, dir string, fn func(name string, shape []int, dt safetensors.DType, data []byte) ([]int, safetensors.DType, []byte, bool)) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w := safetensors.NewWriter(nil)
	for _, n := range f.Names() {
		tn, _ := f.Tensor(n)
		shape, dt, data, keep := fn(n, append([]int(nil), tn.Shape...), tn.DType, append([]byte(nil), tn.Data...))
		if keep {
			if err := w.Add(n, dt, shape, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Close()
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	keep := func(name string, shape []int, dt safetensors.DType, data []byte) ([]int, safetensors.DType, []byte, bool) {
		return shape, dt, data, true
	}
	edit := func(target string, fn func([]int, safetensors.DType, []byte) ([]int, safetensors.DType, []byte, bool)) func(string, []int, safetensors.DType, []byte) ([]int, safetensors.DType, []byte, bool) {
		return func(name string, shape []int, dt safetensors.DType, data []byte) ([]int, safetensors.DType, []byte, bool) {
			if name == target {
				return fn(shape, dt, data)
			}
			return keep(name, shape, dt, data)
		}
	}
	cases := []struct {
		name  string
		quant *modelgen.Quantization
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"missing tensor", nil, func(t *testing.T, dir string) {
			rewrite(t, dir, edit("model.layers.1.self_attn.k_proj.weight", func(s []int, d safetensors.DType, b []byte) ([]int, safetensors.DType, []byte, bool) {
				return s, d, b, false
			}))
		}, `missing tensor "model.layers.1.self_attn.k_proj.weight"`},
		{"shape mismatch", nil, func(t *testing.T, dir string) {
			rewrite(t, dir, edit("model.layers.0.mlp.down_proj.weight", func(s []int, d safetensors.DType, b []byte) ([]int, safetensors.DType, []byte, bool) {
				return []int{s[1], s[0]}, d, b, true
			}))
		}, `"model.layers.0.mlp.down_proj.weight" has shape [128 64], want [64 128]`},
		{"integer weights", nil, func(t *testing.T, dir string) {
			rewrite(t, dir, edit("model.norm.weight", func(s []int, d safetensors.DType, b []byte) ([]int, safetensors.DType, []byte, bool) {
				return s, safetensors.I32, b, true
			}))
		}, `"model.norm.weight" has unsupported dtype I32`},
		{"vector shape mismatch", nil, func(t *testing.T, dir string) {
			rewrite(t, dir, edit("model.norm.weight", func(s []int, d safetensors.DType, b []byte) ([]int, safetensors.DType, []byte, bool) {
				return []int{2 * s[0]}, d, append(b, b...), true
			}))
		}, `"model.norm.weight" has shape [128], want [64]`},
		{"rotary inv_freq is ignored", nil, func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "model-00001-of-00002.safetensors"))
			w := safetensors.NewWriter(nil)
			w.Add("model.layers.0.self_attn.rotary_emb.inv_freq", safetensors.F32, []int{1}, make([]byte, 4))
			w.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		}, ""},
		{"stray tensor", nil, func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "model-00001-of-00002.safetensors"))
			w := safetensors.NewWriter(nil)
			w.Add("model.layers.0.mlp.gate_proj.bias", safetensors.F32, []int{128}, make([]byte, 512))
			w.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		}, `unexpected tensors for a llama model with this config (an unsupported variant?): model.layers.0.mlp.gate_proj.bias`},
		{"duplicate across shards", nil, func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "model-00001-of-00002.safetensors"))
			w := safetensors.NewWriter(nil)
			w.Add("model.norm.weight", safetensors.F32, []int{64}, make([]byte, 256))
			w.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		}, `"model.norm.weight" appears in more than one file`},
		{"no weights", nil, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "model.safetensors")) }, "no model.safetensors"},
		{"no config", nil, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "config.json")) }, "config.json"},
		{"truncated weights", nil, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-100)
		}, "out of range"},
		{"unsupported architecture", nil, func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["model_type"] = "phi3" })
		}, `unsupported architecture: model_type "phi3"`},
		{"untied without lm_head", nil, func(t *testing.T, dir string) {
			rewrite(t, dir, edit("lm_head.weight", func(s []int, d safetensors.DType, b []byte) ([]int, safetensors.DType, []byte, bool) {
				return s, d, b, false
			}))
		}, `missing tensor "lm_head.weight" (and tie_word_embeddings is false)`},
		{"missing scales", &modelgen.Quantization{Bits: 4, GroupSize: 32}, func(t *testing.T, dir string) {
			rewrite(t, dir, edit("model.layers.0.self_attn.o_proj.scales", func(s []int, d safetensors.DType, b []byte) ([]int, safetensors.DType, []byte, bool) {
				return s, d, b, false
			}))
		}, `missing tensor "model.layers.0.self_attn.o_proj.scales" (module "model.layers.0.self_attn.o_proj" has packed U32 weights`},
		{"wrong bits in config", &modelgen.Quantization{Bits: 4, GroupSize: 32}, func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) { c["quantization"] = map[string]any{"bits": 8, "group_size": 32} })
		}, "(8-bit packed)"},
		{"quantized weight not u32", &modelgen.Quantization{Bits: 4, GroupSize: 32}, func(t *testing.T, dir string) {
			rewrite(t, dir, edit("model.layers.0.mlp.up_proj.weight", func(s []int, d safetensors.DType, b []byte) ([]int, safetensors.DType, []byte, bool) {
				return s, safetensors.I32, b, true
			}))
		}, "packed into U32"},
		{"index names a missing tensor", nil, func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"model.norm.weight": "model.safetensors", "ghost": "model.safetensors"})
		}, `lists tensor "ghost"`},
		{"index escapes the directory", nil, func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"model.norm.weight": "../model.safetensors"})
		}, "not a file name in the model directory"},
		{"index names a missing file", nil, func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"model.norm.weight": "model-00009.safetensors"})
		}, "model-00009.safetensors"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := gen(t, func(o *modelgen.Options) { o.Quantization = tc.quant })
			tc.setup(t, dir)
			m, err := model.Load(dir)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				m.Close()
				return
			}
			if err == nil {
				m.Close()
				t.Fatalf("loaded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want one containing %q", err, tc.want)
			}
		})
	}
}

func editConfig(t *testing.T, dir string, fn func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	fn(c)
	b, _ = json.Marshal(c)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeIndex(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMoEParams: NumParams and WeightBytes count every expert, ActiveParams only the k a token uses, in both
// layouts; stacked experts are views of the file's bytes; the routing options are part of the fingerprint and
// of KVCompat, which a dense model's do not change.
func TestMoEParams(t *testing.T) {
	t.Parallel()
	load := func(mod func(*modelgen.Options)) *model.Model {
		m, err := model.Load(gen(t, mod))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	const h, inter, vocab, e, k, qDim, kvDim = 64, 32, 512, 8, 3, 64, 32
	for _, layout := range []modelgen.Layout{modelgen.LayoutHF, modelgen.LayoutMLX} {
		m := load(func(o *modelgen.Options) {
			o.Family, o.NumExperts, o.TopK, o.MoEIntermediate, o.MLPOnlyLayers, o.Layout = model.Qwen3MoE, e, k, inter, []int{}, layout
		})
		vocabRows := int64(m.Config.VocabSize)
		attn := int64(2*h*qDim+2*h*kvDim) + 2*h + 2*16 // q, o, k, v; two norms; q/k norms
		expert := int64(3 * h * inter)
		perLayerAll := attn + e*h + e*expert
		perLayerActive := attn + e*h + k*expert
		want := 2*vocabRows*h + h + 2*perLayerAll
		if got := m.NumParams(); got != want {
			t.Errorf("%s: NumParams %d, want %d", layout, got, want)
		}
		if got, want := m.ActiveParams(), h+vocabRows*h+h+2*perLayerActive; got != want {
			t.Errorf("%s: ActiveParams %d, want %d", layout, got, want)
		}
		if got, want := m.WeightBytes(), 4*m.NumParams(); got != want {
			t.Errorf("%s: WeightBytes %d, want %d", layout, got, want)
		}
		if x := m.Layers[0].MoE.Down; layout == modelgen.LayoutMLX {
			if x.Stacked == nil || &x.Each[1].Weight.Data[0] != &x.Stacked.Weight.Data[h*inter*4] {
				t.Errorf("stacked expert 1 is not a view of the stacked tensor")
			}
		}
	}
	mixed := load(func(o *modelgen.Options) {
		o.Family, o.Layout = model.Qwen3MoE, modelgen.LayoutMLX
		o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32, Overrides: map[string]*model.QuantParams{
			"model.layers.0.mlp.gate": {Bits: 8, GroupSize: 64}, "model.layers.0.mlp.switch_mlp.down_proj": {Bits: 8, GroupSize: 32}}}
	})
	if e := mixed.Layers[0].MoE; e.Router.Quant.Bits != 8 || e.Down.Each[3].Quant.Bits != 8 || e.Gate.Each[3].Quant.Bits != 4 {
		t.Errorf("per-module widths not applied: router %d, down %d, gate %d bits", e.Router.Quant.Bits, e.Down.Each[3].Quant.Bits, e.Gate.Each[3].Quant.Bits)
	}
	base := load(func(o *modelgen.Options) { o.Family = model.Qwen3MoE })
	for name, mod := range map[string]func(*modelgen.Options){
		"top k":    func(o *modelgen.Options) { o.Family, o.TopK = model.Qwen3MoE, 1 },
		"norm":     func(o *modelgen.Options) { o.Family, o.NormTopK = model.Qwen3MoE, true },
		"mlp only": func(o *modelgen.Options) { o.Family, o.MLPOnlyLayers = model.Qwen3MoE, []int{0} },
	} {
		other := load(mod)
		if other.Fingerprint() == base.Fingerprint() || other.KVCompat("tok") == base.KVCompat("tok") {
			t.Errorf("%s: a routing change kept the fingerprint or KVCompat", name)
		}
	}
}

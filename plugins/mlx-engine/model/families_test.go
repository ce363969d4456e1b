package model

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/arch")

func (k NormKind) golden() string {
	if k == NormRMSPlusOne {
		return "rms(1+w)"
	}
	return "rms"
}

func normGolden(n *NormSpec) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprintf("%s/%g", n.Kind.golden(), n.Eps)
}

// archGolden renders an Arch as text, one line per run of identical layers, so that a mapping change shows
// as a readable diff of testdata/arch/*.golden.
func archGolden(c *Config) string {
	a := &c.Arch
	var b strings.Builder
	fmt.Fprintf(&b, "family %s: hidden %d, vocab %d, embed scale %g, final norm %s, tied head %v, max context %d\n",
		c.Family, a.Hidden, a.Vocab, a.EmbedScale, normGolden(&a.FinalNorm), a.TiedHead, c.MaxContext())
	if q := c.Quantization; q != nil {
		fmt.Fprintf(&b, "quantization %+v, %d overrides\n", q.QuantParams, len(q.Overrides))
	}
	line := func(l *LayerSpec) string {
		at := &l.Attn
		r := &at.Rope
		s := fmt.Sprintf("norms in %s, attn out %s, ffn in %s, ffn out %s; attn %d/%d×%d bias q%v k%v v%v o%v qk-norm %s scale %.6g window %d sinks %v; rope %s base %g dims %d",
			normGolden(l.AttnIn), normGolden(l.AttnOut), normGolden(l.FFNIn), normGolden(l.FFNOut),
			at.Heads, at.KVHeads, at.HeadDim, at.QBias, at.KBias, at.VBias, at.OBias, normGolden(at.QKNorm), at.Scale, at.Window, at.Sinks,
			r.Type, r.Base, r.RotaryDims)
		if at.OutputGate {
			s += " output-gate"
		}
		if d := l.DeltaNet; l.Kind == LayerLinear && d != nil {
			s = fmt.Sprintf("norms in %s, attn out %s, ffn in %s, ffn out %s; linear (gated deltanet) key heads %d×%d value heads %d×%d conv %d norm eps %g",
				normGolden(l.AttnIn), normGolden(l.AttnOut), normGolden(l.FFNIn), normGolden(l.FFNOut),
				d.KeyHeads, d.KeyDim, d.ValueHeads, d.ValueDim, d.ConvKernel, d.Eps)
		}
		switch r.Type {
		case RopeLinear:
			s += fmt.Sprintf(" factor %g", r.Factor)
		case RopeYarn:
			s += fmt.Sprintf(" factor %g orig %d beta %g/%g truncate %v attn-factor %g mscale %g/%g", r.Factor, r.OrigMaxPos,
				r.BetaFast, r.BetaSlow, r.Truncate, r.AttnFactor, r.MScale, r.MScaleAllDim)
		}
		f := &l.FFN
		act := map[Act]string{ActSiLU: "swiglu", ActGELUTanh: "geglu(tanh)", ActClampedSwiGLU: "clamped-swiglu"}[f.Act]
		if f.Act == ActClampedSwiGLU {
			act += fmt.Sprintf("(alpha %g, limit %g)", f.Alpha, f.Limit)
		}
		if f.Kind == FFNMoE {
			m := f.MoE
			order := map[RouteOrder]string{SoftmaxThenTopK: "softmax→top-k", TopKThenSoftmax: "top-k→softmax"}[m.Order]
			return s + fmt.Sprintf("; moe %s experts %d top-%d I %d %s norm-top-k %v router-bias %v expert-bias %v shared %d/%v",
				act, m.Experts, m.TopK, m.Intermediate, order, m.NormTopK, m.RouterBias, m.ExpertBias, m.SharedIntermediate, m.SharedGate)
		}
		return s + fmt.Sprintf("; mlp %s I %d bias %v", act, f.Intermediate, f.Bias)
	}
	for i := 0; i < len(a.Layers); {
		cur := line(&a.Layers[i])
		j := i + 1
		for j < len(a.Layers) && line(&a.Layers[j]) == cur {
			j++
		}
		fmt.Fprintf(&b, "layers %d-%d: %s\n", i, j-1, cur)
		i = j
	}
	return b.String()
}

// TestArchGolden maps the real published configs onto blocks and compares the result with
// testdata/arch/<config>.golden (go test -run TestArchGolden -update rewrites them).
func TestArchGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"gemma-3-1b-it.json", "gemma-3-4b-it.json", "gemma-3-12b-it.json", "gpt-oss-20b.json",
		"llama-3.1-8b-instruct.json", "qwen3-0.6b-mixed.json", "qwen3-next-80b-a3b-instruct.json", "qwen3.5-35b-a3b.json",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := archGolden(readConfig(t, name))
			path := filepath.Join("testdata", "arch", strings.TrimSuffix(name, ".json")+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%s: arch differs from %s:\n got:\n%s\nwant:\n%s", name, path, got, want)
			}
		})
	}
}

// TestGemma3Config checks the Gemma 3 mapping's details against the Hugging Face config class, key by key.
func TestGemma3Config(t *testing.T) {
	t.Parallel()
	one := readConfig(t, "gemma-3-1b-it.json")
	if one.Family != Gemma3Text || !one.TieWordEmbeddings || one.SlidingWindow != 0 || one.MaxContext() != 32768 ||
		*one.BOSTokenID != 2 || fmt.Sprint(one.EOSTokenIDs) != "[1 106]" {
		t.Errorf("gemma-3-1b: %+v", one)
	}
	var full []int
	for i, l := range one.Arch.Layers {
		if l.Attn.Window == 0 {
			full = append(full, i)
			if l.Attn.Rope.Base != 1e6 {
				t.Errorf("full layer %d: rope base %g", i, l.Attn.Rope.Base)
			}
		} else if l.Attn.Window != 512 || l.Attn.Rope.Base != 10000 {
			t.Errorf("sliding layer %d: window %d, base %g", i, l.Attn.Window, l.Attn.Rope.Base)
		}
	}
	if fmt.Sprint(full) != "[5 11 17 23]" {
		t.Errorf("full layers %v, want every sixth", full)
	}
	// bfloat16 √1152 = 33.941… rounds to 34; √3840 = 61.967… to 62.
	if one.Arch.EmbedScale != 34 {
		t.Errorf("embed scale %v", one.Arch.EmbedScale)
	}
	twelve := readConfig(t, "gemma-3-12b-it.json")
	if twelve.Family != Gemma3 || twelve.Arch.EmbedScale != 62 || twelve.VocabSize != 262208 || twelve.HeadDim != 256 ||
		twelve.Arch.Layers[0].Attn.Scale != 1.0/16 || twelve.Arch.Layers[5].Attn.Rope.Type != RopeLinear ||
		twelve.Arch.Layers[5].Attn.Rope.Factor != 8 || twelve.Arch.Layers[0].Attn.Rope.Type != RopeDefault {
		t.Errorf("gemma-3-12b: %+v", twelve.Arch.Layers[5])
	}

	base := `"hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100`
	for _, tc := range []struct {
		name, json string
		check      func(c *Config) bool
	}{
		{"float32 embed scale", `{"model_type": "gemma3_text", "torch_dtype": "float32", ` + base + `}`,
			func(c *Config) bool { return c.Arch.EmbedScale == float64(float32(math.Sqrt(96))) }},
		{"query_pre_attn_scalar", `{"model_type": "gemma3_text", "query_pre_attn_scalar": 24, ` + base + `}`,
			func(c *Config) bool { return c.Arch.Layers[0].Attn.Scale == 1/math.Sqrt(24) }},
		{"layer_types", `{"model_type": "gemma3_text", "sliding_window": 8, "layer_types": ["full_attention", "sliding_attention", "full_attention", "sliding_attention"], ` + base + `}`,
			func(c *Config) bool {
				return c.Arch.Layers[0].Attn.Window == 0 && c.Arch.Layers[1].Attn.Window == 8 && c.Arch.Layers[3].Attn.Window == 8
			}},
		{"pattern 2", `{"model_type": "gemma3_text", "sliding_window_pattern": 2, ` + base + `}`,
			func(c *Config) bool { return c.Arch.Layers[0].Attn.Window == 4096 && c.Arch.Layers[1].Attn.Window == 0 }},
		{"rope_parameters v5", `{"model_type": "gemma3_text", "sliding_window_pattern": 2, "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 4, "rope_theta": 50000}, "sliding_attention": {"rope_type": "default", "rope_theta": 500}}, ` + base + `}`,
			func(c *Config) bool {
				f, s := c.Arch.Layers[1].Attn.Rope, c.Arch.Layers[0].Attn.Rope
				return s.Base == 500 && s.Type == RopeDefault && f.Base == 50000 && f.Type == RopeLinear && f.Factor == 4
			}},
		{"text_config over defaults", `{"model_type": "gemma3", "eos_token_id": [1, 106], "text_config": {"model_type": "gemma3_text", "eos_token_id": 5, "hidden_size": 96, "num_hidden_layers": 2}}`,
			func(c *Config) bool {
				return c.HiddenSize == 96 && c.NumLayers == 2 && c.NumHeads == 8 && c.NumKVHeads == 4 && c.VocabSize == 262208 &&
					fmt.Sprint(c.EOSTokenIDs) == "[1 106]" && c.TieWordEmbeddings
			}},
		{"hidden_act alias", `{"model_type": "gemma3_text", "hidden_act": "gelu_pytorch_tanh", ` + base + `}`,
			func(c *Config) bool { return c.Arch.Layers[0].FFN.Act == ActGELUTanh }},
	} {
		c, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("%s: %+v", tc.name, c.Arch.Layers[0])
		}
	}
	for _, tc := range []struct{ name, json, want string }{
		{"attn softcap", `{"model_type": "gemma3_text", "attn_logit_softcapping": 50.0, ` + base + `}`, "attn_logit_softcapping = 50.0 is not supported"},
		{"final softcap", `{"model_type": "gemma3_text", "final_logit_softcapping": 30.0, ` + base + `}`, "final_logit_softcapping"},
		{"bidirectional", `{"model_type": "gemma3_text", "use_bidirectional_attention": true, ` + base + `}`, "use_bidirectional_attention"},
		{"gelu exact", `{"model_type": "gemma3_text", "hidden_activation": "gelu", ` + base + `}`, `hidden_activation "gelu"`},
		{"layer type", `{"model_type": "gemma3_text", "layer_types": ["full_attention", "chunked_attention", "full_attention", "full_attention"], ` + base + `}`, `layer_types[1] = "chunked_attention"`},
		{"layer types count", `{"model_type": "gemma3_text", "layer_types": ["full_attention"], ` + base + `}`, "layer_types has 1 entries for 4 layers"},
		{"yarn", `{"model_type": "gemma3_text", "rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 10}, ` + base + `}`, `rope type "yarn" is not supported for this family`},
		{"window", `{"model_type": "gemma3_text", "sliding_window": 0, ` + base + `}`, "sliding_window 0"},
		{"pattern", `{"model_type": "gemma3_text", "sliding_window_pattern": 0, ` + base + `}`, "sliding_window_pattern 0"},
		{"text_config", `{"model_type": "gemma3", "text_config": [1]}`, "text_config"},
	} {
		if _, err := ParseConfig([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestGptOSSConfig checks the gpt-oss mapping against the Hugging Face config class.
func TestGptOSSConfig(t *testing.T) {
	t.Parallel()
	c := readConfig(t, "gpt-oss-20b.json")
	if c.Family != GptOSS || c.Quantization != nil || c.TieWordEmbeddings || c.SlidingWindow != 0 || c.MaxContext() != 131072 {
		t.Errorf("gpt-oss-20b: %+v", c)
	}
	for i, l := range c.Arch.Layers {
		want := 0
		if i%2 == 0 {
			want = 128
		}
		if l.Attn.Window != want || !l.Attn.Sinks || l.Attn.Rope.Type != RopeYarn || l.Attn.Rope.Truncate {
			t.Errorf("layer %d: %+v", i, l.Attn)
		}
	}
	base := `"hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "num_local_experts": 8, "num_experts_per_tok": 2`
	for _, tc := range []struct {
		name, json string
		check      func(c *Config) bool
	}{
		{"defaults", `{"model_type": "gpt_oss", ` + base + `}`, func(c *Config) bool {
			r := c.Arch.Layers[0].Attn.Rope
			f := c.Arch.Layers[0].FFN
			return r.Type == RopeYarn && r.Factor == 32 && r.OrigMaxPos == 4096 && !r.Truncate && r.Base == 150000 &&
				f.Limit == 7 && f.Alpha == 1.702 && f.MoE.TopK == 2 && c.Arch.Layers[0].Attn.Window == 128 &&
				c.Arch.Layers[1].Attn.Window == 0 && c.Arch.Layers[0].Attn.OBias && c.RMSNormEps == 1e-5
		}},
		{"experts_per_token", `{"model_type": "gpt_oss", "experts_per_token": 3, "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "num_local_experts": 8}`,
			func(c *Config) bool { return c.Arch.Layers[0].FFN.MoE.TopK == 3 }},
		{"rope_parameters", `{"model_type": "gpt_oss", "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000, "factor": 4, "original_max_position_embeddings": 16, "beta_fast": 8, "beta_slow": 2, "truncate": true}, ` + base + `}`,
			func(c *Config) bool {
				r := c.Arch.Layers[0].Attn.Rope
				return r.Base == 1000 && r.Factor == 4 && r.BetaFast == 8 && r.BetaSlow == 2 && r.Truncate
			}},
		{"limit", `{"model_type": "gpt_oss", "swiglu_limit": 3.5, ` + base + `}`, func(c *Config) bool { return c.Arch.Layers[2].FFN.Limit == 3.5 }},
		{"rope null", `{"model_type": "gpt_oss", "rope_scaling": null, ` + base + `}`, func(c *Config) bool { return c.Arch.Layers[0].Attn.Rope.Type == RopeDefault }},
		{"mlx quantization", `{"model_type": "gpt_oss", "quantization": {"group_size": 64, "bits": 8, "model.layers.0.mlp.experts.gate_proj": {"group_size": 32, "bits": 4, "mode": "mxfp4"}, "model.layers.0.mlp.router": {"group_size": 64, "bits": 8}}, ` + base + `}`,
			func(c *Config) bool {
				p, ok, given := c.Quantization.For("model.layers.0.mlp.experts.gate_proj")
				r, _, _ := c.Quantization.For("model.layers.0.mlp.router")
				return ok && given && p == QuantParams{32, 4, ModeMXFP4} && r == QuantParams{64, 8, ModeAffine}
			}},
	} {
		c, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("%s: %+v %+v", tc.name, c.Arch.Layers[0].Attn, c.Arch.Layers[0].FFN)
		}
	}
	for _, tc := range []struct{ name, json, want string }{
		{"top-k", `{"model_type": "gpt_oss", "num_experts_per_tok": 9, "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "num_local_experts": 8}`, "num_experts_per_tok 9"},
		{"linear rope", `{"model_type": "gpt_oss", "rope_scaling": {"rope_type": "linear", "factor": 2}, ` + base + `}`, `rope type "linear" is not supported for this family`},
		{"yarn without orig", `{"model_type": "gpt_oss", "rope_scaling": {"rope_type": "yarn", "factor": 2}, ` + base + `}`, "original_max_position_embeddings"},
		{"limit", `{"model_type": "gpt_oss", "swiglu_limit": -1, ` + base + `}`, "swiglu_limit"},
		{"layer type", `{"model_type": "gpt_oss", "layer_types": ["full_attention", "x", "full_attention", "full_attention"], ` + base + `}`, `layer_types[1] = "x"`},
		{"gptq", `{"model_type": "gpt_oss", "quantization_config": {"quant_method": "gptq"}, ` + base + `}`, `method "gptq"`},
		{"silu only", `{"model_type": "gpt_oss", "hidden_act": "gelu", ` + base + `}`, "hidden_act"},
	} {
		if _, err := ParseConfig([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

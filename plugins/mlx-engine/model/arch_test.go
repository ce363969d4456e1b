package model

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// describeArch renders a as text, one line per run of identical layers, for golden files a reader can check
// against the config.json beside them.
func describeArch(a *Arch) string {
	var b strings.Builder
	fmt.Fprintf(&b, "hidden %d, vocab %d, final norm %s, tied head %v, embed scale %g\n", a.Hidden, a.Vocab,
		describeNorm(&a.FinalNorm), a.TiedHead, a.EmbedScale)
	var lines []string
	for i := range a.Layers {
		lines = append(lines, describeLayer(&a.Layers[i]))
	}
	for i := 0; i < len(lines); {
		j := i
		for j+1 < len(lines) && lines[j+1] == lines[i] {
			j++
		}
		if i == j {
			fmt.Fprintf(&b, "layer %d: %s\n", i, lines[i])
		} else {
			fmt.Fprintf(&b, "layers %d-%d: %s\n", i, j, lines[i])
		}
		i = j + 1
	}
	return b.String()
}

func describeNorm(n *NormSpec) string {
	if n == nil {
		return "-"
	}
	kind := "rms"
	if n.Kind == NormRMSPlusOne {
		kind = "rms(1+w)"
	}
	return fmt.Sprintf("%s(eps %g)", kind, n.Eps)
}

func describeLayer(l *LayerSpec) string {
	at := &l.Attn
	r := &at.Rope
	s := fmt.Sprintf("norms [%s %s %s %s]; attn heads %d/%d×%d bias q%v k%v v%v o%v qknorm %s scale %.6g window %d sinks %v rope %s base %g dims %d factor %g",
		describeNorm(l.AttnIn), describeNorm(l.AttnOut), describeNorm(l.FFNIn), describeNorm(l.FFNOut),
		at.Heads, at.KVHeads, at.HeadDim, at.QBias, at.KBias, at.VBias, at.OBias, describeNorm(at.QKNorm), at.Scale,
		at.Window, at.Sinks, r.Type, r.Base, r.RotaryDims, r.Factor)
	f := &l.FFN
	if f.Kind == FFNDense {
		return s + fmt.Sprintf("; mlp act %d intermediate %d bias %v", f.Act, f.Intermediate, f.Bias)
	}
	m := f.MoE
	order := "softmax-then-topk"
	if m.Order == TopKThenSoftmax {
		order = "topk-then-softmax"
	}
	return s + fmt.Sprintf("; moe act %d experts %d top %d intermediate %d %s norm-topk %v router-bias %v expert-bias %v shared %d gate %v",
		f.Act, m.Experts, m.TopK, m.Intermediate, order, m.NormTopK, m.RouterBias, m.ExpertBias, m.SharedIntermediate, m.SharedGate)
}

// TestMoEArchGolden: the published configs of the mixture-of-experts families map onto the blocks recorded in
// testdata/*.arch (go test -run TestMoEArchGolden -update rewrites them; check the diff against the config).
func TestMoEArchGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"qwen3-30b-a3b.json", "qwen1.5-moe-a2.7b.json", "mixtral-8x7b-v0.1.json", "qwen3-0.6b-mixed.json"} {
		t.Run(name, func(t *testing.T) {
			c := readConfig(t, name)
			got := describeArch(&c.Arch)
			golden := filepath.Join("testdata", strings.TrimSuffix(name, ".json")+".arch")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("arch of %s:\n%s\nwant (%s):\n%s", name, got, golden, want)
			}
		})
	}
}

// TestMoEConfigs: the keys that decide sparse and dense layers, the top-k normalisation of each family's
// config class, and the refusals.
func TestMoEConfigs(t *testing.T) {
	t.Parallel()
	base := `"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100`
	moeLayers := func(c *Config) string {
		var s []byte
		for _, l := range c.Arch.Layers {
			if l.FFN.Kind == FFNMoE {
				s = append(s, 'E')
			} else {
				s = append(s, 'D')
			}
		}
		return string(s)
	}
	for _, tc := range []struct {
		name  string
		json  string
		check func(*Config) bool
		err   string
	}{
		{"qwen3_moe defaults", `{"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, ` + base + `}`,
			func(c *Config) bool {
				m := c.Arch.Layers[0].FFN.MoE
				return moeLayers(c) == "EEEE" && !m.NormTopK && m.Experts == 8 && m.TopK == 2 && m.Intermediate == 32 && m.SharedIntermediate == 0 && c.QKNorm
			}, ""},
		{"qwen3_moe sparse step and mlp_only_layers", `{"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 2, "mlp_only_layers": [3], "norm_topk_prob": true, ` + base + `}`,
			func(c *Config) bool {
				return moeLayers(c) == "DEDD" && c.Arch.Layers[1].FFN.MoE.NormTopK && c.Arch.Layers[0].FFN.Intermediate == 128
			}, ""},
		{"qwen3_moe without experts is dense", `{"model_type": "qwen3_moe", "num_experts": 0, ` + base + `}`,
			func(c *Config) bool { return moeLayers(c) == "DDDD" }, ""},
		{"qwen2_moe shared expert", `{"model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, ` + base + `}`,
			func(c *Config) bool {
				m := c.Arch.Layers[0].FFN.MoE
				return moeLayers(c) == "EEEE" && m.SharedIntermediate == 64 && m.SharedGate && !m.NormTopK && c.AttentionBias && !c.OutputBias
			}, ""},
		{"mixtral always renormalises", `{"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": false, ` + base + `}`,
			func(c *Config) bool {
				m := c.Arch.Layers[0].FFN.MoE
				return moeLayers(c) == "EEEE" && m.NormTopK && m.Intermediate == 128 && c.RopeTheta == 1e6
			}, ""},
		{"mixtral sliding window caps context", `{"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 4096, "max_position_embeddings": 32768, ` + base + `}`,
			func(c *Config) bool { return c.MaxContext() == 4096 }, ""},
		{"top k above experts", `{"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3, ` + base + `}`, nil, "num_experts_per_tok = 3 is more than num_local_experts = 2"},
		{"missing top k", `{"model_type": "qwen3_moe", "num_experts": 8, "moe_intermediate_size": 32, ` + base + `}`, nil, "needs num_experts, num_experts_per_tok and moe_intermediate_size"},
		{"mlp_only_layers out of range", `{"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "mlp_only_layers": [4], ` + base + `}`, nil, "mlp_only_layers names layer 4 of 4"},
		{"zero sparse step", `{"model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 0, ` + base + `}`, nil, "decoder_sparse_step = 0 is out of range"},
		{"qwen sliding window", `{"model_type": "qwen3_moe", "use_sliding_window": true, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, ` + base + `}`, nil, "use_sliding_window is true"},
		{"architectures only", `{"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, ` + base + `}`,
			func(c *Config) bool { return c.Family == Qwen3MoE }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("%s", describeArch(&c.Arch))
			}
		})
	}
}

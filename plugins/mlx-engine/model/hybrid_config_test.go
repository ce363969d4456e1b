package model

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestHybridRealConfigs: the published Qwen3-Next and Qwen3.5 MoE configs map onto linear and gated-attention
// layers as the Hugging Face config classes place them.
func TestHybridRealConfigs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file                    string
		family                  Family
		layers, experts, topK   int
		theta                   float64
		eos                     []int
		denseIntermediate, ctx  int
		keyHeads, valueHeads    int
		keyDim, valueDim, convK int
	}{
		{"qwen3-next-80b-a3b-instruct.json", Qwen3Next, 48, 512, 10, 5e6, []int{151645}, 5120, 262144, 16, 32, 128, 128, 4},
		{"qwen3.5-35b-a3b.json", Qwen35MoE, 40, 256, 8, 1e7, []int{248044}, 512, 262144, 16, 32, 128, 128, 4},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			c := readConfig(t, tc.file)
			if c.Family != tc.family || c.NumLayers != tc.layers || c.HiddenSize != 2048 || c.HeadDim != 256 ||
				c.NumHeads != 16 || c.NumKVHeads != 2 || c.RopeTheta != tc.theta || c.TieWordEmbeddings ||
				!reflect.DeepEqual(c.EOSTokenIDs, tc.eos) || c.MaxContext() != tc.ctx || !c.QKNorm {
				t.Fatalf("config %+v", c)
			}
			want := DeltaNetSpec{KeyHeads: tc.keyHeads, ValueHeads: tc.valueHeads, KeyDim: tc.keyDim, ValueDim: tc.valueDim,
				ConvKernel: tc.convK, Eps: 1e-6}
			for i := range c.Arch.Layers {
				l := &c.Arch.Layers[i]
				full := (i+1)%4 == 0
				switch {
				case full && (l.Kind != LayerAttention || !l.Attn.OutputGate || l.Attn.Rope.RotaryDims != 64 || l.DeltaNet != nil ||
					l.Attn.QKNorm == nil || l.Attn.QKNorm.Kind != NormRMS):
					t.Errorf("layer %d: want gated full attention with 64 rotary dims, got %+v", i, l)
				case !full && (l.Kind != LayerLinear || l.DeltaNet == nil || *l.DeltaNet != want || l.Attn != (AttnSpec{})):
					t.Errorf("layer %d: want linear %+v, got %+v", i, want, l)
				}
				m := l.FFN.MoE
				if l.FFN.Kind != FFNMoE || m.Experts != tc.experts || m.TopK != tc.topK || m.Intermediate != 512 ||
					m.SharedIntermediate != 512 || !m.SharedGate || !m.NormTopK {
					t.Errorf("layer %d: ffn %+v %+v", i, l.FFN, m)
				}
				if l.AttnIn.Kind != NormRMS || l.FFNIn.Kind != NormRMS || l.AttnOut != nil || l.FFNOut != nil {
					t.Errorf("layer %d: norms %+v", i, l)
				}
			}
			if d := want; d.ConvDim() != 2*16*128+32*128 || !reflect.DeepEqual(d.StateShape(), []int{32, 128, 128}) ||
				!reflect.DeepEqual(d.ConvStateShape(), []int{3, 8192}) {
				t.Errorf("derived sizes: conv %d, state %v, window %v", d.ConvDim(), d.StateShape(), d.ConvStateShape())
			}
			if c.Arch.Dense() || !c.Arch.HasLinear() || c.Arch.HasWindows() {
				t.Errorf("Dense %v, HasLinear %v, HasWindows %v", c.Arch.Dense(), c.Arch.HasLinear(), c.Arch.HasWindows())
			}
		})
	}
}

// tinyHybrid is a small hybrid text config: six layers, layers 2 and 5 full attention.
const tinyHybrid = `"hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
	"head_dim": 16, "vocab_size": 300, "rms_norm_eps": 1e-6, "rope_theta": 10000, "partial_rotary_factor": 0.25,
	"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
	"linear_conv_kernel_dim": 4, "full_attention_interval": 3, "num_experts": 8, "num_experts_per_tok": 2,
	"moe_intermediate_size": 32, "shared_expert_intermediate_size": 48`

// TestHybridConfigVariants: flat and nested configs, layer_types against the interval, and the families' MoE
// placement.
func TestHybridConfigVariants(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, s string) *Config {
		t.Helper()
		c, err := ParseConfig([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	kinds := func(c *Config) string {
		var b strings.Builder
		for _, l := range c.Arch.Layers {
			k := "L"
			if l.Kind == LayerAttention {
				k = "A"
			}
			if l.FFN.Kind == FFNMoE {
				k += "m"
			}
			b.WriteString(k + " ")
		}
		return strings.TrimSpace(b.String())
	}
	next := parse(t, `{"model_type": "qwen3_next", "intermediate_size": 96, "mlp_only_layers": [1], `+tinyHybrid+`}`)
	if got := kinds(next); got != "Lm L Am Lm Lm Am" {
		t.Errorf("qwen3_next kinds %q", got)
	}
	if next.Arch.Layers[1].FFN.Intermediate != 96 || next.Arch.Layers[2].Attn.Rope.RotaryDims != 4 {
		t.Errorf("qwen3_next dense layer %+v, rope %+v", next.Arch.Layers[1].FFN, next.Arch.Layers[2].Attn.Rope)
	}
	step := parse(t, `{"model_type": "qwen3_next", "intermediate_size": 96, "decoder_sparse_step": 2, `+tinyHybrid+`}`)
	if got := kinds(step); got != "L Lm A Lm L Am" {
		t.Errorf("decoder_sparse_step 2: kinds %q", got)
	}
	types := `"layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention"]`
	byTypes := parse(t, `{"model_type": "qwen3_next", "intermediate_size": 96, "mlp_only_layers": [1], `+types+`, `+
		strings.Replace(tinyHybrid, `"full_attention_interval": 3`, `"full_attention_interval": 4`, 1)+`}`)
	if !reflect.DeepEqual(byTypes.Arch, next.Arch) {
		t.Errorf("layer_types does not win over full_attention_interval:\n%s\n%s", kinds(byTypes), kinds(next))
	}
	odd := parse(t, `{"model_type": "qwen3_next", "intermediate_size": 96, "layer_types": ["full_attention", "linear_attention",
		"linear_attention", "linear_attention", "full_attention", "full_attention"], `+tinyHybrid+`}`)
	if got := kinds(odd); got != "Am Lm Lm Lm Am Am" {
		t.Errorf("layer_types kinds %q", got)
	}
	defaultInterval := parse(t, `{"model_type": "qwen3_next", "intermediate_size": 96, `+
		strings.Replace(tinyHybrid, `"full_attention_interval": 3,`, ``, 1)+`}`)
	if got := kinds(defaultInterval); got != "Lm Lm Lm Am Lm Lm" {
		t.Errorf("default interval 4: kinds %q", got)
	}

	// qwen3_5_moe: nested under text_config, RoPE in rope_parameters; the same keys flat give the same arch.
	nestedMoE := parse(t, `{"model_type": "qwen3_5_moe", "tie_word_embeddings": true, "eos_token_id": 7,
		"quantization": {"group_size": 64, "bits": 4}, "vision_config": {"depth": 2},
		"text_config": {"model_type": "qwen3_5_moe_text", `+types+`, "rope_parameters": {"rope_type": "default",
		"rope_theta": 5000, "partial_rotary_factor": 0.5, "mrope_section": [1, 1, 0], "mrope_interleaved": true}, `+
		strings.Replace(tinyHybrid, `"rope_theta": 10000, "partial_rotary_factor": 0.25,`, ``, 1)+`}}`)
	if got := kinds(nestedMoE); got != "Lm Lm Am Lm Lm Am" {
		t.Errorf("qwen3_5_moe kinds %q", got)
	}
	if nestedMoE.RopeTheta != 5000 || nestedMoE.Arch.Layers[2].Attn.Rope.RotaryDims != 8 || !nestedMoE.TieWordEmbeddings ||
		!reflect.DeepEqual(nestedMoE.EOSTokenIDs, []int{7}) || nestedMoE.Quantization == nil || nestedMoE.Quantization.Bits != 4 ||
		!nestedMoE.Arch.Layers[0].FFN.MoE.NormTopK {
		t.Errorf("qwen3_5_moe: %+v", nestedMoE)
	}
	flatMoE := parse(t, `{"model_type": "qwen3_5_moe", "tie_word_embeddings": true, `+types+`, "rope_parameters": {"rope_type": "default",
		"rope_theta": 5000, "partial_rotary_factor": 0.5}, `+
		strings.Replace(tinyHybrid, `"rope_theta": 10000, "partial_rotary_factor": 0.25,`, ``, 1)+`}`)
	if !reflect.DeepEqual(flatMoE.Arch, nestedMoE.Arch) {
		t.Errorf("flat and nested qwen3_5_moe configs differ:\n%+v\n%+v", flatMoE.Arch, nestedMoE.Arch)
	}
	dense := parse(t, `{"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {"intermediate_size": 80, `+tinyHybrid+`}}`)
	if got := kinds(dense); dense.Family != Qwen35 || got != "L L A L L A" || dense.Arch.Layers[0].FFN.Intermediate != 80 {
		t.Errorf("qwen3_5 (dense): family %s, kinds %q", dense.Family, got)
	}
}

// TestHybridConfigErrors: configs the hybrid families refuse, each with a message naming the problem.
func TestHybridConfigErrors(t *testing.T) {
	t.Parallel()
	next := func(extra, drop string) string {
		base := tinyHybrid
		if drop != "" {
			base = strings.Replace(base, drop, "", 1)
		}
		return `{"model_type": "qwen3_next", "intermediate_size": 96, ` + extra + base + `}`
	}
	for _, tc := range []struct{ name, json, want string }{
		{"missing value heads", next("", `"linear_num_value_heads": 4,`), "linear_num_value_heads is missing"},
		{"Nv % Nk", strings.Replace(next("", ""), `"linear_num_value_heads": 4`, `"linear_num_value_heads": 5`, 1), "not a multiple of linear_num_key_heads"},
		{"missing key dim", next("", `"linear_key_head_dim": 16,`), "linear_key_head_dim is missing"},
		{"conv kernel 1", strings.Replace(next("", ""), `"linear_conv_kernel_dim": 4`, `"linear_conv_kernel_dim": 1`, 1), "linear_conv_kernel_dim 1 is not supported"},
		{"unknown layer kind", next(`"layer_types": ["linear_attention", "mamba", "full_attention", "linear_attention", "linear_attention", "full_attention"], `, ""), `layer_types[1] = "mamba" is not supported`},
		{"layer_types length", next(`"layer_types": ["linear_attention", "full_attention"], `, ""), "layer_types has 2 entries for 6 layers"},
		{"interval 0", strings.Replace(next("", ""), `"full_attention_interval": 3`, `"full_attention_interval": 0`, 1), "full_attention_interval = 0 is out of range"},
		{"ungated attention", next(`"attn_output_gate": false, `, ""), "attn_output_gate false is not supported"},
		{"sliding window", next(`"use_sliding_window": true, `, ""), "use_sliding_window is true"},
		{"odd rotary dims", strings.Replace(next("", ""), `"partial_rotary_factor": 0.25`, `"partial_rotary_factor": 0.1`, 1), "rotary dims"},
		{"rotary factor 0", strings.Replace(next("", ""), `"partial_rotary_factor": 0.25`, `"partial_rotary_factor": 0`, 1), "partial_rotary_factor 0 is out of range"},
		{"llama3 rope", next(`"rope_scaling": {"rope_type": "llama3", "factor": 8}, `, ""), `rope type "llama3" is not supported`},
		{"no shared expert", next("", `, "shared_expert_intermediate_size": 48`), "shared_expert_intermediate_size is missing"},
		{"mlp_only_layers out of range", next(`"mlp_only_layers": [6], `, ""), "mlp_only_layers names layer 6 of 6"},
		{"moe without experts", `{"model_type": "qwen3_5_moe", "text_config": {` + strings.Replace(tinyHybrid, `"num_experts": 8,`, ``, 1) + `}}`, "num_experts is missing"},
		{"hidden_act", next(`"hidden_act": "gelu", `, ""), `hidden_act "gelu" is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.json)) {
				t.Fatalf("test config is not JSON: %s", tc.json)
			}
			_, err := ParseConfig([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestHybridKVCompat: KVCompat and Fingerprint cover the layer kinds and the linear layers' state shapes, and
// models without linear layers keep the strings they had.
func TestHybridKVCompat(t *testing.T) {
	t.Parallel()
	compat := func(t *testing.T, s string) string {
		t.Helper()
		c, err := ParseConfig([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		m := &Model{Config: *c, fingerprint: "fp1:0"}
		return m.KVCompat("tok") + " " + m.Fingerprint()
	}
	base := `{"model_type": "qwen3_next", "intermediate_size": 96, ` + tinyHybrid + `}`
	ref := compat(t, base)
	if compat(t, base) != ref {
		t.Fatal("KVCompat is not deterministic")
	}
	for _, tc := range []struct{ name, from, to string }{
		{"value heads", `"linear_num_value_heads": 4`, `"linear_num_value_heads": 8`},
		{"conv kernel", `"linear_conv_kernel_dim": 4`, `"linear_conv_kernel_dim": 3`},
		{"value dim", `"linear_value_head_dim": 8`, `"linear_value_head_dim": 16`},
		{"layer kind", `"full_attention_interval": 3`, `"layer_types": ["linear_attention", "full_attention", "full_attention", "linear_attention", "linear_attention", "full_attention"]`},
		{"rotary dims", `"partial_rotary_factor": 0.25`, `"partial_rotary_factor": 0.5`},
	} {
		s := strings.Replace(base, tc.from, tc.to, 1)
		if s == base {
			t.Fatalf("%s: no change", tc.name)
		}
		got := compat(t, s)
		if strings.Fields(got)[0] == strings.Fields(ref)[0] || strings.Fields(got)[1] == strings.Fields(ref)[1] {
			t.Errorf("%s: KVCompat or Fingerprint unchanged: %s vs %s", tc.name, got, ref)
		}
	}
	// A model without linear layers (and without windows) has no layer kinds: its strings are scheme 1's.
	llama, err := ParseConfig([]byte(`{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}`))
	if err != nil {
		t.Fatal(err)
	}
	if llama.Arch.layerKinds() != nil {
		t.Error("a dense model has layer kinds")
	}
}

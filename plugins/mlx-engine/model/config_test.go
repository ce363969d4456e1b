package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readConfig(t *testing.T, name string) *Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

func TestParseRealConfigs(t *testing.T) {
	t.Parallel()
	llama := readConfig(t, "llama-3.1-8b-instruct.json")
	if llama.Family != Llama || llama.HeadDim != 128 || llama.NumKVHeads != 8 || llama.RopeTheta != 500000 ||
		llama.RopeScaling == nil || llama.RopeScaling.Factor != 8 || llama.RopeScaling.OriginalMaxPositionEmbeddings != 8192 ||
		!reflect.DeepEqual(llama.EOSTokenIDs, []int{128001, 128008, 128009}) || *llama.BOSTokenID != 128000 ||
		llama.TieWordEmbeddings || llama.AttentionBias || llama.QKNorm || llama.Quantization != nil || llama.MaxContext() != 131072 {
		t.Errorf("llama 3.1: %+v", llama)
	}
	qwen2 := readConfig(t, "qwen2.5-0.5b-instruct-4bit.json")
	if qwen2.Family != Qwen2 || qwen2.HeadDim != 64 || !qwen2.AttentionBias || qwen2.OutputBias || !qwen2.TieWordEmbeddings ||
		qwen2.SlidingWindow != 0 || qwen2.Quantization == nil || qwen2.Quantization.Bits != 4 || qwen2.Quantization.GroupSize != 64 ||
		!reflect.DeepEqual(qwen2.EOSTokenIDs, []int{151645}) {
		t.Errorf("qwen2.5: %+v", qwen2)
	}
	qwen3 := readConfig(t, "qwen3-0.6b-mixed.json")
	if qwen3.Family != Qwen3 || qwen3.HeadDim != 128 || qwen3.NumHeads*qwen3.HeadDim != 2048 || !qwen3.QKNorm || qwen3.AttentionBias {
		t.Errorf("qwen3: %+v", qwen3)
	}
	q := qwen3.Quantization
	for _, tc := range []struct {
		path             string
		p                QuantParams
		quantized, given bool
	}{
		{"model.embed_tokens", QuantParams{32, 8, ModeAffine}, true, true},
		{"model.layers.0.mlp.down_proj", QuantParams{64, 8, ModeAffine}, true, true},
		{"lm_head", QuantParams{}, false, true},
		{"model.layers.1.self_attn.q_proj", QuantParams{64, 4, ModeAffine}, true, true},
		{"model.layers.5.mlp.up_proj", QuantParams{64, 4, ModeAffine}, true, false},
	} {
		p, ok, given := q.For(tc.path)
		if p != tc.p || ok != tc.quantized || given != tc.given {
			t.Errorf("For(%s) = %+v %v %v, want %+v %v %v", tc.path, p, ok, given, tc.p, tc.quantized, tc.given)
		}
	}
	mistral := readConfig(t, "mistral-7b-v0.1.json")
	if mistral.Family != Mistral || mistral.SlidingWindow != 4096 || mistral.MaxContext() != 4096 || mistral.RopeTheta != 10000 {
		t.Errorf("mistral: %+v", mistral)
	}
}

func TestParseConfigDefaultsAndVariants(t *testing.T) {
	t.Parallel()
	base := `"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100`
	for _, tc := range []struct {
		name  string
		json  string
		check func(*Config) bool
	}{
		{"architectures only", `{"architectures": ["MistralForCausalLM"], ` + base + `}`, func(c *Config) bool { return c.Family == Mistral }},
		{"defaults", `{"model_type": "llama", ` + base + `}`, func(c *Config) bool {
			return c.NumKVHeads == 4 && c.HeadDim == 16 && c.RMSNormEps == 1e-6 && c.RopeTheta == 10000 && c.EOSTokenIDs == nil
		}},
		{"qwen default theta", `{"model_type": "qwen3", ` + base + `}`, func(c *Config) bool { return c.RopeTheta == 1e6 && c.QKNorm }},
		{"default rope type", `{"model_type": "llama", "rope_scaling": {"rope_type": "default"}, ` + base + `}`, func(c *Config) bool { return c.RopeScaling == nil }},
		{"rope_parameters", `{"model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 32, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}, ` + base + `}`,
			func(c *Config) bool { return c.RopeTheta == 5e5 && c.RopeScaling != nil && c.RopeScaling.Factor == 32 }},
		{"llama attention_bias", `{"model_type": "llama", "attention_bias": true, ` + base + `}`, func(c *Config) bool { return c.AttentionBias && c.OutputBias }},
		{"eos null", `{"model_type": "llama", "eos_token_id": null, ` + base + `}`, func(c *Config) bool { return c.EOSTokenIDs == nil }},
		{"quantization_config only", `{"model_type": "llama", "quantization_config": {"group_size": 32, "bits": 8, "mode": "affine"}, ` + base + `}`,
			func(c *Config) bool { return c.Quantization.Bits == 8 && c.Quantization.GroupSize == 32 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("unexpected config %+v", c)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	base := `"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100`
	for _, tc := range []struct{ name, json, want string }{
		{"not json", `{`, "not a valid config"},
		{"unsupported model_type", `{"model_type": "gemma2", ` + base + `}`, `unsupported architecture: model_type "gemma2"`},
		{"unsupported architectures", `{"architectures": ["PhiForCausalLM"], ` + base + `}`, "unsupported architecture"},
		{"no type", `{` + base + `}`, "names no model_type"},
		{"missing size", `{"model_type": "llama", "hidden_size": 64}`, "intermediate_size is missing"},
		{"zero layers", `{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 0, "num_attention_heads": 4, "vocab_size": 100}`, "num_hidden_layers = 0 is out of range"},
		{"huge vocab", `{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 1000000000}`, "vocab_size"},
		{"bad gqa", `{"model_type": "llama", "num_key_value_heads": 3, ` + base + `}`, "not a multiple"},
		{"indivisible head", `{"model_type": "llama", "num_attention_heads": 5, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 100}`, "not divisible"},
		{"odd head_dim", `{"model_type": "llama", "head_dim": 15, ` + base + `}`, "must be even"},
		{"linear rope", `{"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2}, ` + base + `}`, `rope_scaling type "linear" is not supported`},
		{"yarn rope", `{"model_type": "qwen2", "rope_scaling": {"rope_type": "yarn", "factor": 4}, ` + base + `}`, `"yarn" is not supported`},
		{"incomplete llama3", `{"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8}, ` + base + `}`, "needs factor"},
		{"sliding qwen", `{"model_type": "qwen2", "use_sliding_window": true, "sliding_window": 4096, ` + base + `}`, "sliding-window attention is not supported"},
		{"gelu", `{"model_type": "llama", "hidden_act": "gelu", ` + base + `}`, "hidden_act"},
		{"bad eos", `{"model_type": "llama", "eos_token_id": "x", ` + base + `}`, "eos_token_id"},
		{"negative eos", `{"model_type": "llama", "eos_token_id": [1, -2], ` + base + `}`, "negative token id"},
		{"3-bit", `{"model_type": "llama", "quantization": {"group_size": 64, "bits": 3}, ` + base + `}`, "3-bit quantization is not supported"},
		{"group 16", `{"model_type": "llama", "quantization": {"group_size": 16, "bits": 4}, ` + base + `}`, "group_size 16"},
		{"nvfp4", `{"model_type": "llama", "quantization": {"group_size": 16, "bits": 4, "mode": "nvfp4"}, ` + base + `}`, `mode "nvfp4"`},
		{"mxfp4 group 64", `{"model_type": "llama", "quantization": {"group_size": 64, "bits": 4, "mode": "mxfp4"}, ` + base + `}`, `mxfp4 quantization has 4 bits in groups of 32`},
		{"mxfp4 override 8-bit", `{"model_type": "llama", "quantization": {"group_size": 64, "bits": 4, "lm_head": {"bits": 8, "mode": "mxfp4"}}, ` + base + `}`, `"lm_head": mxfp4`},
		{"gptq", `{"model_type": "llama", "quantization_config": {"quant_method": "gptq", "bits": 4}, ` + base + `}`, `method "gptq"`},
		{"bad override", `{"model_type": "llama", "quantization": {"group_size": 64, "bits": 4, "lm_head": {"bits": 8}}, ` + base + `}`, "needs group_size and bits"},
		{"override bits", `{"model_type": "llama", "quantization": {"group_size": 64, "bits": 4, "lm_head": {"bits": 5, "group_size": 64}}, ` + base + `}`, `"lm_head": 5-bit`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestDequantizeMLXPacking pins MLX's layout with a hand-packed answer: 4-bit values 0..7 in one little-endian
// uint32 are 0x76543210 (first value in the lowest bits); 8-bit values 1, 2, 3, 4 are 0x04030201.
func TestDequantizeMLXPacking(t *testing.T) {
	t.Parallel()
	le := func(w ...uint32) []byte {
		var b []byte
		for _, x := range w {
			b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
		}
		return b
	}
	got := make([]float32, 32)
	Dequantize(got, le(0x76543210, 0xfedcba98, 0x01234567, 0x89abcdef), []float32{0.5}, []float32{-1}, 4, 32)
	want := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8}
	for i, q := range want {
		if got[i] != 0.5*q-1 {
			t.Fatalf("4-bit element %d = %g, want %g", i, got[i], 0.5*q-1)
		}
	}
	got8 := make([]float32, 32)
	words := make([]uint32, 8)
	words[0] = 0x04030201
	words[7] = 0xff000080
	Dequantize(got8, le(words...), []float32{2}, []float32{1}, 8, 32)
	if got8[0] != 3 || got8[3] != 9 || got8[28] != 257 || got8[30] != 1 || got8[31] != 511 {
		t.Errorf("8-bit: %v", got8)
	}
	got2 := make([]float32, 32)
	Dequantize(got2, le(0xe4e4e4e4, 0), []float32{1}, []float32{0}, 2, 32)
	if got2[0] != 0 || got2[1] != 1 || got2[2] != 2 || got2[3] != 3 || got2[16] != 0 {
		t.Errorf("2-bit: %v", got2)
	}
}

func TestQuantizeRoundTrip(t *testing.T) {
	t.Parallel()
	src := make([]float32, 128)
	for i := range src {
		src[i] = float32(i%13)*0.1 - 0.5
	}
	for _, bits := range SupportedBits {
		packed, s, b := Quantize(src, bits, 32, func(f float32) float32 { return f })
		got := make([]float32, len(src))
		Dequantize(got, packed, s, b, bits, 32)
		step := float32(1.2) / float32(uint32(1)<<bits-1)
		for i := range src {
			if d := got[i] - src[i]; d > step/2+1e-6 || d < -step/2-1e-6 {
				t.Fatalf("%d-bit element %d: %g -> %g (step %g)", bits, i, src[i], got[i], step)
			}
		}
	}
}

// TestDequantizeFastPathsAreExact: the table and unrolled loops give the bits of the plain formula
// scales[g]*q + biases[g], for every width and group size, on random words, scales and biases.
func TestDequantizeFastPathsAreExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bits := range SupportedBits {
		for _, gs := range []int{32, 64, 128} {
			const groups = 5
			n := groups * gs
			packed := make([]byte, n*bits/8)
			for i := range packed {
				packed[i] = byte(rng.Uint32())
			}
			scales, biases := make([]float32, groups), make([]float32, groups)
			for g := range scales {
				scales[g], biases[g] = float32(rng.NormFloat64()*0.01), float32(rng.NormFloat64()*0.1)
			}
			got := make([]float32, n)
			Dequantize(got, packed, scales, biases, bits, gs)
			for i := range got {
				bit := i * bits
				word := binary.LittleEndian.Uint32(packed[bit/32*4:])
				q := word >> (bit % 32) & (1<<bits - 1)
				want := float32(scales[i/gs]*float32(q)) + biases[i/gs]
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("%d-bit, group %d: element %d = %v, want %v", bits, gs, i, got[i], want)
				}
			}
		}
	}
}

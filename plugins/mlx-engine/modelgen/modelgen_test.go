package modelgen_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

func generate(t *testing.T, o modelgen.Options) string {
	t.Helper()
	dir := t.TempDir()
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func TestGenerateIsDeterministic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts modelgen.Options
		want []string
	}{
		{"tiny", modelgen.Tiny(), []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}},
		{"sharded quantized sentencepiece", func() modelgen.Options {
			o := modelgen.Tiny()
			o.Family, o.DType, o.Shards, o.Tokenizer = model.Mistral, dtype.BFloat16, 2, modelgen.SentencePiece
			o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32, Overrides: map[string]*model.QuantParams{"lm_head": nil}}
			return o
		}(), []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
			"model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}},
		{"gpt_oss openai mxfp4", func() modelgen.Options {
			o := modelgen.TinyFamily(model.GptOSS)
			o.ExpertsMXFP4 = true
			return o
		}(), []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}},
		{"gemma3 mlx q4", func() modelgen.Options {
			o := modelgen.TinyFamily(model.Gemma3)
			o.Layout, o.Quantization = modelgen.LayoutMLX, &modelgen.Quantization{Bits: 4, GroupSize: 32}
			return o
		}(), []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := files(t, generate(t, tc.opts)), files(t, generate(t, tc.opts))
			var names []string
			for n := range a {
				names = append(names, n)
				if !bytes.Equal(a[n], b[n]) {
					t.Errorf("%s differs between two runs", n)
				}
			}
			if got := strings.Join(sorted(names), " "); got != strings.Join(tc.want, " ") {
				t.Errorf("files %s, want %s", got, strings.Join(tc.want, " "))
			}
		})
	}
	// A different seed gives different weights but the same tokenizer (it depends on the corpus only).
	o := modelgen.Tiny()
	a := files(t, generate(t, o))
	o.Seed++
	b := files(t, generate(t, o))
	if bytes.Equal(a["model.safetensors"], b["model.safetensors"]) {
		t.Error("the seed does not change the weights")
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestPresets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opts     modelgen.Options
		min, max int64
		dt       dtype.DType
	}{
		{"embedded", modelgen.Embedded(), 5e6, 20e6, dtype.BFloat16},
		{"bench100m", modelgen.Bench100M(), 90e6, 115e6, dtype.Float32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name == "bench100m" {
				t.Skip("writes 400 MB")
			}
			start := time.Now()
			dir := generate(t, tc.opts)
			took := time.Since(start)
			m, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			t.Logf("%s: %d parameters, %s, %.1f MB, generated in %v, fingerprint %s", tc.name, m.NumParams(), m.DType,
				float64(m.WeightBytes())/1e6, took.Round(time.Millisecond), m.Fingerprint())
			if n := m.NumParams(); n < tc.min || n > tc.max {
				t.Errorf("%d parameters, want %d..%d", n, tc.min, tc.max)
			}
			if m.DType != tc.dt || m.Config.Family != model.Llama {
				t.Errorf("%s %s", m.Config.Family, m.DType)
			}
			if m.Config.BOSTokenID == nil || len(m.Config.EOSTokenIDs) != 2 {
				t.Errorf("special tokens: bos %v eos %v", m.Config.BOSTokenID, m.Config.EOSTokenIDs)
			}
		})
	}
}

func TestGenerateRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*modelgen.Options)
		want string
	}{
		{"family", func(o *modelgen.Options) { o.Family = "gpt2" }, "unknown family"},
		{"gqa", func(o *modelgen.Options) { o.NumKVHeads = 3 }, "multiple of NumKVHeads"},
		{"bits", func(o *modelgen.Options) { o.Quantization = &modelgen.Quantization{Bits: 3, GroupSize: 32} }, "3-bit"},
		{"group", func(o *modelgen.Options) { o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 128} }, "not a multiple of group size 128"},
		{"dtype", func(o *modelgen.Options) { o.DType = "int8" }, "unknown dtype"},
		{"tokenizer", func(o *modelgen.Options) { o.Tokenizer = "wordpiece" }, "unknown tokenizer"},
		{"vocab", func(o *modelgen.Options) { o.VocabSize = 100 }, "too small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := modelgen.Tiny()
			tc.mod(&o)
			err := modelgen.Generate(t.TempDir(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestRegenerateReplacesShards(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := modelgen.Tiny()
	o.Shards = 3
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	o.Shards = 1
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	names := files(t, dir)
	if _, ok := names["model.safetensors.index.json"]; ok || len(names) != 5 {
		t.Errorf("stale shards left behind: %v", len(names))
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

// TestMoELayouts: the mlx-community layout of a mixture of experts is what mlx-lm's sanitize makes of the
// Hugging Face one: each expert's weight (or packed weight, scales and biases) is slice e of the stacked
// switch_mlp tensor, byte for byte, and every other tensor is the same; both load.
func TestMoELayouts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fam          model.Family
		moe, w       string
		gate, up, dn string
	}{
		{model.Qwen3MoE, "mlp.", "experts", "gate_proj", "up_proj", "down_proj"},
		{model.Qwen2MoE, "mlp.", "experts", "gate_proj", "up_proj", "down_proj"},
		{model.Mixtral, "block_sparse_moe.", "experts", "w1", "w3", "w2"},
	} {
		for _, q := range []*modelgen.Quantization{nil, {Bits: 4, GroupSize: 32}} {
			t.Run(fmt.Sprintf("%s/quantized=%v", tc.fam, q != nil), func(t *testing.T) {
				t.Parallel()
				open := func(l modelgen.Layout) map[string]*safetensors.Tensor {
					o := modelgen.Tiny()
					o.Family, o.DType, o.Quantization, o.Layout = tc.fam, dtype.BFloat16, q, l
					dir := generate(t, o)
					m, err := model.Load(dir)
					if err != nil {
						t.Fatal(err)
					}
					m.Close()
					f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { f.Close() })
					ts := map[string]*safetensors.Tensor{}
					for _, n := range f.Names() {
						ts[n], _ = f.Tensor(n)
					}
					return ts
				}
				hf, mlx := open(modelgen.LayoutHF), open(modelgen.LayoutMLX)
				const experts = 4 // the tiny preset's
				seen := 0
				for name, st := range mlx {
					i := strings.Index(name, ".switch_mlp.")
					if i < 0 {
						if h, ok := hf[name]; !ok || !bytes.Equal(h.Data, st.Data) || fmt.Sprint(h.Shape) != fmt.Sprint(st.Shape) {
							t.Errorf("%s differs between the layouts", name)
						}
						continue
					}
					seen++
					proj, suffix, _ := strings.Cut(name[i+len(".switch_mlp."):], ".")
					each := map[string]string{"gate_proj": tc.gate, "up_proj": tc.up, "down_proj": tc.dn}[proj]
					if len(st.Shape) != 3 || st.Shape[0] != experts {
						t.Fatalf("%s has shape %v, want [%d ...]", name, st.Shape, experts)
					}
					n := len(st.Data) / experts
					for e := range experts {
						h, ok := hf[fmt.Sprintf("%s%s.%d.%s.%s", name[:i+1], tc.w, e, each, suffix)]
						if !ok || !bytes.Equal(h.Data, st.Data[e*n:(e+1)*n]) || fmt.Sprint(h.Shape) != fmt.Sprint(st.Shape[1:]) {
							t.Errorf("%s[%d] is not the Hugging Face expert's tensor", name, e)
						}
					}
				}
				per := 3
				if q != nil {
					per = 9
				}
				if sparse := seen / per; seen%per != 0 || sparse == 0 {
					t.Errorf("%d stacked tensors", seen)
				}
				if len(hf) != len(mlx)+seen*(experts-1) {
					t.Errorf("%d tensors per expert, %d stacked: the layouts hold different modules", len(hf), len(mlx))
				}
			})
		}
	}
}

// TestFamilyOptionsRefused: options that no checkpoint of the family has are refused by name.
func TestFamilyOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(o *modelgen.Options)
		want string
	}{
		{"llama window", func(o *modelgen.Options) { *o = modelgen.Tiny(); o.SlidingWindow = 8 }, "windows and yarn of gemma3 and gpt_oss"},
		{"hf gpt_oss quantized", func(o *modelgen.Options) { o.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32} }, "has no MLX quantization"},
		{"gpt_oss 2I = H", func(o *modelgen.Options) { o.IntermediateSize = 32 }, "HiddenSize ≠ IntermediateSize"},
		{"gpt_oss top-k", func(o *modelgen.Options) { o.TopK = 9 }, "TopK <= NumExperts"},
		{"gpt_oss tied", func(o *modelgen.Options) { o.TieWordEmbeddings = true }, "untied head"},
		{"gemma3 experts", func(o *modelgen.Options) { *o = modelgen.TinyFamily(model.Gemma3Text); o.NumExperts = 4 }, "no experts"},
		{"gemma3 llama3 rope", func(o *modelgen.Options) {
			*o = modelgen.TinyFamily(model.Gemma3)
			o.RopeScaling = &model.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 64}
		}, "linear rope scaling"},
		{"layer types", func(o *modelgen.Options) { o.LayerTypes = o.LayerTypes[:2] }, "2 LayerTypes for 4 layers"},
		{"layout", func(o *modelgen.Options) { o.Layout = "gguf" }, `unknown layout "gguf"`},
	} {
		o := modelgen.TinyFamily(model.GptOSS)
		tc.mod(&o)
		if err := modelgen.Generate(t.TempDir(), o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

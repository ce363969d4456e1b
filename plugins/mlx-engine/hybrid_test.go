package mlxengine_test

import (
	"context"
	"slices"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestHybridModelsGenerate: a qwen3_next or qwen3_5_moe model in either checkpoint layout loads through the
// engine on the cpu backend and generates greedily the tokens the backend's own greedy loop gives for the same
// prompt; the same request again (its prompt now in the prefix cache, which may reuse it only at the linear
// layers' cuts) gives the same tokens.
func TestHybridModelsGenerate(t *testing.T) {
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	for _, f := range []model.Family{model.Qwen3Next, model.Qwen35MoE} {
		for _, l := range []modelgen.Layout{modelgen.LayoutHF, modelgen.LayoutMLX} {
			t.Run(string(f)+"/"+string(l), func(t *testing.T) {
				o := modelgen.TinyFamily(f)
				o.Layout = l
				dir := t.TempDir()
				if err := modelgen.Generate(dir, o); err != nil {
					t.Fatal(err)
				}
				id := string(f) + "/" + string(l)
				if _, err := e.Load(context.Background(), engine.LoadRequest{InstanceID: id, Model: dir, Options: map[string]string{"backend": "cpu"}}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Unload(context.Background(), id) })
				m, err := model.Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				prompt := backendtest.Prompt(40, m.Config.VocabSize, 5)
				generate := func() []int32 {
					var toks []int32
					var final *engine.Final
					err := e.Generate(context.Background(), engine.GenerateRequest{InstanceID: id, PromptTokens: prompt,
						Sampling: engine.Sampling{MaxTokens: 12}}, func(ev engine.Event) error {
						if ev.Token != nil {
							toks = append(toks, ev.Token.ID)
						}
						if ev.Final != nil {
							final = ev.Final
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					if final == nil || final.FinishReason == engine.FinishError || len(toks) == 0 {
						t.Fatalf("generated %v, final %+v", toks, final)
					}
					return toks
				}
				first := generate()
				t.Logf("generated %v", first)
				if again := generate(); !slices.Equal(again, first) {
					t.Errorf("the same request again generated %v, first %v", again, first)
				}
				bm := backendtest.Load(t, cpu.Backend{}, m, backend.Options{})
				c := backendtest.NewCache(t, bm)
				want, _ := backendtest.Greedy(t, bm, c, backendtest.Forward(t, bm, c, prompt...), len(first))
				if !slices.Equal(first, want) {
					t.Errorf("the engine generated %v, the backend's greedy loop %v", first, want)
				}
			})
		}
	}
}

// TestHybridDescribesItsKV: a hybrid's description counts its linear-attention layers apart: its bytes per
// token are the attention layers' keys and values alone, and its state bytes what the Gated DeltaNet layers hold
// per sequence (a conv window in the KV dtype and a float32 recurrent state each), so that a transfer's size
// is neither the dense model's of the same depth nor blind to the states.
func TestHybridDescribesItsKV(t *testing.T) {
	o := modelgen.TinyFamily(model.Qwen3Next)
	dir := t.TempDir()
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	d, err := e.Load(context.Background(), engine.LoadRequest{Model: dir, Options: map[string]string{"backend": "cpu"}})
	if err != nil {
		t.Fatal(err)
	}
	size := map[string]int64{"bfloat16": 2, "float16": 2, "float32": 4}[d.KV.DType]
	if size == 0 {
		t.Fatalf("KV dtype %q", d.KV.DType)
	}
	// tinyHybrid: 6 layers with full attention every 3rd (2 KV heads of 16); the other 4 are Gated DeltaNet
	// layers of 2 key heads of 16 and 4 value heads of 8 with a conv kernel of 4.
	attention, linear := int64(o.NumLayers/o.FullAttentionInterval), int64(o.NumLayers-o.NumLayers/o.FullAttentionInterval)
	convDim := int64(2*o.LinearKeyHeads*o.LinearKeyDim + o.LinearValueHeads*o.LinearValueDim)
	state := int64(o.ConvKernel-1)*convDim*size + int64(o.LinearValueHeads*o.LinearValueDim*o.LinearKeyDim)*4
	want := engine.KVLayout{NumLayers: o.NumLayers, NumKVHeads: o.NumKVHeads, HeadDim: o.HeadDim, DType: d.KV.DType,
		LinearLayers: int(linear), StateBytes: linear * state}
	if d.KV != want {
		t.Errorf("KV layout %+v, want %+v", d.KV, want)
	}
	if got, want := d.KV.BytesPerToken(), 2*attention*int64(o.NumKVHeads*o.HeadDim)*size; got != want {
		t.Errorf("%d bytes per token, want %d (the %d attention layers' keys and values)", got, want, attention)
	}
	if got, want := d.KV.TransferBytes(100), 100*d.KV.BytesPerToken()+linear*state; got != want {
		t.Errorf("a prompt of 100 tokens moves %d bytes, want %d", got, want)
	}
}

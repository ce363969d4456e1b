package model_test

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// TestHybridRunsOnCPUBackend: a hybrid model loaded in package model runs on the cpu backend: its KV layout has
// a linear layer, with the conv window in the model's dtype and the float32 recurrent state, for every Gated
// DeltaNet layer and a full layer for every attention layer, and a few tokens give finite logits.
func TestHybridRunsOnCPUBackend(t *testing.T) {
	t.Parallel()
	for _, fam := range []model.Family{model.Qwen3Next, model.Qwen35MoE} {
		m, err := model.Load(model.HybridCheckpoint(t, fam, false, safetensors.F32))
		if err != nil {
			t.Fatal(err)
		}
		bm, err := cpu.Backend{}.Load(m, backend.Options{Threads: 1})
		if err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		l := bm.KVLayout()
		for i, spec := range m.Config.Arch.Layers {
			ly := l.Layers[i]
			if spec.Kind != model.LayerLinear {
				if ly.Kind != backend.KVFull {
					t.Errorf("%s: attention layer %d is %s in the layout", fam, i, ly.Kind)
				}
				continue
			}
			d := spec.DeltaNet
			want := backend.LinearLayer(m.DType, d.ConvKernel, d.ConvDim(), d.ValueHeads, d.ValueDim, d.KeyDim)
			if !ly.Equal(want) {
				t.Errorf("%s: linear layer %d is %+v in the layout, want %+v", fam, i, ly, want)
			}
		}
		c, err := bm.NewCache()
		if err != nil {
			t.Fatal(err)
		}
		logits := make([]float32, bm.VocabSize())
		if err := bm.Forward([]backend.Seq{{Cache: c, Tokens: []int32{1, 2, 3, 4, 5}, Logits: logits}}); err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		for _, v := range logits {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: logit %v", fam, v)
			}
		}
		c.Release()
		bm.Close()
		m.Close()
	}
}

package model_test

import (
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/safetensors"
)

// TestHybridRefusedByCPUBackend: until the cpu backend computes the Gated DeltaNet, a hybrid model loads in
// package model and the backend refuses it with an error that says why, not a crash or a wrong result.
func TestHybridRefusedByCPUBackend(t *testing.T) {
	t.Parallel()
	for _, fam := range []model.Family{model.Qwen3Next, model.Qwen35MoE} {
		m, err := model.Load(model.HybridCheckpoint(t, fam, false, safetensors.F32))
		if err != nil {
			t.Fatal(err)
		}
		bm, err := cpu.Backend{}.Load(m, backend.Options{Threads: 1})
		if err == nil {
			bm.Close()
			t.Fatalf("%s: the cpu backend loaded a model with linear attention layers", fam)
		}
		if !strings.Contains(err.Error(), "linear attention (Gated DeltaNet) layers are not yet supported by the cpu backend") {
			t.Errorf("%s: %v", fam, err)
		}
		m.Close()
	}
}

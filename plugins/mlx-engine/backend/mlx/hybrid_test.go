//go:build mlx

package mlx

import (
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// TestHybridModelsRefused: until this backend computes Gated DeltaNet layers and gated attention, it refuses a
// hybrid model at load with an error that says why (the cpu backend runs them).
func TestHybridModelsRefused(t *testing.T) {
	for _, f := range []model.Family{model.Qwen3Next, model.Qwen35MoE} {
		m := backendtest.Generate(t, modelgen.TinyFamily(f))
		bm, err := Backend{}.Load(m, backend.Options{})
		if err == nil {
			bm.Close()
			t.Fatalf("%s: the mlx backend loaded a model with linear attention layers", f)
		}
		if !strings.Contains(err.Error(), "not yet supported by the mlx backend") {
			t.Errorf("%s: %v", f, err)
		}
	}
}

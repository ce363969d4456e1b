package mlxengine_test

import (
	"context"
	"strings"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestHybridModelsRefused: until a backend computes linear-attention layers, loading a qwen3_next or qwen3_5_moe
// model fails with an error that names the reason, in both checkpoint layouts.
func TestHybridModelsRefused(t *testing.T) {
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	for _, f := range []model.Family{model.Qwen3Next, model.Qwen35MoE} {
		for _, l := range []modelgen.Layout{modelgen.LayoutHF, modelgen.LayoutMLX} {
			o := modelgen.TinyFamily(f)
			o.Layout = l
			dir := t.TempDir()
			if err := modelgen.Generate(dir, o); err != nil {
				t.Fatal(err)
			}
			_, err := e.Load(context.Background(), engine.LoadRequest{InstanceID: "h", Model: dir, Options: map[string]string{"backend": "cpu"}})
			if err == nil || !strings.Contains(err.Error(), "linear attention (Gated DeltaNet) layers are not yet supported by the cpu backend") {
				t.Errorf("%s/%s: %v", f, l, err)
			}
		}
	}
}

//go:build mlx

package mlx_test

import (
	"context"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/enginetest"
)

// TestConformance runs the engine conformance suite with the engine on the MLX backend.
func TestConformance(t *testing.T) {
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	enginetest.Run(t, e, enginetest.Config{
		Model: mlxengine.EmbeddedModel, MaxTokens: 24, LoadOptions: map[string]string{"backend": "mlx"},
	})
}

// TestEngineDefaultsToMLX: in a build with the mlx tag, backend=auto (the default) loads onto MLX.
func TestEngineDefaultsToMLX(t *testing.T) {
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	desc, err := e.Load(context.Background(), engine.LoadRequest{Model: mlxengine.EmbeddedModel})
	if err != nil {
		t.Fatal(err)
	}
	if desc.Backend != "mlx" || desc.KV.DType != "bfloat16" {
		t.Errorf("backend %q, KV dtype %q; want mlx, bfloat16", desc.Backend, desc.KV.DType)
	}
}

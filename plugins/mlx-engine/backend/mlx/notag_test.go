//go:build !mlx

package mlx_test

import (
	"context"
	"strings"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

// TestWithoutTag: a build without the mlx tag has no MLX backend; asking the engine for it fails with a message
// that says how to get one, and backend=auto loads onto the pure-Go backend.
func TestWithoutTag(t *testing.T) {
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	_, err := e.Load(context.Background(), engine.LoadRequest{Model: mlxengine.EmbeddedModel, Options: map[string]string{"backend": "mlx"}})
	if engine.CodeOf(err) != engine.CodeInvalidArgument || !strings.Contains(err.Error(), "-tags mlx") {
		t.Fatalf("Load with backend=mlx: %v", err)
	}
	desc, err := e.Load(context.Background(), engine.LoadRequest{Model: mlxengine.EmbeddedModel})
	if err != nil {
		t.Fatal(err)
	}
	if desc.Backend != "cpu" {
		t.Errorf("backend=auto loaded onto %q, want cpu", desc.Backend)
	}
}

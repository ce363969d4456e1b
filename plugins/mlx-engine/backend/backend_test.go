package backend_test

import (
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	_ "github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu" // registers "cpu"
)

func TestRegistry(t *testing.T) {
	b, err := backend.Lookup("cpu")
	if err != nil || b.Name() != "cpu" {
		t.Fatalf("Lookup(cpu) = %v, %v", b, err)
	}
	if _, err := backend.Lookup("mlx"); err == nil || !strings.Contains(err.Error(), `no backend "mlx" in this build (available: [cpu])`) {
		t.Errorf("Lookup(mlx) error: %v", err)
	}
	if names := backend.Names(); len(names) != 1 || names[0] != "cpu" {
		t.Errorf("Names() = %v", names)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering cpu twice did not panic")
		}
	}()
	backend.Register(b)
}

func TestTokenBytes(t *testing.T) {
	l := backend.DenseLayout(32, 8, 128, backend.BFloat16)
	// Llama-3.1-8B: 8 KV heads × 128 × 2 bytes = 2 KiB per layer for keys, as much for values: 128 KiB per token.
	if got := l.LayerTokenBytes(0) * 2 * l.NumLayers(); got != 128<<10 {
		t.Errorf("KV bytes per token = %d, want 128 KiB", got)
	}
	if got := l.PositionBytes(); got != 128<<10 {
		t.Errorf("PositionBytes = %d, want 128 KiB", got)
	}
}

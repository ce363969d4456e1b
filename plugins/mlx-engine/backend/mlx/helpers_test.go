//go:build mlx

package mlx

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// load puts m on the MLX backend with the default options of this machine.
func load(t testing.TB, m *model.Model, opts backend.Options) backend.Model {
	t.Helper()
	return backendtest.Load(t, Backend{}, m, opts)
}

// loadFloat32 puts m on the MLX backend computing in float32 whatever the device, which is what makes MLX and
// the pure-Go backend agree token for token.
func loadFloat32(t testing.TB, m *model.Model, opts backend.Options) backend.Model {
	t.Helper()
	bm, err := load32(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bm.Close() })
	return bm
}

func load32(m *model.Model, opts backend.Options) (*mlxModel, error) {
	if err := do(func() error { return nil }); err != nil {
		return nil, err
	}
	return loadModel(m, opts, loadOptions{})
}

// loadCPU puts m on the pure-Go backend, the reference.
func loadCPU(t testing.TB, m *model.Model, opts backend.Options) backend.Model {
	t.Helper()
	return backendtest.Load(t, cpu.Backend{}, m, opts)
}

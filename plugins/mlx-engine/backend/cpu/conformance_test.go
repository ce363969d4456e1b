package cpu_test

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
)

// TestBackendConformance runs the backend conformance suite. The pure-Go backend is exact: a token's logits do
// not depend on the other tokens of its step (see the package documentation).
func TestBackendConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, cpu.Backend{}, backendtest.Options{Exact: true, Parallel: true, Windows: true, Linear: true})
}

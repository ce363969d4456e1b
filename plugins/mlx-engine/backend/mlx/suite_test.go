//go:build mlx

package mlx

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
)

// TestBackendConformance runs the backend conformance suite on the MLX backend with this machine's defaults.
// MLX is not exact: its matrix kernels may sum a product of several rows in another order than one of one row,
// so batched and chunked results are held to the tolerance of the comparison with the pure-Go backend. The
// checks run one after the other, as the MLX thread would run them anyway.
func TestBackendConformance(t *testing.T) {
	backendtest.Run(t, Backend{}, backendtest.Options{Tolerance: tolerance, Windows: true, Linear: true})
}

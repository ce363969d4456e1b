package cpu

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// load puts m on the pure-Go backend until the test ends.
func load(t testing.TB, m *model.Model, opts backend.Options) backend.Model {
	t.Helper()
	return backendtest.Load(t, Backend{}, m, opts)
}

func maxAbsDiff(a []float32, b []float64) (d float64) {
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-b[i]))
	}
	return d
}

func maxAbs(b []float64) (m float64) {
	for _, v := range b {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

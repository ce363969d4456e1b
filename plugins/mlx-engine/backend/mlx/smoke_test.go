//go:build mlx

package mlx

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

func TestSmoke(t *testing.T) {
	mod := generate(t, tiny(nil))
	m := loadFloat32(t, mod, backend.Options{})
	ref := loadCPU(t, mod, backend.Options{})
	p := prompt(20, m.VocabSize(), 1)
	a := forward(t, m, newCache(t, m), p...)
	b := forward(t, ref, newCache(t, ref), p...)
	t.Logf("device %s, mlx %s: rel diff %.3g, argmax %d %d", device.kind, device.version, relDiff(a, b), argmax(a), argmax(b))
}

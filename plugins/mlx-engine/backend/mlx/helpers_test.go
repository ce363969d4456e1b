//go:build mlx

package mlx

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// generate writes a model with modelgen into a temporary directory and loads it.
func generate(t testing.TB, o modelgen.Options) *model.Model {
	t.Helper()
	dir := t.TempDir()
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// load puts m on the MLX backend with the default options of this machine.
func load(t testing.TB, m *model.Model, opts backend.Options) backend.Model {
	t.Helper()
	bm, err := Backend{}.Load(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bm.Close() })
	return bm
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
	bm, err := cpu.Backend{}.Load(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bm.Close() })
	return bm
}

func newCache(t testing.TB, m backend.Model) backend.Cache {
	t.Helper()
	c, err := m.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	return c
}

// forward feeds tokens to c and returns the logits of the last one.
func forward(t testing.TB, m backend.Model, c backend.Cache, tokens ...int32) []float32 {
	t.Helper()
	logits := make([]float32, m.VocabSize())
	if err := m.Forward([]backend.Seq{{Cache: c, Tokens: tokens, Logits: logits}}); err != nil {
		t.Fatal(err)
	}
	return logits
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// greedy decodes n tokens after the cache's current state, starting from logits; it returns the tokens and the
// logits of every step (the first being the given ones).
func greedy(t testing.TB, m backend.Model, c backend.Cache, logits []float32, n int) ([]int32, [][]float32) {
	t.Helper()
	var toks []int32
	all := [][]float32{logits}
	for i := 0; i < n; i++ {
		next := argmax(logits)
		toks = append(toks, next)
		logits = forward(t, m, c, next)
		all = append(all, logits)
	}
	return toks, all
}

// prompt returns n deterministic token ids below vocab.
func prompt(n, vocab int, seed int) []int32 {
	out := make([]int32, n)
	x := uint32(seed*7919 + 17)
	for i := range out {
		x = x*1664525 + 1013904223
		out[i] = int32(x>>8) % int32(min(vocab, 300))
	}
	return out
}

// relDiff is max |a-b| relative to max(1, max |b|).
func relDiff(a, b []float32) float64 {
	var d, m float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		m = math.Max(m, math.Abs(float64(b[i])))
	}
	return d / math.Max(1, m)
}

func tiny(mod func(*modelgen.Options)) modelgen.Options {
	o := modelgen.Tiny()
	if mod != nil {
		mod(&o)
	}
	return o
}

package cpu

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
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

func load(t testing.TB, m *model.Model, opts backend.Options) backend.Model {
	t.Helper()
	bm, err := Backend{}.Load(m, opts)
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

// greedy decodes n tokens after the cache's current state, starting from logits.
func greedy(t testing.TB, m backend.Model, c backend.Cache, logits []float32, n int) []int32 {
	t.Helper()
	var out []int32
	for i := 0; i < n; i++ {
		next := argmax(logits)
		out = append(out, next)
		logits = forward(t, m, c, next)
	}
	return out
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

func tiny(mod func(*modelgen.Options)) modelgen.Options {
	o := modelgen.Tiny()
	if mod != nil {
		mod(&o)
	}
	return o
}

var _ = dtype.Float32

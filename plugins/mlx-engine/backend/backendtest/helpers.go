package backendtest

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// Tiny is modelgen.TinyWith: modelgen.Tiny, or the preset of the family mod names, changed by mod.
func Tiny(mod func(*modelgen.Options)) modelgen.Options { return modelgen.TinyWith(mod) }

// Generate writes a model with modelgen into a temporary directory and opens it; it is closed when the test
// ends.
func Generate(t testing.TB, o modelgen.Options) *model.Model {
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

// Load puts m on b; the model is closed when the test ends (after the caches of NewCache are released).
func Load(t testing.TB, b backend.Backend, m *model.Model, opts backend.Options) backend.Model {
	t.Helper()
	bm, err := b.Load(m, opts)
	if err != nil {
		t.Fatalf("%s: Load: %v", b.Name(), err)
	}
	t.Cleanup(func() { bm.Close() })
	return bm
}

// NewCache returns a new cache of m, released when the test ends.
func NewCache(t testing.TB, m backend.Model) backend.Cache {
	t.Helper()
	c, err := m.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	return c
}

// Forward feeds tokens to c in one Forward call and returns the logits of the last one.
func Forward(t testing.TB, m backend.Model, c backend.Cache, tokens ...int32) []float32 {
	t.Helper()
	logits := make([]float32, m.VocabSize())
	if err := m.Forward([]backend.Seq{{Cache: c, Tokens: tokens, Logits: logits}}); err != nil {
		t.Fatal(err)
	}
	return logits
}

// Greedy decodes n tokens after the cache's current state, starting from logits; it returns the tokens and the
// logits of every step (the first being the given ones).
func Greedy(t testing.TB, m backend.Model, c backend.Cache, logits []float32, n int) ([]int32, [][]float32) {
	t.Helper()
	var toks []int32
	all := [][]float32{logits}
	for i := 0; i < n; i++ {
		next := Argmax(logits)
		toks = append(toks, next)
		logits = Forward(t, m, c, next)
		all = append(all, logits)
	}
	return toks, all
}

// Argmax is the index of the largest value (the first of equal ones): the greedy token.
func Argmax[F float32 | float64](x []F) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// Prompt returns n deterministic token ids below min(vocab, 300) (tokens every generated model knows); the
// first n of a longer prompt with the same seed are the same.
func Prompt(n, vocab int, seed int) []int32 {
	out := make([]int32, n)
	x := uint32(seed*7919 + 17)
	for i := range out {
		x = x*1664525 + 1013904223
		out[i] = int32(x>>8) % int32(min(vocab, 300))
	}
	return out
}

// RelDiff is max |a-b| relative to max(1, max |b|): how the suite and the backends' tests compare logits.
func RelDiff(a, b []float32) float64 {
	var d, m float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		m = math.Max(m, math.Abs(float64(b[i])))
	}
	return d / math.Max(1, m)
}

// ExportAll exports positions [from, to) of every layer of c: keys[layer] and values[layer] in the wire layout.
func ExportAll(t testing.TB, m backend.Model, c backend.Cache, from, to int) (keys, values [][]byte) {
	t.Helper()
	l := m.KVLayout()
	for layer := 0; layer < l.NumLayers(); layer++ {
		tb := l.LayerTokenBytes(layer)
		k, v := make([]byte, (to-from)*tb), make([]byte, (to-from)*tb)
		if err := c.ExportKV(layer, from, to, k, v); err != nil {
			t.Fatal(err)
		}
		keys, values = append(keys, k), append(values, v)
	}
	return keys, values
}

// ImportAll writes keys and values (as ExportAll returns them, from position 0) into an empty cache c in three
// chunks per layer, layers in reverse order, as chunks of the KV wire may arrive. Len must follow the layer that
// holds least, and end at all the positions.
func ImportAll(t testing.TB, m backend.Model, c backend.Cache, keys, values [][]byte) {
	t.Helper()
	l := m.KVLayout()
	n := len(keys[0]) / l.LayerTokenBytes(0)
	for _, cut := range [][2]int{{0, n / 3}, {n / 3, 2 * n / 3}, {2 * n / 3, n}} {
		for layer := len(keys) - 1; layer >= 0; layer-- {
			tb := l.LayerTokenBytes(layer)
			if err := c.ImportKV(layer, cut[0], keys[layer][cut[0]*tb:cut[1]*tb], values[layer][cut[0]*tb:cut[1]*tb]); err != nil {
				t.Fatal(err)
			}
			want := cut[0] // layer 0 comes last
			if layer == 0 {
				want = cut[1]
			}
			if c.Len() != want {
				t.Fatalf("after importing [%d, %d) into layers %d.., Len = %d, want %d", cut[0], cut[1], layer, c.Len(), want)
			}
		}
	}
	if c.Len() != n {
		t.Fatalf("imported cache holds %d positions, want %d", c.Len(), n)
	}
}

// GenerateWindowed is Generate with sliding windows put on the model's layers, windows[i % len(windows)] on
// layer i (0: full attention), as a family with windows would map its config: a dense model whose prompts of a
// few dozen tokens cross its windows, for testing caches per layer kind before such a family exists.
func GenerateWindowed(t testing.TB, o modelgen.Options, windows ...int) *model.Model {
	t.Helper()
	m := Generate(t, o)
	SetWindows(m, windows...)
	return m
}

// SetWindows puts windows[i % len(windows)] on layer i of m's arch (before m is loaded onto a backend).
func SetWindows(m *model.Model, windows ...int) {
	for i := range m.Config.Arch.Layers {
		m.Config.Arch.Layers[i].Attn.Window = windows[i%len(windows)]
	}
}

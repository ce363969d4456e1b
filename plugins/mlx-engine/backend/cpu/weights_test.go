package cpu

import (
	"math"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// stored is the backend with WeightsStored forced, so the conformance suite runs on tile-by-tile expansion.
type stored struct{ Backend }

func (b stored) Load(m *model.Model, opts backend.Options) (backend.Model, error) {
	opts.Weights = backend.WeightsStored
	return b.Backend.Load(m, opts)
}

func TestBackendConformanceStoredWeights(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, stored{}, backendtest.Options{Exact: true, Parallel: true, Windows: true, Linear: true})
}

// TestStoredWeightsAreExact: expanding a tile per product gives the bits that expanding the matrix at load does,
// for prefill, decode and a batched step, on every family, dtype and quantization; and it makes no float32 copy
// of a matrix the file does not store as float32.
func TestStoredWeightsAreExact(t *testing.T) {
	t.Parallel()
	for _, v := range matrix() {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			m := backendtest.Generate(t, v.Options)
			f32 := load(t, m, backend.Options{Weights: backend.WeightsFloat32, PrefillChunk: 5})
			st := load(t, m, backend.Options{Weights: backend.WeightsStored, PrefillChunk: 5})
			tokens := backendtest.Prompt(20, m.Config.VocabSize, 3)
			other := backendtest.Prompt(9, m.Config.VocabSize, 4)
			run := func(bm backend.Model) [][]float32 {
				c, c2 := backendtest.NewCache(t, bm), backendtest.NewCache(t, bm)
				out := [][]float32{backendtest.Forward(t, bm, c, tokens[:12]...), backendtest.Forward(t, bm, c2, other...)}
				for _, tok := range tokens[12:] {
					l1, l2 := make([]float32, bm.VocabSize()), make([]float32, bm.VocabSize())
					if err := bm.Forward([]backend.Seq{{Cache: c, Tokens: []int32{tok}, Logits: l1}, {Cache: c2, Tokens: []int32{tok}, Logits: l2}}); err != nil {
						t.Fatal(err)
					}
					out = append(out, l1, l2)
				}
				return out
			}
			want, got := run(f32), run(st)
			for i := range want {
				for j := range want[i] {
					if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("step %d, logit %d: stored %v, expanded %v", i, j, got[i][j], want[i][j])
					}
				}
			}
			ex := st.(*cpuModel).Metrics()["cpu_expanded_weight_bytes"]
			if m.DType.Size() != 4 || m.Config.Quantization != nil {
				if ex != 0 {
					t.Errorf("stored weights made %v bytes of float32 copies", ex)
				}
				if f := f32.(*cpuModel).Metrics()["cpu_expanded_weight_bytes"]; f == 0 {
					t.Errorf("expanded weights report no float32 copies")
				}
			}
		})
	}
}

func TestExpandFits(t *testing.T) {
	const gib = 1 << 30
	for name, c := range map[string]struct {
		expanded, memory, limit int64
		want                    bool
	}{
		"small model":                {1 * gib, 24 * gib, 0, true},
		"half the memory":            {12 * gib, 24 * gib, 0, true},
		"8B 4-bit on 24 GiB":         {32 * gib, 24 * gib, 0, false},
		"MemoryLimit decides":        {6 * gib, 24 * gib, 8 * gib, false},
		"MemoryLimit above physical": {6 * gib, 24 * gib, 64 * gib, true},
		"memory unknown":             {32 * gib, math.MaxInt64, 0, true},
	} {
		if got := expandFits(c.expanded, c.memory, c.limit); got != c.want {
			t.Errorf("%s: expandFits(%d, %d, %d) = %v", name, c.expanded, c.memory, c.limit, got)
		}
	}
}

func TestWeightsAuto(t *testing.T) {
	m := backendtest.Generate(t, backendtest.Tiny(nil))
	if n := expandedBytes(m); n != 0 {
		t.Errorf("a float32 model needs %d bytes of expansion, want 0", n)
	}
	if physicalMemory() <= 0 {
		t.Errorf("physical memory %d", physicalMemory())
	}
	bm := load(t, m, backend.Options{})
	if bm.(*cpuModel).stored {
		t.Errorf("auto keeps a tiny model stored")
	}
	if _, err := backend.ParseWeights("fp8"); err == nil {
		t.Errorf("ParseWeights accepted fp8")
	}
}

//go:build mlx

package mlx

import (
	"errors"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

func TestRegistered(t *testing.T) {
	b, err := backend.Lookup("mlx")
	if err != nil || b.Name() != "mlx" {
		t.Fatalf("Lookup(mlx) = %v, %v", b, err)
	}
	if _, err := Memory(); err != nil {
		t.Fatal(err)
	}
	t.Logf("MLX %s on %s", device.version, device.kind)
}

// TestErrorsBecomeGoErrors: a failing MLX operation returns an error with MLX's message (the default handler
// would have ended the process), and the MLX thread carries on, also after a panic in a closure.
func TestErrorsBecomeGoErrors(t *testing.T) {
	err := do(func() error {
		g := newGraph()
		defer g.free()
		a := g.zeros([]int{2, 3}, dtFloat32)
		b := g.reshape(a, 4, 4)
		g.add(b, a) // skipped: the graph already failed
		return g.err
	})
	if !errors.Is(err, errMLX) || !strings.Contains(err.Error(), "reshape") || !strings.Contains(err.Error(), "size 6 into shape (4,4)") {
		t.Fatalf("error %v, want MLX's reshape error", err)
	}
	err = do(func() error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "internal error: boom") {
		t.Fatalf("panic became %v", err)
	}
	if err := do(func() error {
		g := newGraph()
		defer g.free()
		return evalArrays(g.zeros([]int{4}, dtFloat32))
	}); err != nil {
		t.Fatalf("the MLX thread did not recover: %v", err)
	}
}

// TestDecodeWritesCacheInPlace: a decode step writes its keys and values into the cache's buffers without
// copying them (the cache keeps no stray reference that would stop slice_update from reusing the buffer), with
// and without pipelining.
func TestDecodeWritesCacheInPlace(t *testing.T) {
	for _, pipeline := range []bool{true, false} {
		mod := backendtest.Generate(t, backendtest.Tiny(func(o *modelgen.Options) { o.DType = dtype.BFloat16 }))
		m, err := load32(mod, backend.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		m.pipeline = pipeline
		c := backendtest.NewCache(t, m)
		p := backendtest.Prompt(40, m.VocabSize(), 9)
		backendtest.Forward(t, m, c, p[:20]...)
		before := bufferAddresses(t, c.(*cache))
		for _, tok := range p[20:] {
			backendtest.Forward(t, m, c, tok)
			if after := bufferAddresses(t, c.(*cache)); !equalAddresses(before, after) {
				t.Fatalf("pipeline=%v: a decode step moved the cache buffers: %v → %v", pipeline, before, after)
			}
		}
	}
}

func bufferAddresses(t *testing.T, c *cache) []uintptr {
	t.Helper()
	var out []uintptr
	if err := do(func() error {
		for i := range c.layers {
			for _, a := range []*kvLayer{&c.layers[i]} {
				out = append(out, dataAddress(a.k), dataAddress(a.v))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func equalAddresses(a, b []uintptr) bool {
	for i := range a {
		if a[i] != b[i] || a[i] == 0 {
			return false
		}
	}
	return len(a) == len(b)
}

// TestMemoryLimit: with a limit just above what is in use, growing a cache fails with a clear error and
// changes nothing; lifting the limit lets the same call through.
func TestMemoryLimit(t *testing.T) {
	m := load(t, backendtest.Generate(t, backendtest.Tiny(nil)), backend.Options{})
	c := backendtest.NewCache(t, m)
	backendtest.Forward(t, m, c, 1, 2, 3)
	st, err := Memory()
	if err != nil {
		t.Fatal(err)
	}
	if err := SetMemoryLimit(st.Active + 1<<10); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { SetMemoryLimit(0) })
	err = m.Forward([]backend.Seq{{Cache: c, Tokens: backendtest.Prompt(cacheStep, m.VocabSize(), 1)}})
	if !errors.Is(err, errMemoryLimit) {
		t.Fatalf("Forward past the limit: %v", err)
	}
	if c.Len() != 3 {
		t.Errorf("a refused Forward changed the cache: Len %d", c.Len())
	}
	if _, err := c.Clone(3); !errors.Is(err, errMemoryLimit) {
		t.Errorf("Clone past the limit: %v", err)
	}
	backendtest.Forward(t, m, c, 4) // within the capacity already there
	if err := SetMemoryLimit(0); err != nil {
		t.Fatal(err)
	}
	if st, _ := Memory(); st.Limit != defaultLimit {
		t.Errorf("limit %d after reset, MLX's default %d", st.Limit, defaultLimit)
	}
	if err := m.Forward([]backend.Seq{{Cache: c, Tokens: backendtest.Prompt(cacheStep, m.VocabSize(), 1)}}); err != nil {
		t.Fatal(err)
	}
}

func TestMetrics(t *testing.T) {
	m := load(t, backendtest.Generate(t, backendtest.Tiny(nil)), backend.Options{})
	mm, ok := m.(interface{ Metrics() map[string]float64 })
	if !ok {
		t.Fatal("the model has no Metrics method")
	}
	got := mm.Metrics()
	for _, k := range []string{"mlx_active_memory_bytes", "mlx_peak_memory_bytes", "mlx_cache_memory_bytes", "mlx_memory_limit_bytes"} {
		if got[k] <= 0 && k != "mlx_cache_memory_bytes" {
			t.Errorf("%s = %v", k, got[k])
		}
	}
	if got["mlx_peak_memory_bytes"] < got["mlx_active_memory_bytes"] {
		t.Errorf("peak %v below active %v", got["mlx_peak_memory_bytes"], got["mlx_active_memory_bytes"])
	}
}

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  bool
	}{
		{"1024", 1024, false},
		{"8GiB", 8 << 30, false},
		{"512 MiB", 512 << 20, false},
		{"512MB", 512 << 20, false},
		{"3K", 3 << 10, false},
		{"", 0, true},
		{"-1", 0, true},
		{"1.5GiB", 0, true},
		{"99999999999999999999", 0, true},
		{"9999999999999GiB", 0, true},
	} {
		got, err := parseBytes(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v", tc.in, got, err)
		}
	}
}

// TestModelDTypeCompute runs a bfloat16 model the way a GPU does by default, in bfloat16, and checks it stays
// near the float32 result (bfloat16 keeps 8 bits of mantissa, so only closeness is expected); gemma3_text and
// gpt_oss (windows, sinks, GeGLU and clamped SwiGLU, mxfp4 experts) included.
func TestModelDTypeCompute(t *testing.T) {
	variants := backendtest.Variants()
	for _, f := range []model.Family{model.Gemma3Text, model.GptOSS} {
		o := modelgen.TinyFamily(f)
		o.DType, o.ExpertsMXFP4 = dtype.BFloat16, f == model.GptOSS
		variants = append(variants, backendtest.Variant{Name: string(f) + "/bf16", Options: o})
	}
	for _, v := range variants {
		if v.Options.DType == dtype.Float32 {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			mod := backendtest.Generate(t, v.Options)
			native, err := loadModel(mod, backend.Options{}, loadOptions{computeModelDType: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { native.Close() })
			f32 := loadFloat32(t, mod, backend.Options{})
			p := backendtest.Prompt(20, mod.Config.VocabSize, 7)
			a, b := backendtest.Forward(t, native, backendtest.NewCache(t, native), p...), backendtest.Forward(t, f32, backendtest.NewCache(t, f32), p...)
			d := backendtest.RelDiff(a, b)
			t.Logf("%s compute vs float32: max relative |Δlogit| %.2e", mod.DType, d)
			if d > 0.05 {
				t.Errorf("%s compute differs from float32 by %.3e", mod.DType, d)
			}
		})
	}
}

// TestRefusesMissingBlockWeights: a layer whose spec is a mixture of experts but whose weights are a dense MLP
// is refused at load with an error that names the layer and the block.
func TestRefusesMissingBlockWeights(t *testing.T) {
	mod := backendtest.Generate(t, backendtest.Tiny(nil))
	s := &mod.Config.Arch.Layers[1]
	s.FFN.Kind, s.FFN.MoE = model.FFNMoE, &model.MoESpec{Experts: 4, TopK: 2, Intermediate: 32}
	_, err := Backend{}.Load(mod, backend.Options{})
	if err == nil || !strings.Contains(err.Error(), "layer 1 has no expert weights") {
		t.Errorf("Load = %v, want a refusal naming layer 1's experts", err)
	}
}

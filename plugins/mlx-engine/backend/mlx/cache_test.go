//go:build mlx

package mlx

import (
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// TestKVTransferAcrossBackends is disaggregation between an MLX machine and a pure-Go one, both ways: one
// backend prefills the prompt without its last token and exports the KV, the other imports it and decodes 64
// greedy tokens, which must be the tokens the importing backend decodes after its own prefill (and the
// exporting backend's). The exported bytes of both backends must agree element for element to within the
// rounding of the KV dtype.
func TestKVTransferAcrossBackends(t *testing.T) {
	for _, v := range backendtest.Variants() {
		t.Run(v.Name, func(t *testing.T) {
			mod := backendtest.Generate(t, v.Options)
			ml, ref := loadFloat32(t, mod, backend.Options{}), loadCPU(t, mod, backend.Options{})
			if !reflect.DeepEqual(ml.KVLayout(), ref.KVLayout()) {
				t.Fatalf("KV layouts differ: mlx %+v, cpu %+v", ml.KVLayout(), ref.KVLayout())
			}
			p := backendtest.Prompt(24, mod.Config.VocabSize, 3)
			n := len(p) - 1
			local := map[string][]int32{}
			exported := map[string][2][][]byte{}
			for name, m := range map[string]backend.Model{"mlx": ml, "cpu": ref} {
				c := backendtest.NewCache(t, m)
				backendtest.Forward(t, m, c, p[:n]...)
				k, vv := backendtest.ExportAll(t, m, c, 0, n)
				exported[name] = [2][][]byte{k, vv}
				local[name], _ = backendtest.Greedy(t, m, c, backendtest.Forward(t, m, c, p[n]), greedySteps)
			}
			if !slices.Equal(local["mlx"], local["cpu"]) {
				t.Fatalf("local greedy tokens differ:\nmlx %v\ncpu %v", local["mlx"], local["cpu"])
			}
			for _, dir := range []struct{ from, to string }{{"cpu", "mlx"}, {"mlx", "cpu"}} {
				m := map[string]backend.Model{"mlx": ml, "cpu": ref}[dir.to]
				c := backendtest.NewCache(t, m)
				backendtest.ImportAll(t, m, c, exported[dir.from][0], exported[dir.from][1])
				got, _ := backendtest.Greedy(t, m, c, backendtest.Forward(t, m, c, p[n]), greedySteps)
				if !slices.Equal(got, local[dir.to]) {
					t.Errorf("%s → %s: greedy tokens after import\n%v, local\n%v", dir.from, dir.to, got, local[dir.to])
				}
			}
			// Element for element, relative to the largest magnitude of the layer: a float32 cache to float32
			// rounding, a 16-bit one to one ulp of that dtype.
			d := ml.KVLayout().DType
			worst, ulps := 0.0, 0
			for kv := 0; kv < 2; kv++ {
				for layer := range exported["mlx"][kv] {
					a, b := decodeKV(t, d, exported["mlx"][kv][layer]), decodeKV(t, d, exported["cpu"][kv][layer])
					var diff, mag float64
					for i := range a {
						diff = max(diff, math.Abs(float64(a[i]-b[i])))
						mag = max(mag, math.Abs(float64(b[i])))
						if a[i] != b[i] {
							ulps++
						}
					}
					worst = max(worst, diff/mag)
				}
			}
			limit := 1e-5
			switch d {
			case dtype.BFloat16:
				limit = 1.0 / 128
			case dtype.Float16:
				limit = 1.0 / 1024
			}
			t.Logf("exported KV: max relative difference %.2e (limit %.0e), %d elements differ", worst, limit, ulps)
			if worst > limit {
				t.Errorf("exported KV differs between the backends by %.3e > %.0e", worst, limit)
			}
		})
	}
}

func decodeKV(t *testing.T, d dtype.DType, b []byte) []float32 {
	t.Helper()
	out := make([]float32, len(b)/d.Size())
	if err := dtype.Decode(d, out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCacheGrowsAcrossSteps feeds more positions than one growth step holds, one Forward at a time and across
// a growth boundary inside one Forward, and checks the result against the pure-Go backend.
func TestCacheGrowsAcrossSteps(t *testing.T) {
	mod := backendtest.Generate(t, backendtest.Tiny(func(o *modelgen.Options) { o.DType = dtype.BFloat16 }))
	ml, ref := loadFloat32(t, mod, backend.Options{PrefillChunk: 100}), loadCPU(t, mod, backend.Options{})
	p := backendtest.Prompt(cacheStep+40, mod.Config.VocabSize, 6)
	mc, rc := backendtest.NewCache(t, ml), backendtest.NewCache(t, ref)
	backendtest.Forward(t, ml, mc, p[:cacheStep-3]...)
	backendtest.Forward(t, ref, rc, p[:cacheStep-3]...)
	a, b := backendtest.Forward(t, ml, mc, p[cacheStep-3:]...), backendtest.Forward(t, ref, rc, p[cacheStep-3:]...)
	if d := backendtest.RelDiff(a, b); d > tolerance(mod.DType) {
		t.Fatalf("after growing, MLX differs from the pure-Go backend by %.2e", d)
	}
	if got, want := mc.Bytes(), int64(2*cacheStep)*int64(ml.KVLayout().PositionBytes()); got != want {
		t.Errorf("Bytes = %d, want %d (two growth steps)", got, want)
	}
}

//go:build mlx

package mlx

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
)

// cacheVariants cover each KV dtype and the shapes that change the KV layout.
var cacheVariants = []struct {
	name string
	opts modelgen.Options
}{
	{"f32", tiny(nil)},
	{"bf16", tiny(func(o *modelgen.Options) { o.DType = dtype.BFloat16 })},
	{"f16/qwen3", tiny(func(o *modelgen.Options) { o.DType, o.Family, o.HeadDim = dtype.Float16, model.Qwen3, 32 })},
	{"bf16/q4", tiny(func(o *modelgen.Options) {
		o.DType, o.Quantization = dtype.BFloat16, &modelgen.Quantization{Bits: 4, GroupSize: 32}
	})},
}

func exportAll(t *testing.T, m backend.Model, c backend.Cache, from, to int) (keys, values [][]byte) {
	t.Helper()
	l := m.KVLayout()
	for layer := 0; layer < l.NumLayers; layer++ {
		k, v := make([]byte, (to-from)*l.TokenBytes()), make([]byte, (to-from)*l.TokenBytes())
		if err := c.ExportKV(layer, from, to, k, v); err != nil {
			t.Fatal(err)
		}
		keys, values = append(keys, k), append(values, v)
	}
	return keys, values
}

// importAll writes keys and values (as exportAll returns them, from position 0) into c in three chunks per
// layer, layers in reverse order, as chunks of the KV wire may arrive.
func importAll(t *testing.T, m backend.Model, c backend.Cache, keys, values [][]byte) {
	t.Helper()
	tb := m.KVLayout().TokenBytes()
	n := len(keys[0]) / tb
	for _, cut := range [][2]int{{0, n / 3}, {n / 3, 2 * n / 3}, {2 * n / 3, n}} {
		for layer := len(keys) - 1; layer >= 0; layer-- {
			if err := c.ImportKV(layer, cut[0], keys[layer][cut[0]*tb:cut[1]*tb], values[layer][cut[0]*tb:cut[1]*tb]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c.Len() != n {
		t.Fatalf("imported cache holds %d positions, want %d", c.Len(), n)
	}
}

// TestKVTransferWithinMLX: KV exported from an MLX cache and imported into a fresh one continues with
// bit-identical logits and tokens to the cache it came from.
func TestKVTransferWithinMLX(t *testing.T) {
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			m := load(t, generate(t, v.opts), backend.Options{})
			p := prompt(21, m.VocabSize(), 2)
			n := len(p) - 1
			prefill := newCache(t, m)
			forward(t, m, prefill, p[:n]...)
			keys, values := exportAll(t, m, prefill, 0, n)
			decode := newCache(t, m)
			importAll(t, m, decode, keys, values)
			localLogits := forward(t, m, prefill, p[n])
			localTokens, _ := greedy(t, m, prefill, localLogits, 16)
			remoteLogits := forward(t, m, decode, p[n])
			if !slices.Equal(remoteLogits, localLogits) {
				t.Fatal("logits after importing KV differ from the cache it was exported from")
			}
			if got, _ := greedy(t, m, decode, remoteLogits, 16); !slices.Equal(got, localTokens) {
				t.Fatalf("greedy tokens after import %v, local %v", got, localTokens)
			}
			k1, v1 := exportAll(t, m, prefill, 0, prefill.Len())
			k2, v2 := exportAll(t, m, decode, 0, decode.Len())
			for layer := range k1 {
				if !bytes.Equal(k1[layer], k2[layer]) || !bytes.Equal(v1[layer], v2[layer]) {
					t.Fatalf("layer %d exports differ", layer)
				}
			}
		})
	}
}

// TestKVTransferAcrossBackends is disaggregation between an MLX machine and a pure-Go one, both ways: one
// backend prefills the prompt without its last token and exports the KV, the other imports it and decodes 64
// greedy tokens, which must be the tokens the importing backend decodes after its own prefill (and the
// exporting backend's). The exported bytes of both backends must agree element for element to within the
// rounding of the KV dtype.
func TestKVTransferAcrossBackends(t *testing.T) {
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			mod := generate(t, v.opts)
			ml, ref := loadFloat32(t, mod, backend.Options{}), loadCPU(t, mod, backend.Options{})
			if ml.KVLayout() != ref.KVLayout() {
				t.Fatalf("KV layouts differ: mlx %+v, cpu %+v", ml.KVLayout(), ref.KVLayout())
			}
			p := prompt(24, mod.Config.VocabSize, 3)
			n := len(p) - 1
			local := map[string][]int32{}
			exported := map[string][2][][]byte{}
			for name, m := range map[string]backend.Model{"mlx": ml, "cpu": ref} {
				c := newCache(t, m)
				forward(t, m, c, p[:n]...)
				k, vv := exportAll(t, m, c, 0, n)
				exported[name] = [2][][]byte{k, vv}
				local[name], _ = greedy(t, m, c, forward(t, m, c, p[n]), greedySteps)
			}
			if !slices.Equal(local["mlx"], local["cpu"]) {
				t.Fatalf("local greedy tokens differ:\nmlx %v\ncpu %v", local["mlx"], local["cpu"])
			}
			for _, dir := range []struct{ from, to string }{{"cpu", "mlx"}, {"mlx", "cpu"}} {
				m := map[string]backend.Model{"mlx": ml, "cpu": ref}[dir.to]
				c := newCache(t, m)
				importAll(t, m, c, exported[dir.from][0], exported[dir.from][1])
				got, _ := greedy(t, m, c, forward(t, m, c, p[n]), greedySteps)
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

func TestCloneAndTruncate(t *testing.T) {
	m := load(t, generate(t, tiny(func(o *modelgen.Options) { o.DType = dtype.BFloat16 })), backend.Options{})
	p := prompt(16, m.VocabSize(), 4)
	// The same computation without clone or truncate: 10 tokens, 6 tokens... each path below ends with
	// identical steps, so logits are compared bit for bit.
	ref := newCache(t, m)
	forward(t, m, ref, p[:6]...)
	want := forward(t, m, ref, p[6:]...)

	prefix := newCache(t, m)
	forward(t, m, prefix, p[:6]...)
	forward(t, m, prefix, p[6:10]...)
	clone, err := prefix.Clone(6)
	if err != nil {
		t.Fatal(err)
	}
	defer clone.Release()
	if clone.Len() != 6 || prefix.Len() != 10 {
		t.Fatalf("clone holds %d, original %d", clone.Len(), prefix.Len())
	}
	if got := forward(t, m, clone, p[6:]...); !slices.Equal(got, want) {
		t.Error("clone continued differently from the original prefix")
	}
	// The original is unchanged by cloning and by the clone's writes.
	prefix.Truncate(6)
	if got := forward(t, m, prefix, p[6:]...); !slices.Equal(got, want) {
		t.Error("original changed by cloning")
	}
	// Truncating and refeeding reproduces the same logits.
	prefix.Truncate(6)
	if prefix.Len() != 6 {
		t.Fatalf("truncated cache holds %d", prefix.Len())
	}
	if got := forward(t, m, prefix, p[6:]...); !slices.Equal(got, want) {
		t.Error("truncate + refeed differs")
	}
	prefix.Truncate(100) // no-op
	if prefix.Len() != 16 {
		t.Errorf("Truncate beyond the length changed it to %d", prefix.Len())
	}
	if _, err := prefix.Clone(17); err == nil {
		t.Error("cloned more positions than held")
	}
	empty, err := prefix.Clone(0)
	if err != nil || empty.Len() != 0 {
		t.Fatalf("Clone(0) = %v, %v", empty, err)
	}
	forward(t, m, empty, p[:6]...)
	if got := forward(t, m, empty, p[6:]...); !slices.Equal(got, want) {
		t.Error("an empty clone does not behave like a new cache")
	}
	empty.Release()
	if prefix.Bytes() <= 0 || clone.Bytes() <= 0 {
		t.Errorf("Bytes: %d, %d", prefix.Bytes(), clone.Bytes())
	}
	// Release frees memory and later use fails cleanly.
	clone.Release()
	clone.Release()
	if clone.Bytes() != 0 || clone.Len() != 0 {
		t.Error("released cache still holds memory")
	}
	err = m.Forward([]backend.Seq{{Cache: clone, Tokens: []int32{1}}})
	if !errors.Is(err, backend.ErrReleased) {
		t.Errorf("Forward on a released cache: %v", err)
	}
	if err := clone.ExportKV(0, 0, 0, nil, nil); !errors.Is(err, backend.ErrReleased) {
		t.Errorf("ExportKV on a released cache: %v", err)
	}
	if _, err := clone.Clone(0); !errors.Is(err, backend.ErrReleased) {
		t.Errorf("Clone of a released cache: %v", err)
	}
}

// TestBatchedMatchesUnbatched: sequences decoded together in one Forward (the projections and MLP run once
// over all their rows) get the logits they get alone, to float32 rounding (BLAS may sum a 3-row product in
// another order than a 1-row one), including a batch that mixes a prefill with decode steps.
func TestBatchedMatchesUnbatched(t *testing.T) {
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			m := load(t, generate(t, v.opts), backend.Options{PrefillChunk: 8})
			prompts := [][]int32{prompt(5, m.VocabSize(), 10), prompt(9, m.VocabSize(), 11), prompt(2, m.VocabSize(), 12)}
			var alone [][]float32
			for _, p := range prompts {
				c := newCache(t, m)
				forward(t, m, c, p[:len(p)-1]...)
				alone = append(alone, forward(t, m, c, p[len(p)-1]))
			}
			var batch []backend.Seq
			for i, p := range prompts {
				c := newCache(t, m)
				toks := p[len(p)-1:]
				if i < 2 {
					forward(t, m, c, p[:len(p)-1]...)
				} else {
					toks = p
				}
				batch = append(batch, backend.Seq{Cache: c, Tokens: toks, Logits: make([]float32, m.VocabSize())})
			}
			if err := m.Forward(batch); err != nil {
				t.Fatal(err)
			}
			for i := range prompts {
				if d := relDiff(batch[i].Logits, alone[i]); d > tolerance(m.KVLayout().DType) || argmax(batch[i].Logits) != argmax(alone[i]) {
					t.Errorf("sequence %d: batched logits differ from unbatched by %.2e", i, d)
				}
			}
		})
	}
}

// TestChunkedPrefillMatchesOneShot: prefill split into chunks of 3 tokens gives the logits of one 64-token step
// to float32 rounding, and greedy decoding continues identically.
func TestChunkedPrefillMatchesOneShot(t *testing.T) {
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			mod := generate(t, v.opts)
			chunked, oneShot := load(t, mod, backend.Options{PrefillChunk: 3}), load(t, mod, backend.Options{PrefillChunk: 64})
			p := prompt(40, chunked.VocabSize(), 5)
			c1, c2 := newCache(t, chunked), newCache(t, oneShot)
			l1, l2 := forward(t, chunked, c1, p...), forward(t, oneShot, c2, p...)
			if d := relDiff(l1, l2); d > tolerance(mod.DType) {
				t.Fatalf("chunked prefill logits differ from one-shot by %.2e", d)
			}
			g1, _ := greedy(t, chunked, c1, l1, 24)
			g2, _ := greedy(t, oneShot, c2, l2, 24)
			if !slices.Equal(g1, g2) {
				t.Fatalf("greedy continuations differ: %v vs %v", g1, g2)
			}
		})
	}
}

// TestCacheGrowsAcrossSteps feeds more positions than one growth step holds, one Forward at a time and across
// a growth boundary inside one Forward, and checks the result against the pure-Go backend.
func TestCacheGrowsAcrossSteps(t *testing.T) {
	mod := generate(t, tiny(func(o *modelgen.Options) { o.DType = dtype.BFloat16 }))
	ml, ref := loadFloat32(t, mod, backend.Options{PrefillChunk: 100}), loadCPU(t, mod, backend.Options{})
	p := prompt(cacheStep+40, mod.Config.VocabSize, 6)
	mc, rc := newCache(t, ml), newCache(t, ref)
	forward(t, ml, mc, p[:cacheStep-3]...)
	forward(t, ref, rc, p[:cacheStep-3]...)
	a, b := forward(t, ml, mc, p[cacheStep-3:]...), forward(t, ref, rc, p[cacheStep-3:]...)
	if d := relDiff(a, b); d > tolerance(mod.DType) {
		t.Fatalf("after growing, MLX differs from the pure-Go backend by %.2e", d)
	}
	if got, want := mc.Bytes(), int64(2*cacheStep)*int64(ml.KVLayout().TokenBytes())*2*int64(ml.KVLayout().NumLayers); got != want {
		t.Errorf("Bytes = %d, want %d (two growth steps)", got, want)
	}
}

func TestForwardErrors(t *testing.T) {
	mod := generate(t, tiny(func(o *modelgen.Options) { o.MaxPositionEmbeddings = 32 }))
	m := load(t, mod, backend.Options{})
	other := load(t, mod, backend.Options{})
	good := func() backend.Cache { return newCache(t, m) }
	shared := good()
	uneven := good()
	forward(t, m, uneven, 1, 2, 3)
	tb := m.KVLayout().TokenBytes()
	if err := uneven.ImportKV(0, 3, make([]byte, tb), make([]byte, tb)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		batch []backend.Seq
		want  string
	}{
		{"no tokens", []backend.Seq{{Cache: good()}}, "no tokens"},
		{"token too large", []backend.Seq{{Cache: good(), Tokens: []int32{int32(m.VocabSize())}}}, "out of range"},
		{"negative token", []backend.Seq{{Cache: good(), Tokens: []int32{-1}}}, "out of range"},
		{"short logits", []backend.Seq{{Cache: good(), Tokens: []int32{1}, Logits: make([]float32, 3)}}, "logits buffer"},
		{"context full", []backend.Seq{{Cache: good(), Tokens: make([]int32, 33)}}, "context limit"},
		{"foreign cache", []backend.Seq{{Cache: newCache(t, other), Tokens: []int32{1}}}, "does not belong"},
		{"nil cache", []backend.Seq{{Tokens: []int32{1}}}, "does not belong"},
		{"same cache twice", []backend.Seq{{Cache: shared, Tokens: []int32{1}}, {Cache: shared, Tokens: []int32{2}}}, "twice"},
		{"uneven layers", []backend.Seq{{Cache: uneven, Tokens: []int32{1}}}, "different numbers of positions"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := m.Forward(tc.batch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Forward error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if shared.Len() != 0 {
		t.Error("a failed Forward changed a cache")
	}
}

func TestImportExportErrors(t *testing.T) {
	m := load(t, generate(t, tiny(func(o *modelgen.Options) { o.MaxPositionEmbeddings = 16 })), backend.Options{})
	c := newCache(t, m)
	forward(t, m, c, 1, 2, 3, 4)
	tb := m.KVLayout().TokenBytes()
	buf := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"export bad layer", c.ExportKV(99, 0, 1, buf(tb), buf(tb)), "layer 99 out of range"},
		{"export negative layer", c.ExportKV(-1, 0, 1, buf(tb), buf(tb)), "layer -1 out of range"},
		{"export past end", c.ExportKV(0, 2, 5, buf(3*tb), buf(3*tb)), "positions [2, 5)"},
		{"export reversed", c.ExportKV(0, 3, 2, nil, nil), "positions [3, 2)"},
		{"export short buffer", c.ExportKV(0, 0, 2, buf(tb), buf(2*tb)), "buffers"},
		{"import gap", c.ImportKV(1, 6, buf(tb), buf(tb)), "gap"},
		{"import ragged", c.ImportKV(1, 4, buf(tb+1), buf(tb+1)), "multiples"},
		{"import unequal", c.ImportKV(1, 4, buf(tb), buf(2*tb)), "multiples"},
		{"import past context", c.ImportKV(1, 4, buf(13*tb), buf(13*tb)), "context limit"},
		{"import negative", c.ImportKV(1, -1, buf(tb), buf(tb)), "gap"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
	if c.Len() != 4 {
		t.Errorf("failed imports changed the cache: Len %d", c.Len())
	}
	if err := c.ExportKV(0, 2, 2, nil, nil); err != nil {
		t.Errorf("empty export: %v", err)
	}
}

// TestConcurrentForward runs Forward from several goroutines (each with its own cache); the calls meet on the
// MLX thread one at a time and every sequence gets the logits it would get alone.
func TestConcurrentForward(t *testing.T) {
	m := load(t, generate(t, tiny(nil)), backend.Options{})
	p := prompt(12, m.VocabSize(), 8)
	want := newCache(t, m)
	var wantLogits []float32
	for _, tok := range p {
		wantLogits = forward(t, m, want, tok)
	}
	errs := make(chan error, 6)
	for g := 0; g < 6; g++ {
		go func() {
			c, err := m.NewCache()
			if err != nil {
				errs <- err
				return
			}
			defer c.Release()
			logits := make([]float32, m.VocabSize())
			for _, tok := range p {
				if err := m.Forward([]backend.Seq{{Cache: c, Tokens: []int32{tok}, Logits: logits}}); err != nil {
					errs <- err
					return
				}
			}
			if !slices.Equal(logits, wantLogits) {
				errs <- errors.New("concurrent sequence got different logits")
				return
			}
			errs <- nil
		}()
	}
	for g := 0; g < 6; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestClosedModel(t *testing.T) {
	m, err := Backend{}.Load(generate(t, tiny(nil)), backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.NewCache()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := m.Forward([]backend.Seq{{Cache: c, Tokens: []int32{1}}}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Forward after Close: %v", err)
	}
	if _, err := m.NewCache(); err == nil {
		t.Error("NewCache after Close succeeded")
	}
	c.Release()
}

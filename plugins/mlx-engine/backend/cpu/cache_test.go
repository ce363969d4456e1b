package cpu

import (
	"bytes"
	"errors"
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

// TestKVTransferIsExact is the disaggregation guarantee: KV exported from one cache and imported into a fresh
// one (layers arriving in several chunks, out of layer order) continues with bit-identical logits and tokens.
func TestKVTransferIsExact(t *testing.T) {
	t.Parallel()
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			m := load(t, generate(t, v.opts), backend.Options{})
			p := prompt(21, m.VocabSize(), 2)
			// Local: prefill everything, then decode.
			local := newCache(t, m)
			localLogits := forward(t, m, local, p...)
			localTokens := greedy(t, m, local, localLogits, 16)
			// Remote prefill of the prompt without its last token, shipped over in chunks.
			prefill := newCache(t, m)
			forward(t, m, prefill, p[:len(p)-1]...)
			n := len(p) - 1
			keys, values := exportAll(t, m, prefill, 0, n)
			decode := newCache(t, m)
			tb := m.KVLayout().TokenBytes()
			for _, cut := range [][2]int{{0, 7}, {7, 13}, {13, n}} {
				for layer := m.KVLayout().NumLayers - 1; layer >= 0; layer-- {
					if err := decode.ImportKV(layer, cut[0], keys[layer][cut[0]*tb:cut[1]*tb], values[layer][cut[0]*tb:cut[1]*tb]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if decode.Len() != n {
				t.Fatalf("imported cache holds %d positions, want %d", decode.Len(), n)
			}
			remoteLogits := forward(t, m, decode, p[len(p)-1])
			if !slices.Equal(remoteLogits, localLogits) {
				t.Fatal("logits after importing KV differ from local prefill")
			}
			if got := greedy(t, m, decode, remoteLogits, 16); !slices.Equal(got, localTokens) {
				t.Fatalf("greedy tokens after import %v, local %v", got, localTokens)
			}
			// And the whole cache exports identically from both sides.
			k1, v1 := exportAll(t, m, local, 0, local.Len())
			k2, v2 := exportAll(t, m, decode, 0, decode.Len())
			for layer := range k1 {
				if !bytes.Equal(k1[layer], k2[layer]) || !bytes.Equal(v1[layer], v2[layer]) {
					t.Fatalf("layer %d exports differ", layer)
				}
			}
		})
	}
}

// TestExportWireLayout checks ExportKV's bytes against the dtype's own encoding of values read back through
// the cache, in [tokens, kv_heads, head_dim] order.
func TestExportWireLayout(t *testing.T) {
	t.Parallel()
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			m := load(t, generate(t, v.opts), backend.Options{})
			c := newCache(t, m)
			forward(t, m, c, prompt(5, m.VocabSize(), 3)...)
			l := m.KVLayout()
			if l.DType != v.opts.DType {
				t.Fatalf("KV dtype %s, model dtype %s", l.DType, v.opts.DType)
			}
			keys, values := exportAll(t, m, c, 1, 4)
			cc := c.(*cache)
			for layer := 0; layer < l.NumLayers; layer++ {
				for h := 0; h < l.NumKVHeads; h++ {
					kbuf, vbuf := make([]float32, 5*l.HeadDim), make([]float32, 5*l.HeadDim)
					k, vv := cc.head(layer, h, 5, kbuf, vbuf)
					for tok := 1; tok < 4; tok++ {
						want := make([]byte, l.HeadDim*l.DType.Size())
						dtype.Encode(l.DType, want, k[tok*l.HeadDim:(tok+1)*l.HeadDim])
						off := ((tok-1)*l.NumKVHeads + h) * len(want)
						if !bytes.Equal(keys[layer][off:off+len(want)], want) {
							t.Fatalf("layer %d head %d token %d: key bytes differ", layer, h, tok)
						}
						dtype.Encode(l.DType, want, vv[tok*l.HeadDim:(tok+1)*l.HeadDim])
						if !bytes.Equal(values[layer][off:off+len(want)], want) {
							t.Fatalf("layer %d head %d token %d: value bytes differ", layer, h, tok)
						}
					}
				}
			}
		})
	}
}

func TestCloneAndTruncate(t *testing.T) {
	t.Parallel()
	m := load(t, generate(t, tiny(func(o *modelgen.Options) { o.DType = dtype.BFloat16 })), backend.Options{})
	p := prompt(16, m.VocabSize(), 4)
	full := newCache(t, m)
	want := forward(t, m, full, p...)

	// A clone of a prefix continues like the original did.
	prefix := newCache(t, m)
	forward(t, m, prefix, p[:10]...)
	clone, err := prefix.Clone(6)
	if err != nil {
		t.Fatal(err)
	}
	defer clone.Release()
	if clone.Len() != 6 || prefix.Len() != 10 {
		t.Fatalf("clone holds %d, original %d", clone.Len(), prefix.Len())
	}
	if got := forward(t, m, clone, p[6:]...); !slices.Equal(got, want) {
		t.Error("clone continued differently from a fresh prefill")
	}
	if got := forward(t, m, prefix, p[10:]...); !slices.Equal(got, want) {
		t.Error("original changed by cloning")
	}
	// Truncating and refeeding reproduces the same logits.
	full.Truncate(9)
	if full.Len() != 9 {
		t.Fatalf("truncated cache holds %d", full.Len())
	}
	if got := forward(t, m, full, p[9:]...); !slices.Equal(got, want) {
		t.Error("truncate + refeed differs")
	}
	full.Truncate(100) // no-op
	if full.Len() != 16 {
		t.Errorf("Truncate beyond the length changed it to %d", full.Len())
	}
	if _, err := full.Clone(17); err == nil {
		t.Error("cloned more positions than held")
	}
	if full.Bytes() <= 0 || clone.Bytes() <= 0 {
		t.Errorf("Bytes: %d, %d", full.Bytes(), clone.Bytes())
	}
	// Release frees memory and later use fails cleanly.
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
}

// TestBatchedEqualsUnbatched: sequences decoded together in one Forward get bit-identical logits to the same
// sequences decoded alone, including a batch that mixes a prefill with decode steps.
func TestBatchedEqualsUnbatched(t *testing.T) {
	t.Parallel()
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			m := load(t, generate(t, v.opts), backend.Options{PrefillChunk: 8})
			prompts := [][]int32{prompt(5, m.VocabSize(), 10), prompt(9, m.VocabSize(), 11), prompt(2, m.VocabSize(), 12)}
			// Alone.
			var alone [][]float32
			for _, p := range prompts {
				c := newCache(t, m)
				forward(t, m, c, p[:len(p)-1]...)
				alone = append(alone, forward(t, m, c, p[len(p)-1]))
			}
			// Together: the first two already prefilled, the third prefilled inside the batch.
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
				if !slices.Equal(batch[i].Logits, alone[i]) {
					t.Errorf("sequence %d: batched logits differ from unbatched", i)
				}
			}
		})
	}
}

// TestChunkedPrefillEqualsOneShot: prefill split into chunks of 3 tokens equals one step of 64 tokens, and
// greedy decoding continues identically.
func TestChunkedPrefillEqualsOneShot(t *testing.T) {
	t.Parallel()
	for _, v := range cacheVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			mod := generate(t, v.opts)
			chunked, oneShot := load(t, mod, backend.Options{PrefillChunk: 3}), load(t, mod, backend.Options{PrefillChunk: 64})
			p := prompt(40, chunked.VocabSize(), 5)
			c1, c2 := newCache(t, chunked), newCache(t, oneShot)
			l1, l2 := forward(t, chunked, c1, p...), forward(t, oneShot, c2, p...)
			if !slices.Equal(l1, l2) {
				t.Fatal("chunked prefill logits differ from one-shot")
			}
			if g1, g2 := greedy(t, chunked, c1, l1, 12), greedy(t, oneShot, c2, l2, 12); !slices.Equal(g1, g2) {
				t.Fatalf("greedy continuations differ: %v vs %v", g1, g2)
			}
		})
	}
}

func TestThreadsDoNotChangeResults(t *testing.T) {
	t.Parallel()
	mod := generate(t, tiny(nil))
	one, four := load(t, mod, backend.Options{Threads: 1}), load(t, mod, backend.Options{Threads: 4})
	p := prompt(20, one.VocabSize(), 6)
	if !slices.Equal(forward(t, one, newCache(t, one), p...), forward(t, four, newCache(t, four), p...)) {
		t.Error("results depend on the number of threads")
	}
}

func TestForwardErrors(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
}

// TestConcurrentForward runs Forward from several goroutines (each with its own cache); calls serialise and
// every sequence gets the logits it would get alone.
func TestConcurrentForward(t *testing.T) {
	t.Parallel()
	m := load(t, generate(t, tiny(nil)), backend.Options{})
	p := prompt(12, m.VocabSize(), 8)
	want := forward(t, m, newCache(t, m), p...)
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
			if !slices.Equal(logits, want) {
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
	t.Parallel()
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
}

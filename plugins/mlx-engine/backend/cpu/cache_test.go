package cpu

import (
	"bytes"
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// TestExportWireLayout checks ExportKV's bytes against the dtype's own encoding of values read back through
// the cache, in [tokens, kv_heads, head_dim] order.
func TestExportWireLayout(t *testing.T) {
	t.Parallel()
	for _, v := range backendtest.Variants() {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			m := load(t, backendtest.Generate(t, v.Options), backend.Options{})
			c := backendtest.NewCache(t, m)
			backendtest.Forward(t, m, c, backendtest.Prompt(5, m.VocabSize(), 3)...)
			l := m.KVLayout()
			if l.DType != v.Options.DType {
				t.Fatalf("KV dtype %s, model dtype %s", l.DType, v.Options.DType)
			}
			keys, values := backendtest.ExportAll(t, m, c, 1, 4)
			cc := c.(*cache)
			for layer := 0; layer < l.NumLayers(); layer++ {
				ly := l.Layers[layer]
				for h := 0; h < ly.KVHeads; h++ {
					kbuf, vbuf := make([]float32, 5*ly.HeadDim), make([]float32, 5*ly.HeadDim)
					k, vv := cc.span(layer, h, 0, 5, kbuf, vbuf)
					for tok := 1; tok < 4; tok++ {
						want := make([]byte, ly.HeadDim*l.DType.Size())
						dtype.Encode(l.DType, want, k[tok*ly.HeadDim:(tok+1)*ly.HeadDim])
						off := ((tok-1)*ly.KVHeads + h) * len(want)
						if !bytes.Equal(keys[layer][off:off+len(want)], want) {
							t.Fatalf("layer %d head %d token %d: key bytes differ", layer, h, tok)
						}
						dtype.Encode(l.DType, want, vv[tok*ly.HeadDim:(tok+1)*ly.HeadDim])
						if !bytes.Equal(values[layer][off:off+len(want)], want) {
							t.Fatalf("layer %d head %d token %d: value bytes differ", layer, h, tok)
						}
					}
				}
			}
		})
	}
}

func TestThreadsDoNotChangeResults(t *testing.T) {
	t.Parallel()
	mod := backendtest.Generate(t, backendtest.Tiny(nil))
	one, four := load(t, mod, backend.Options{Threads: 1}), load(t, mod, backend.Options{Threads: 4})
	p := backendtest.Prompt(20, one.VocabSize(), 6)
	if !slices.Equal(backendtest.Forward(t, one, backendtest.NewCache(t, one), p...), backendtest.Forward(t, four, backendtest.NewCache(t, four), p...)) {
		t.Error("results depend on the number of threads")
	}
}

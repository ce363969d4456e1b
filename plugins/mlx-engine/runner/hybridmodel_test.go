package runner_test

import (
	"slices"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/backendtest"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/cpu"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/kvwire"
)

// hybridModels are the tiny hybrids (four Gated DeltaNet layers and two full-attention layers): qwen3_next in
// bfloat16 with Hugging Face names and qwen3_5_moe 4-bit as mlx-community stores it. Their default snapshot grid
// is 256 positions.
func hybridModels(t *testing.T) map[string]*model.Model {
	t.Helper()
	next := modelgen.TinyFamily(model.Qwen3Next)
	next.DType = dtype.BFloat16
	q35 := modelgen.TinyFamily(model.Qwen35MoE)
	q35.DType, q35.Layout = dtype.BFloat16, modelgen.LayoutMLX
	q35.Quantization = &modelgen.Quantization{Bits: 4, GroupSize: 32}
	return map[string]*model.Model{"qwen3_next": backendtest.Generate(t, next), "qwen3_5_moe": backendtest.Generate(t, q35)}
}

// TestHybridModelPD: on the CPU backend, whose linear layers compute the same bits however a prompt is split,
// remote prefill of a real hybrid model gives a local prefill's tokens bit for bit, at start_pos 0 and > 0 (a
// decode-side prefix hit at a prompt's end), with prefill chunks that the grid trims; an exo-shaped client gets
// each linear layer's state after the whole prompt exactly as a cache that computed it holds it; and a chat's
// next turn hits the previous prompt's end, a longer shared prompt the grid.
func TestHybridModelPD(t *testing.T) {
	t.Parallel()
	for name, mod := range hybridModels(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			vocab := mod.Config.VocabSize
			ref := newNode(t, mod, 64, 0, false)
			p := newNode(t, mod, 64, 64<<20, true)
			d := newNode(t, mod, 48, 64<<20, false)

			long := prompt(300, 101, vocab)
			pdExactAtStarts(t, ref, p, d, long, prompt(100, 102, vocab), prompt(200, 103, vocab), 12)

			// What an exo client reads: the states after the whole prompt, whatever start_pos.
			bm := backendtest.Load(t, cpu.Backend{}, mod, backend.Options{})
			c := backendtest.NewCache(t, bm)
			L := len(long) - 1
			backendtest.Forward(t, bm, c, long[:L]...)
			layout := bm.KVLayout()
			for _, start := range []int{0, 150, L} {
				resp := exoFetch(t, p.addr, long[:L], start)
				if resp.Header.NumLayers != layout.NumLayers() {
					t.Fatalf("start %d: header %+v", start, resp.Header)
				}
				var states []int
				for _, m := range resp.Messages {
					switch m := m.(type) {
					case *kvwire.KVChunk:
						if layout.Layers[m.LayerIdx].Kind == backend.KVLinear {
							t.Fatalf("start %d: kv_chunk for linear layer %d", start, m.LayerIdx)
						}
					case *kvwire.ArraysState:
						ly := layout.Layers[m.LayerIdx]
						dst := make([][]byte, len(ly.State))
						for i, a := range ly.State {
							dst[i] = make([]byte, a.Bytes())
						}
						if err := c.ExportState(m.LayerIdx, dst); err != nil {
							t.Fatal(err)
						}
						for i, a := range ly.State {
							if b := m.Arrays[i]; b.DType.String() != string(a.DType) || !slices.Equal(b.Shape, a.Shape) || !slices.Equal(b.Data, dst[i]) {
								t.Errorf("start %d layer %d array %d: %s %v, want %s %v and the reference's bytes", start, m.LayerIdx, i, b.DType, b.Shape, a.DType, a.Shape)
							}
						}
						states = append(states, m.LayerIdx)
					case *kvwire.Done:
						if m.TotalTokens != L-start {
							t.Errorf("start %d: done.total_tokens %d, want %d", start, m.TotalTokens, L-start)
						}
					}
				}
				var linear []int
				for i, ly := range layout.Layers {
					if ly.Kind == backend.KVLinear {
						linear = append(linear, i)
					}
				}
				if !slices.Equal(states, linear) {
					t.Errorf("start %d: states of layers %v, want %v", start, states, linear)
				}
			}

			chat := newNode(t, mod, 64, 64<<20, false)
			turn1 := prompt(300, 104, vocab)
			chat.gen(t, turn1, 6, 1, nil, nil)
			for _, tc := range []struct {
				name   string
				prompt []int32
				cached int
			}{
				{"next turn", append(slices.Clone(turn1), prompt(40, 105, vocab)...), 300},
				{"shared start past the grid", append(slices.Clone(turn1[:280]), prompt(40, 106, vocab)...), 256},
			} {
				want := ref.gen(t, tc.prompt, 8, 1, nil, nil)
				got := chat.gen(t, tc.prompt, 8, 1, nil, nil)
				if c := got.final.Usage.CachedTokens; c != tc.cached {
					t.Errorf("%s: %d cached tokens, want %d", tc.name, c, tc.cached)
				}
				if !slices.Equal(got.tokens[0], want.tokens[0]) {
					t.Errorf("%s: %v, want %v", tc.name, got.tokens[0], want.tokens[0])
				}
			}
		})
	}
}

package runner

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

// hybridLayout is a layout of attention layers (kvHeads × headDim in bf16) and Gated DeltaNet layers in the
// pattern of Qwen3-Next: three linear layers, then one full.
func hybridLayout(layers, kvHeads, headDim, convDim, nv, dv, dk int) backend.KVLayout {
	l := backend.KVLayout{DType: backend.BFloat16, Layers: make([]backend.LayerKV, layers)}
	for i := range l.Layers {
		if i%4 == 3 {
			l.Layers[i] = backend.LayerKV{Kind: backend.KVFull, KVHeads: kvHeads, HeadDim: headDim}
		} else {
			l.Layers[i] = backend.LinearLayer(backend.BFloat16, 4, convDim, nv, dv, dk)
		}
	}
	return l
}

func TestSnapshotGrid(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout backend.KVLayout
		want   int
	}{
		// 36 linear layers of 2 MiB + 48 KiB against 12 × 2 × 256 × 2 × 2 B = 24 KiB a position: 3,070 positions.
		{"Qwen3-Next-80B-A3B", hybridLayout(48, 2, 256, 8192, 32, 128, 128), 4096},
		// A tiny model's state weighs a few positions of KV: the floor.
		{"tiny", hybridLayout(8, 2, 16, 64, 4, 8, 16), 256},
		// Huge states against little KV: the cap.
		{"state-heavy", hybridLayout(48, 1, 8, 8192, 64, 128, 128), 8192},
		{"no attention layers", backend.KVLayout{DType: backend.BFloat16, Layers: []backend.LayerKV{
			backend.LinearLayer(backend.BFloat16, 4, 64, 4, 8, 16)}}, 8192},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SnapshotGrid(tc.layout)
			if got != tc.want {
				t.Errorf("SnapshotGrid = %d, want %d (state %d B, KV %d B a position)", got, tc.want, tc.layout.StateBytes(), tc.layout.PositionBytes())
			}
			if got%64 != 0 || got&(got-1) != 0 {
				t.Errorf("%d is not a power of two and a multiple of 64", got)
			}
		})
	}
}

func TestPrefillChunk(t *testing.T) {
	type step struct {
		chunk    int
		snapshot bool
	}
	for _, tc := range []struct {
		name                         string
		prefilled, total, size, grid int
		want                         []step // the steps from prefilled to total
	}{
		{"no grid: chunks as before, no snapshots", 0, 600, 256, 0, []step{{256, false}, {256, false}, {88, false}}},
		{"chunks end on the grid and at the prompt's end", 0, 600, 256, 256, []step{{256, true}, {256, true}, {88, true}}},
		{"a chunk longer than the grid is cut at each point", 0, 700, 2048, 256, []step{{256, true}, {256, true}, {188, true}}},
		{"from a prefix-cache hit off the grid", 100, 600, 256, 256, []step{{156, true}, {256, true}, {88, true}}},
		{"short chunks between grid points", 0, 140, 48, 64, []step{{48, false}, {16, true}, {48, false}, {16, true}, {12, true}}},
		{"a prompt ending on the grid", 0, 512, 300, 256, []step{{256, true}, {256, true}}},
		{"the last token (after a remote prefill)", 599, 600, 2048, 256, []step{{1, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []step
			for p := tc.prefilled; p < tc.total; {
				c, s := prefillChunk(p, tc.total, tc.size, tc.grid)
				if c <= 0 || len(got) > len(tc.want) {
					t.Fatalf("chunk %d at %d", c, p)
				}
				got = append(got, step{c, s})
				p += c
			}
			if len(got) != len(tc.want) {
				t.Fatalf("steps %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("steps %v, want %v", got, tc.want)
				}
			}
		})
	}
}

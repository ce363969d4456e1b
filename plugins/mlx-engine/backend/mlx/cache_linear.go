//go:build mlx

package mlx

// #include "mlx/c/mlx.h"
import "C"

import (
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

// The recurrent part of the cache: what a linear (Gated DeltaNet) layer keeps per sequence, and the snapshots
// that let a cache with such layers be cut at earlier positions (docs/hybrid-design.md §3). A layer's state is
// a linearState of one sequence: the conv window [1, K-1, convDim] in the cache's dtype and the delta-rule state
// float32 [1, Nv, Dv, Dk]; zero handles are the zero state. MLX arrays are immutable and a step replaces the
// handles with its results, so a snapshot is a set of retained handles to the arrays of that moment, never a
// copy; a clone retains its own handles to the same arrays.

// retain returns a new handle to a's array (the zero handle for the zero handle); the caller owns it.
func retain(a C.mlx_array) C.mlx_array {
	if a.ctx == nil {
		return a
	}
	r := C.mlx_array_new()
	C.mlx_array_set(&r, a)
	return r
}

func retainState(s linearState) linearState { return linearState{conv: retain(s.conv), s: retain(s.s)} }

func (s *linearState) free() {
	free(&s.conv)
	free(&s.s)
}

// retainStates returns new handles to the arrays of ls (a snapshot's: indexed by layer, zero for attention
// layers); the caller owns them.
func retainStates(ls []linearState) []linearState {
	out := make([]linearState, len(ls))
	for i := range ls {
		out[i] = retainState(ls[i])
	}
	return out
}

// freeStates frees the handles of ls (a snapshot's).
func freeStates(ls []linearState) {
	for i := range ls {
		ls[i].free()
	}
}

// isLinear reports whether layer i of the cache's layout is a linear layer.
func (c *cache) isLinear(i int) bool { return c.m.layout.Layers[i].Kind == backend.KVLinear }

// linearZero is the zero state of linear layer li as arrays of g.
func (c *cache) linearZero(g *graph, li int) linearState {
	d := c.m.layers[li].linDims
	return linearState{
		conv: g.zeros([]int{1, d.K - 1, d.convDim()}, c.m.kvC),
		s:    g.zeros([]int{1, d.Nv, d.Dv, d.Dk}, C.MLX_FLOAT32),
	}
}

// linearState returns linear layer li's live state as arrays usable in g (zeros for the zero state).
func (c *cache) linearState(g *graph, li int) linearState {
	if st := c.lin[li]; st.s.ctx != nil {
		return st
	}
	return c.linearZero(g, li)
}

// setLinear replaces linear layer li's live state with st, which the cache now owns.
func (c *cache) setLinear(li int, st linearState) {
	c.lin[li].free()
	c.lin[li] = st
}

// livePos is the position every linear layer's live state describes; ok is false when an unfinished import
// left them at different positions.
func (c *cache) livePos() (pos int, ok bool) { return backend.LivePos(c.m.layout, c.lens) }

// keep records the live state of every linear layer as a snapshot at pos, unless there is one.
func (c *cache) keep(pos int) { c.snaps.Keep(pos, c.take) }

// take returns new handles to the live state of every linear layer, as a snapshot.
func (c *cache) take() []linearState { return retainStates(c.lin) }

// keepSnapshot keeps the live state of the linear layers as a cut at Len() (Seq.Snapshot).
func (c *cache) keepSnapshot() {
	if c.lin == nil {
		return
	}
	c.snaps.KeepLive(c.m.layout, c.lens, c.take)
}

// cuts lists the positions where the linear layers' state is known (backend.Snapshots.Known).
func (c *cache) cuts() []int { return c.snaps.Known(c.m.layout, c.lens) }

// Cuts lists the positions Clone and Truncate can cut at; nil (every position) without linear layers.
func (c *cache) Cuts() []int {
	if c.lin == nil || c.released {
		return nil
	}
	return c.snaps.Cuts(c.m.layout, c.lens)
}

// stateAt returns the state of every linear layer at cut pos (a snapshot's or the live one), or nil for the
// zero state.
func (c *cache) stateAt(pos int) []linearState {
	if s, ok := c.snaps.At(pos); ok {
		return s
	}
	if p, ok := c.livePos(); ok && p == pos {
		return c.lin
	}
	return nil
}

// truncateLinear is Truncate for a cache with linear layers: a linear layer beyond n goes back to the newest
// cut <= n, and so does every other layer, dropping the snapshots above.
func (c *cache) truncateLinear(n int) {
	if !backend.LinearBeyond(c.m.layout, c.lens, n) {
		c.lens.Truncate(n)
		return
	}
	cut := backend.NewestCut(c.cuts(), n)
	src := c.stateAt(cut)
	do(func() error {
		for i := range c.lin {
			if !c.isLinear(i) {
				continue
			}
			var st linearState
			if src != nil {
				st = retainState(src[i])
			}
			c.setLinear(i, st)
		}
		c.snaps.DropAbove(cut, freeStates)
		return nil
	})
	c.lens.Truncate(cut)
}

// cloneLinear gives out, a clone of the first n positions (a cut), the snapshots at positions <= n and the
// state at n as its live state. It runs on the MLX thread.
func (c *cache) cloneLinear(out *cache, n int) {
	out.snaps = c.snaps.Upto(n, retainStates)
	if src := c.stateAt(n); src != nil {
		for i := range out.lin {
			out.lin[i] = retainState(src[i])
		}
	}
}

// ExportState copies linear layer layer's state in the wire layout: the conv window, then the delta-rule state.
func (c *cache) ExportState(layer int, dst [][]byte) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := c.lens.CheckExportState(c.m.KVLayout(), layer, dst); err != nil {
		return fmt.Errorf("mlx: %w", err)
	}
	st := c.lin[layer]
	if st.s.ctx == nil {
		clear(dst[0])
		clear(dst[1])
		return nil
	}
	return do(func() error {
		g := newGraph()
		defer g.free()
		conv, s := g.contiguous(st.conv), g.contiguous(st.s)
		if g.err != nil {
			return g.err
		}
		if err := evalArrays(conv, s); err != nil {
			return err
		}
		if err := copyOut(conv, dst[0]); err != nil {
			return err
		}
		return copyOut(s, dst[1])
	})
}

// ImportState replaces linear layer layer's state with src (ExportState's arrays) describing n positions.
func (c *cache) ImportState(layer, n int, src [][]byte) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := c.lens.CheckImportState(c.m.KVLayout(), c.m.maxCtx, layer, n, src); err != nil {
		return fmt.Errorf("mlx: %w", err)
	}
	d := c.m.layers[layer].linDims
	return do(func() error {
		conv, err := newArray(src[0], []int{1, d.K - 1, d.convDim()}, c.m.kvC)
		if err != nil {
			return err
		}
		s, err := newArray(src[1], []int{1, d.Nv, d.Dv, d.Dk}, C.MLX_FLOAT32)
		if err != nil {
			free(&conv)
			return err
		}
		if pos, ok := c.livePos(); ok && pos > 0 {
			c.keep(pos) // the state the import replaces stays a cut: a failed import truncates back to it
		}
		c.setLinear(layer, linearState{conv: conv, s: s})
		c.lens.Import(layer, 0, n)
		if pos, ok := c.livePos(); ok && pos == n {
			c.keep(n) // every linear layer imported: the imported state is a cut
		}
		return nil
	})
}

// linearBytes is what the linear layers' live states and the snapshots the cache holds take.
func (c *cache) linearBytes() int64 {
	var n int64
	count := func(ls []linearState) {
		for i := range ls {
			if ls[i].s.ctx != nil {
				n += int64(c.m.layout.Layers[i].StateBytes())
			}
		}
	}
	count(c.lin)
	for _, s := range c.snaps.All() {
		count(s)
	}
	return n
}

// freeLinear lets go of the live states and the snapshots; it runs on the MLX thread.
func (c *cache) freeLinear() {
	for i := range c.lin {
		c.lin[i].free()
	}
	c.snaps.Clear(freeStates)
}

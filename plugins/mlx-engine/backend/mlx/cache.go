//go:build mlx

package mlx

// #include "mlx/c/mlx.h"
import "C"

import (
	"fmt"
	"slices"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

// cache is the MLX backend's KV cache: per layer, keys and values in preallocated buffers
// [1, kv_heads, capacity, head_dim] in the model's dtype, written with slice_update.
// A linear layer keeps its recurrent state instead (cache_linear.go).
//
// A full layer stores position p at index p and grows cacheStep positions at a time. A sliding layer (window W)
// is a bounded linear buffer, as in the cpu backend: index i holds position base+i, the positions it holds stay
// contiguous and in order, and when a step would run past its end the positions still needed move to the front
// of a new buffer. Its capacity never exceeds W + the prefill chunk: a step of T tokens at [s, s+T) needs
// [s-W+1, s+T) at once, and afterwards only the last W are kept (LayerSpans.Advance).
//
// Ownership: the cache owns exactly one handle to each buffer. A step that writes the cache replaces the handle
// with the slice_update result and frees the old one before evaluating, so the old buffer is referenced only by
// the update and MLX writes into it in place; any other reference left alive (a view kept from an earlier step)
// would make every step copy the whole cache. Reads (attention, export) take views that live only until the
// end of their step.
//
// Len and Truncate are plain Go; every method that touches MLX runs on the MLX thread.
type cache struct {
	m      *mlxModel
	layers []kvLayer
	lens   backend.LayerSpans // positions held, per layer
	// lin is, per layer, the live state of linear layers (cache_linear.go); nil without linear layers.
	lin      []linearState
	snaps    backend.Snapshots[[]linearState] // each indexed by layer, zero for attention layers
	released bool
	// broken is set when an evaluation that wrote this cache failed; the contents are then unknown.
	broken error
}

type kvLayer struct {
	cap  int
	base int         // position stored at index 0 (0 for full layers)
	k, v C.mlx_array // zero handles while cap == 0
}

var _ backend.Cache = (*cache)(nil)

func (m *mlxModel) NewCache() (backend.Cache, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	return m.newCache(), nil
}

func (m *mlxModel) newCache() *cache {
	c := &cache{m: m, layers: make([]kvLayer, len(m.layout.Layers)), lens: backend.NewLayerSpans(m.layout)}
	if m.layout.HasLinear() {
		c.lin = make([]linearState, len(m.layout.Layers))
	}
	return c
}

func (c *cache) Len() int { return c.lens.Len() }

func (c *cache) usable() error {
	if c.released {
		return backend.ErrReleased
	}
	return c.broken
}

func (c *cache) Truncate(n int) {
	if c.lin != nil && !c.released {
		c.truncateLinear(n)
		return
	}
	c.lens.Truncate(n)
}

func (c *cache) Restorable(n int) bool {
	if c.usable() != nil || !c.lens.Restorable(n) {
		return false
	}
	return c.lin == nil || slices.Contains(c.cuts(), n)
}

// capacityFor is the buffer size of a full layer that holds need positions.
func (c *cache) capacityFor(need int) int {
	return min((need+cacheStep-1)/cacheStep*cacheStep, max(c.m.maxCtx, need))
}

// slidingCapacity is the buffer size of sliding layer i that replaces one of capacity old to hold n positions:
// doubling from cacheStep, up to the window plus a prefill chunk, and at least n.
func (c *cache) slidingCapacity(i, old, n int) int {
	return max(n, min(max(2*old, cacheStep), c.lens[i].Window+c.m.chunk))
}

// grow makes full layer i hold at least need positions, adding the new buffer to g's graph. It runs on the MLX
// thread.
func (c *cache) grow(g *graph, i, need int) {
	l := &c.layers[i]
	if need <= l.cap || g.err != nil || c.isLinear(i) {
		return
	}
	kvh, hd := c.m.cfg.NumKVHeads, c.m.cfg.HeadDim
	newCap := c.capacityFor(need)
	var k, v C.mlx_array
	if l.cap == 0 {
		k = g.zeros([]int{1, kvh, newCap, hd}, c.m.kvC)
		v = g.zeros([]int{1, kvh, newCap, hd}, c.m.kvC)
	} else {
		ext := g.zeros([]int{1, kvh, newCap - l.cap, hd}, c.m.kvC)
		k = g.concat(2, l.k, ext)
		v = g.concat(2, l.v, ext)
	}
	if g.err != nil {
		return
	}
	free(&l.k)
	free(&l.v)
	l.k, l.v, l.cap = g.keep(k), g.keep(v), newCap
}

// relayout replaces dst's buffers with new ones of capacity newCap starting at position base, holding src's
// positions [lo, hi) (src may be dst; lo >= hi copies nothing). It runs on the MLX thread.
func (c *cache) relayout(g *graph, dst, src *kvLayer, base, newCap, lo, hi int) {
	if g.err != nil {
		return
	}
	kvh, hd := c.m.cfg.NumKVHeads, c.m.cfg.HeadDim
	k := g.zeros([]int{1, kvh, newCap, hd}, c.m.kvC)
	v := g.zeros([]int{1, kvh, newCap, hd}, c.m.kvC)
	if lo < hi {
		from, to := []int{0, 0, lo - src.base, 0}, []int{1, kvh, hi - src.base, hd}
		at, end := []int{0, 0, lo - base, 0}, []int{1, kvh, hi - base, hd}
		k = g.sliceUpdate(k, g.slice(src.k, from, to), at, end)
		v = g.sliceUpdate(v, g.slice(src.v, from, to), at, end)
	}
	if g.err != nil {
		return
	}
	free(&dst.k)
	free(&dst.v)
	dst.k, dst.v, dst.cap, dst.base = g.keep(k), g.keep(v), newCap, base
}

// reserveSliding makes sliding layer i able to store positions [pos, pos+t) while keeping what the step's
// queries see of the positions before pos.
func (c *cache) reserveSliding(g *graph, i, pos, t int) {
	l, s := &c.layers[i], c.lens[i]
	lo := max(s.Lo, pos-s.Window+1, 0)
	hi := pos + t
	if l.cap > 0 && lo >= l.base && hi <= l.base+l.cap {
		return
	}
	c.relayout(g, l, l, lo, c.slidingCapacity(i, l.cap, hi-lo), lo, min(pos, s.Hi))
}

// write stores kv_heads×T×head_dim keys and values ([1, kv_heads, T, head_dim], any float dtype) at positions
// [pos, pos+T) of layer i and returns views of the positions the step's queries see: [0, pos+T) for a full
// layer, with no mask (the caller's causal rule applies); [pos-W+1, pos+T) for a sliding one, with a bool mask
// [T, S] of what each query sees when that is not all of them. The capacity of a full layer must be there. It
// runs on the MLX thread; the views belong to g.
func (c *cache) write(g *graph, i, pos, t int, k, v C.mlx_array) (keys, values, mask C.mlx_array) {
	w := c.lens[i].Window
	if w > 0 {
		c.reserveSliding(g, i, pos, t)
	}
	l := &c.layers[i]
	kvh, hd := c.m.cfg.NumKVHeads, c.m.cfg.HeadDim
	start, stop := []int{0, 0, pos - l.base, 0}, []int{1, kvh, pos + t - l.base, hd}
	nk := g.sliceUpdate(l.k, g.astype(k, c.m.kvC), start, stop)
	nv := g.sliceUpdate(l.v, g.astype(v, c.m.kvC), start, stop)
	if g.err != nil {
		return nk, nv, mask
	}
	// Drop the handles to the old buffers now, before anything is evaluated, so the updates may write in place.
	free(&l.k)
	free(&l.v)
	l.k, l.v = g.keep(nk), g.keep(nv)
	first := 0
	if w > 0 {
		first = max(0, pos-w+1)
		if n := pos + t - first; t > 1 || n > w {
			m := make([]byte, t*n)
			for q := 0; q < t; q++ {
				for j := 0; j < n; j++ {
					if p := first + j; p <= pos+q && p > pos+q-w {
						m[q*n+j] = 1
					}
				}
			}
			mask = g.data(m, []int{t, n}, C.MLX_BOOL)
		}
	}
	from := []int{0, 0, first - l.base, 0}
	return g.slice(l.k, from, stop), g.slice(l.v, from, stop), mask
}

func (c *cache) Clone(n int) (backend.Cache, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	spans, err := c.lens.CheckClone(n)
	if err == nil && c.lin != nil {
		err = backend.CheckCut(c.cuts(), n)
	}
	if err != nil {
		return nil, fmt.Errorf("mlx: %w", err)
	}
	out := c.m.newCache()
	if n == 0 {
		return out, nil
	}
	if c.lin != nil {
		do(func() error {
			c.cloneLinear(out, n)
			return nil
		})
	}
	err = do(func() error {
		if err := checkMemory(out.bytesFor(n)); err != nil {
			return err
		}
		g := newGraph()
		defer g.free()
		var results []C.mlx_array
		for i := range c.layers {
			s := spans[i]
			src, dst := &c.layers[i], &out.layers[i]
			if c.isLinear(i) {
				out.lens[i] = s
				continue
			}
			if s.Window > 0 {
				c.relayout(g, dst, src, s.Lo, c.slidingCapacity(i, 0, s.Hi-s.Lo), s.Lo, s.Hi)
			} else {
				c.relayout(g, dst, src, 0, c.capacityFor(n), 0, n)
			}
			if g.err != nil {
				break
			}
			out.lens[i] = s
			results = append(results, dst.k, dst.v)
		}
		if g.err == nil && len(results) > 0 {
			g.err = evalArrays(results...)
		}
		if g.err != nil {
			out.free()
			out.freeLinear()
		}
		return g.err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// bytesFor is the memory the buffers for n positions take in every layer (a sliding layer's at most its bound).
func (c *cache) bytesFor(n int) int64 {
	var b int64
	for i := range c.layers {
		if c.isLinear(i) {
			continue
		}
		p := c.capacityFor(n)
		if c.lens[i].Window > 0 {
			p = min(p, c.lens[i].Window+c.m.chunk)
		}
		b += int64(p) * int64(c.m.layout.LayerTokenBytes(i)) * 2
	}
	return b
}

// moreBytes is what growing the layers to hold n positions adds to the cache's memory.
func (c *cache) moreBytes(n int) int64 {
	var b int64
	for i := range c.layers {
		if c.isLinear(i) {
			continue
		}
		p := c.capacityFor(n)
		if c.lens[i].Window > 0 {
			p = min(p, c.lens[i].Window+c.m.chunk)
		}
		if p > c.layers[i].cap {
			b += int64(p-c.layers[i].cap) * int64(c.m.layout.LayerTokenBytes(i)) * 2
		}
	}
	return b
}

func (c *cache) ExportKV(layer, from, to int, keys, values []byte) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := c.lens.CheckExport(c.m.KVLayout(), layer, from, to, keys, values); err != nil {
		return fmt.Errorf("mlx: %w", err)
	}
	l := &c.layers[layer]
	if from == to {
		return nil
	}
	return do(func() error {
		g := newGraph()
		defer g.free()
		kvh, hd := c.m.cfg.NumKVHeads, c.m.cfg.HeadDim
		start, stop := []int{0, 0, from - l.base, 0}, []int{1, kvh, to - l.base, hd}
		// [1, kv_heads, T, head_dim] → [1, T, kv_heads, head_dim], made contiguous: the wire layout.
		k := g.contiguous(g.transpose(g.slice(l.k, start, stop), 0, 2, 1, 3))
		v := g.contiguous(g.transpose(g.slice(l.v, start, stop), 0, 2, 1, 3))
		if g.err != nil {
			return g.err
		}
		if err := evalArrays(k, v); err != nil {
			return err
		}
		if err := copyOut(k, keys); err != nil {
			return err
		}
		return copyOut(v, values)
	})
}

func (c *cache) ImportKV(layer, from int, keys, values []byte) error {
	if err := c.usable(); err != nil {
		return err
	}
	n, err := c.lens.CheckImport(c.m.KVLayout(), c.m.maxCtx, layer, from, keys, values)
	if err != nil {
		return fmt.Errorf("mlx: %w", err)
	}
	l := &c.layers[layer]
	tb := c.m.KVLayout().LayerTokenBytes(layer)
	if n == 0 {
		return nil
	}
	old := c.lens[layer]
	// What the layer holds after the import (a sliding layer keeps its last window of it).
	after := backend.LayerSpans{old}.Import(0, from, n)
	return do(func() error {
		g := newGraph()
		defer g.free()
		kvh, hd := c.m.cfg.NumKVHeads, c.m.cfg.HeadDim
		if old.Window > 0 {
			if after.Lo < l.base || after.Hi > l.base+l.cap {
				newCap := c.slidingCapacity(layer, l.cap, after.Hi-after.Lo)
				if err := checkMemory(int64(max(0, newCap-l.cap)) * int64(tb) * 2); err != nil {
					return err
				}
				// Keep what the layer held and still holds after the import; the import overwrites the rest.
				c.relayout(g, l, l, after.Lo, newCap, max(after.Lo, old.Lo), min(after.Hi, old.Hi))
			}
		} else {
			if from+n > l.cap {
				if err := checkMemory(int64(c.capacityFor(from+n)-l.cap) * int64(tb) * 2); err != nil {
					return err
				}
			}
			c.grow(g, layer, from+n)
		}
		// The imported positions the layer keeps: [lo, from+n).
		lo := max(from, after.Lo)
		shape := []int{1, n, kvh, hd}
		k := g.transpose(g.data(keys, shape, c.m.kvC), 0, 2, 1, 3)
		v := g.transpose(g.data(values, shape, c.m.kvC), 0, 2, 1, 3)
		if lo > from {
			skip, all := []int{0, 0, lo - from, 0}, []int{1, kvh, n, hd}
			k, v = g.slice(k, skip, all), g.slice(v, skip, all)
		}
		start, stop := []int{0, 0, lo - l.base, 0}, []int{1, kvh, from + n - l.base, hd}
		nk := g.sliceUpdate(l.k, k, start, stop)
		nv := g.sliceUpdate(l.v, v, start, stop)
		if g.err != nil {
			return g.err
		}
		free(&l.k)
		free(&l.v)
		l.k, l.v = g.keep(nk), g.keep(nv)
		if err := evalArrays(l.k, l.v); err != nil {
			c.broken = fmt.Errorf("mlx: the cache is unusable after a failed import: %w", err)
			return err
		}
		c.lens.Import(layer, from, n)
		return nil
	})
}

func (c *cache) Bytes() int64 {
	var n int64
	for i := range c.layers {
		n += int64(c.layers[i].cap) * int64(c.m.layout.LayerTokenBytes(i)) * 2
	}
	return n + c.linearBytes()
}

func (c *cache) Release() {
	if c.released {
		return
	}
	c.released = true
	do(func() error {
		c.free()
		c.freeLinear()
		return nil
	})
	c.layers, c.lens, c.lin = nil, nil, nil
}

// free drops the buffers; it runs on the MLX thread.
func (c *cache) free() {
	for i := range c.layers {
		l := &c.layers[i]
		free(&l.k)
		free(&l.v)
		l.cap, l.base = 0, 0
		c.lens[i].Lo, c.lens[i].Hi = 0, 0
	}
}

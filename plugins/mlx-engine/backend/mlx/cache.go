//go:build mlx

package mlx

// #include "mlx/c/mlx.h"
import "C"

import (
	"fmt"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
)

// cache is the MLX backend's KV cache: per layer, keys and values in preallocated buffers
// [1, kv_heads, capacity, head_dim] in the model's dtype, grown cacheStep positions at a time and written with
// slice_update.
//
// Ownership: the cache owns exactly one handle to each buffer. A step that writes the cache replaces the handle
// with the slice_update result and frees the old one before evaluating, so the old buffer is referenced only by
// the update and MLX writes into it in place; any other reference left alive (a view kept from an earlier step)
// would make every step copy the whole cache. Reads (attention, export) take views that live only until the
// end of their step.
//
// Len and Truncate are plain Go; every method that touches MLX runs on the MLX thread.
type cache struct {
	m        *mlxModel
	layers   []kvLayer
	lens     backend.LayerSpans // positions held, per layer (every layer is full: the backend refuses windows)
	released bool
	// broken is set when an evaluation that wrote this cache failed; the contents are then unknown.
	broken error
}

type kvLayer struct {
	cap  int
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
	return &cache{m: m, layers: make([]kvLayer, m.cfg.NumLayers), lens: backend.NewLayerSpans(m.KVLayout())}
}

func (c *cache) Len() int { return c.lens.Len() }

func (c *cache) usable() error {
	if c.released {
		return backend.ErrReleased
	}
	return c.broken
}

func (c *cache) Truncate(n int) { c.lens.Truncate(n) }

func (c *cache) Restorable(n int) bool { return c.usable() == nil && c.lens.Restorable(n) }

// capacityFor is the buffer size that holds need positions.
func (c *cache) capacityFor(need int) int {
	return min((need+cacheStep-1)/cacheStep*cacheStep, max(c.m.maxCtx, need))
}

// grow makes layer i hold at least need positions, adding the new buffer to g's graph. It runs on the MLX
// thread.
func (c *cache) grow(g *graph, i, need int) {
	l := &c.layers[i]
	if need <= l.cap || g.err != nil {
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

// write stores kv_heads×T×head_dim keys and values ([1, kv_heads, T, head_dim], any float dtype) at positions
// [pos, pos+T) of layer i and returns views of positions [0, pos+T). The capacity must be there. It runs on
// the MLX thread; the views belong to g.
func (c *cache) write(g *graph, i, pos, t int, k, v C.mlx_array) (keys, values, mask C.mlx_array) {
	l := &c.layers[i]
	kvh, hd := c.m.cfg.NumKVHeads, c.m.cfg.HeadDim
	start, stop := []int{0, 0, pos, 0}, []int{1, kvh, pos + t, hd}
	nk := g.sliceUpdate(l.k, g.astype(k, c.m.kvC), start, stop)
	nv := g.sliceUpdate(l.v, g.astype(v, c.m.kvC), start, stop)
	if g.err != nil {
		return nk, nv, mask
	}
	// Drop the handles to the old buffers now, before anything is evaluated, so the updates may write in place.
	free(&l.k)
	free(&l.v)
	l.k, l.v = g.keep(nk), g.keep(nv)
	all := []int{0, 0, 0, 0}
	return g.slice(l.k, all, stop), g.slice(l.v, all, stop), mask
}

func (c *cache) Clone(n int) (backend.Cache, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if _, err := c.lens.CheckClone(n); err != nil {
		return nil, fmt.Errorf("mlx: %w", err)
	}
	out := c.m.newCache()
	if n == 0 {
		return out, nil
	}
	err := do(func() error {
		if err := checkMemory(out.bytesFor(n)); err != nil {
			return err
		}
		g := newGraph()
		defer g.free()
		kvh, hd := c.m.cfg.NumKVHeads, c.m.cfg.HeadDim
		var results []C.mlx_array
		for i := range c.layers {
			out.grow(g, i, n)
			src, dst := &c.layers[i], &out.layers[i]
			zero, stop := []int{0, 0, 0, 0}, []int{1, kvh, n, hd}
			k := g.sliceUpdate(dst.k, g.slice(src.k, zero, stop), zero, stop)
			v := g.sliceUpdate(dst.v, g.slice(src.v, zero, stop), zero, stop)
			if g.err != nil {
				break
			}
			free(&dst.k)
			free(&dst.v)
			dst.k, dst.v, out.lens[i].Hi = g.keep(k), g.keep(v), n
			results = append(results, dst.k, dst.v)
		}
		if g.err == nil {
			g.err = evalArrays(results...)
		}
		if g.err != nil {
			out.free()
		}
		return g.err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// bytesFor is the memory the buffers for n positions take in every layer.
func (c *cache) bytesFor(n int) int64 {
	return int64(c.capacityFor(n)) * int64(c.m.KVLayout().LayerTokenBytes(0)) * 2 * int64(len(c.layers))
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
		start, stop := []int{0, 0, from, 0}, []int{1, kvh, to, hd}
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
	tb := c.m.KVLayout().LayerTokenBytes(0)
	if n == 0 {
		return nil
	}
	return do(func() error {
		if from+n > l.cap {
			if err := checkMemory(int64(c.capacityFor(from+n)-l.cap) * int64(tb) * 2); err != nil {
				return err
			}
		}
		g := newGraph()
		defer g.free()
		c.grow(g, layer, from+n)
		kvh, hd := c.m.cfg.NumKVHeads, c.m.cfg.HeadDim
		shape := []int{1, n, kvh, hd}
		k := g.transpose(g.data(keys, shape, c.m.kvC), 0, 2, 1, 3)
		v := g.transpose(g.data(values, shape, c.m.kvC), 0, 2, 1, 3)
		start, stop := []int{0, 0, from, 0}, []int{1, kvh, from + n, hd}
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
	tb := int64(c.m.KVLayout().LayerTokenBytes(0))
	for i := range c.layers {
		n += int64(c.layers[i].cap) * tb * 2
	}
	return n
}

func (c *cache) Release() {
	if c.released {
		return
	}
	c.released = true
	do(func() error {
		c.free()
		return nil
	})
	c.layers, c.lens = nil, nil
}

// free drops the buffers; it runs on the MLX thread.
func (c *cache) free() {
	for i := range c.layers {
		l := &c.layers[i]
		free(&l.k)
		free(&l.v)
		l.cap = 0
		c.lens[i].Lo, c.lens[i].Hi = 0, 0
	}
}

package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// cache is the CPU backend's KV cache. Each layer keeps keys and values head-major, [kv_heads][capacity][head_dim],
// so attention reads one head's history as a contiguous block. Elements are stored in the layout dtype: float32
// slices for float32 models, raw 16-bit patterns for float16/bfloat16 ones (half the memory, rounded on write).
//
// A full layer stores position p at index p and grows as positions arrive. A sliding layer (window W) is a
// bounded linear buffer: index i holds position base+i, the positions it holds stay contiguous and in order,
// and when a step would run past its end the positions still needed move to the front (one copy per head,
// amortised over the steps that fill the room behind them). Its capacity never exceeds W + the prefill chunk:
// a step of T tokens at [s, s+T) needs [s-W+1, s+T) at once, and afterwards only the last W are kept.
//
// A linear layer keeps no keys and values but a recurrent state, and the cache keeps snapshots of those states
// where it may be cut (cache_state.go).
type cache struct {
	m        *cpuModel
	layers   []kvLayer
	spans    backend.LayerSpans           // positions held, per layer
	lin      []linState                   // per layer, the live state of linear layers; nil without linear layers
	snaps    backend.Snapshots[*snapshot] // shared with clones
	released bool
}

type kvLayer struct {
	cap      int // positions allocated
	base     int // position stored at index 0 (0 for full layers)
	k32, v32 []float32
	k16, v16 []uint16
}

var _ backend.Cache = (*cache)(nil)

func (m *cpuModel) NewCache() (backend.Cache, error) {
	if m.closed.Load() {
		return nil, errClosed
	}
	return m.newCache(), nil
}

func (m *cpuModel) newCache() *cache {
	c := &cache{m: m, layers: make([]kvLayer, len(m.layout.Layers)), spans: backend.NewLayerSpans(m.layout)}
	if m.layout.HasLinear() {
		c.lin = make([]linState, len(m.layout.Layers))
	}
	return c
}

func (c *cache) Len() int { return c.spans.Len() }

func (c *cache) Truncate(n int) {
	if c.lin != nil {
		c.truncateLinear(n)
		return
	}
	c.spans.Truncate(n)
}

func (c *cache) Restorable(n int) bool {
	if c.released || !c.spans.Restorable(n) {
		return false
	}
	return c.lin == nil || slices.Contains(c.cuts(), n)
}

func (c *cache) Clone(n int) (backend.Cache, error) {
	if c.released {
		return nil, backend.ErrReleased
	}
	spans, err := c.spans.CheckClone(n)
	if err == nil && c.lin != nil {
		err = backend.CheckCut(c.cuts(), n)
	}
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	out := c.m.newCache()
	for i := range c.layers {
		s := spans[i]
		out.spans[i] = s
		if c.isLinear(i) {
			continue
		}
		out.reserve(i, s.Lo, s.Hi, 0, 0)
		c.copyPositions(i, &c.layers[i], &out.layers[i], s.Lo, s.Hi)
	}
	if c.lin != nil {
		c.cloneLinear(out, n)
	}
	return out, nil
}

// copyPositions copies positions [lo, hi) of layer i from src to dst; both must have room for them.
func (c *cache) copyPositions(i int, src, dst *kvLayer, lo, hi int) {
	if hi <= lo {
		return
	}
	hd, heads := c.m.layout.Layers[i].HeadDim, c.m.layout.Layers[i].KVHeads
	n := (hi - lo) * hd
	for h := 0; h < heads; h++ {
		s, d := (h*src.cap+lo-src.base)*hd, (h*dst.cap+lo-dst.base)*hd
		if src.k32 != nil {
			copy(dst.k32[d:d+n], src.k32[s:s+n])
			copy(dst.v32[d:d+n], src.v32[s:s+n])
		} else {
			copy(dst.k16[d:d+n], src.k16[s:s+n])
			copy(dst.v16[d:d+n], src.v16[s:s+n])
		}
	}
}

// reserve makes layer i able to store positions [lo, hi) while keeping the positions [keepLo, keepHi) it holds.
// A full layer grows, doubling its capacity (bounded by the context limit). A sliding layer moves what it keeps
// to the front when [lo, hi) does not fit where it is, and grows only up to what one step needs.
func (c *cache) reserve(i, lo, hi, keepLo, keepHi int) {
	if c.isLinear(i) {
		return // a fixed-size state (alloc)
	}
	l := &c.layers[i]
	allocated := l.k32 != nil || l.k16 != nil
	window := c.spans[i].Window
	if window == 0 {
		lo = 0
	}
	keepLo, keepHi = max(keepLo, lo), min(keepHi, hi)
	if allocated && lo >= l.base && hi <= l.base+l.cap {
		return
	}
	newCap := max(hi-lo, min(2*l.cap, c.m.maxCtx), 16)
	if window > 0 {
		newCap = max(hi-lo, min(max(2*l.cap, 16), window+c.m.chunk))
	}
	if allocated && window > 0 && newCap <= l.cap {
		c.shift(i, lo, keepLo, keepHi)
		return
	}
	hd, heads := c.m.layout.Layers[i].HeadDim, c.m.layout.Layers[i].KVHeads
	nl := kvLayer{cap: newCap, base: lo}
	if c.m.kvType == dtype.Float32 {
		nl.k32, nl.v32 = make([]float32, heads*newCap*hd), make([]float32, heads*newCap*hd)
	} else {
		nl.k16, nl.v16 = make([]uint16, heads*newCap*hd), make([]uint16, heads*newCap*hd)
	}
	if allocated {
		c.copyPositions(i, l, &nl, keepLo, keepHi)
	}
	*l = nl
}

// shift moves positions [keepLo, keepHi) of sliding layer i so that index 0 holds position base.
func (c *cache) shift(i, base, keepLo, keepHi int) {
	l := &c.layers[i]
	hd, heads := c.m.layout.Layers[i].HeadDim, c.m.layout.Layers[i].KVHeads
	if keepHi > keepLo {
		n := (keepHi - keepLo) * hd
		for h := 0; h < heads; h++ {
			s, d := (h*l.cap+keepLo-l.base)*hd, (h*l.cap+keepLo-base)*hd
			// copy is a memmove: the ranges may overlap.
			if l.k32 != nil {
				copy(l.k32[d:d+n], l.k32[s:s+n])
				copy(l.v32[d:d+n], l.v32[s:s+n])
			} else {
				copy(l.k16[d:d+n], l.k16[s:s+n])
				copy(l.v16[d:d+n], l.v16[s:s+n])
			}
		}
	}
	l.base = base
}

// reserveStep makes every layer able to store positions [pos, pos+n) of a Forward step, keeping what the step's
// queries see: a sliding layer's [pos-W+1, pos) (Forward checked that it holds them).
func (c *cache) reserveStep(pos, n int) {
	for i := range c.layers {
		s := c.spans[i]
		lo := 0
		if s.Window > 0 {
			lo = max(0, pos-s.Window+1)
		}
		c.reserve(i, lo, pos+n, max(lo, s.Lo), s.Hi)
	}
}

// put stores one token's keys and values (kv_heads×head_dim each, float32) at pos in layer i, rounding to the
// layout dtype. The capacity must already be there.
func (c *cache) put(i, pos int, k, v []float32) {
	l := &c.layers[i]
	hd := c.m.layout.Layers[i].HeadDim
	for h := 0; h < c.m.layout.Layers[i].KVHeads; h++ {
		off := (h*l.cap + pos - l.base) * hd
		src := k[h*hd : (h+1)*hd]
		vs := v[h*hd : (h+1)*hd]
		switch c.m.kvType {
		case dtype.Float32:
			copy(l.k32[off:off+hd], src)
			copy(l.v32[off:off+hd], vs)
		case dtype.BFloat16:
			kd, vd := l.k16[off:off+hd], l.v16[off:off+hd]
			for j := range kd {
				kd[j] = dtype.F32ToBF16(src[j])
				vd[j] = dtype.F32ToBF16(vs[j])
			}
		case dtype.Float16:
			kd, vd := l.k16[off:off+hd], l.v16[off:off+hd]
			for j := range kd {
				kd[j] = dtype.F32ToF16(src[j])
				vd[j] = dtype.F32ToF16(vs[j])
			}
		}
	}
}

// span returns the float32 keys and values of absolute positions [lo, hi) of one KV head of layer i, in
// ascending order: the stored slices for float32 caches, otherwise widened into kbuf and vbuf (each at least
// (hi-lo)×head_dim long). The layer's buffer must hold them: positions a step has written, or a sliding layer's
// window, which stays in the buffer until the next step's reserve.
func (c *cache) span(i, kvHead, lo, hi int, kbuf, vbuf []float32) (k, v []float32) {
	l := &c.layers[i]
	hd := c.m.layout.Layers[i].HeadDim
	off := (kvHead*l.cap + lo - l.base) * hd
	n := (hi - lo) * hd
	switch c.m.kvType {
	case dtype.Float32:
		return l.k32[off : off+n], l.v32[off : off+n]
	case dtype.BFloat16:
		ks, vs := l.k16[off:off+n], l.v16[off:off+n]
		k, v = kbuf[:len(ks)], vbuf[:len(vs)]
		if widenBF16(c.m.kern, k, ks) && widenBF16(c.m.kern, v, vs) {
			return k, v
		}
		for j, b := range ks {
			k[j] = math.Float32frombits(uint32(b) << 16)
		}
		for j, b := range vs {
			v[j] = math.Float32frombits(uint32(b) << 16)
		}
	default:
		ks, vs := l.k16[off:off+n], l.v16[off:off+n]
		k, v = kbuf[:len(ks)], vbuf[:len(vs)]
		for j, b := range ks {
			k[j] = f16Table[b]
		}
		for j, b := range vs {
			v[j] = f16Table[b]
		}
	}
	return k, v
}

// f16Table widens every float16 bit pattern (256 KiB, built once) so attention over float16 caches costs a load.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = dtype.F16ToF32(uint16(i))
	}
	return &t
}()

func (c *cache) ExportKV(layer, from, to int, keys, values []byte) error {
	if c.released {
		return backend.ErrReleased
	}
	if err := c.spans.CheckExport(c.m.layout, layer, from, to, keys, values); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	l := &c.layers[layer]
	hd, heads := c.m.layout.Layers[layer].HeadDim, c.m.layout.Layers[layer].KVHeads
	for t := from; t < to; t++ {
		for h := 0; h < heads; h++ {
			src := (h*l.cap + t - l.base) * hd
			dst := ((t-from)*heads + h) * hd
			if l.k32 != nil {
				for j := 0; j < hd; j++ {
					binary.LittleEndian.PutUint32(keys[4*(dst+j):], math.Float32bits(l.k32[src+j]))
					binary.LittleEndian.PutUint32(values[4*(dst+j):], math.Float32bits(l.v32[src+j]))
				}
			} else {
				for j := 0; j < hd; j++ {
					binary.LittleEndian.PutUint16(keys[2*(dst+j):], l.k16[src+j])
					binary.LittleEndian.PutUint16(values[2*(dst+j):], l.v16[src+j])
				}
			}
		}
	}
	return nil
}

func (c *cache) ImportKV(layer, from int, keys, values []byte) error {
	if c.released {
		return backend.ErrReleased
	}
	n, err := c.spans.CheckImport(c.m.layout, c.m.maxCtx, layer, from, keys, values)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if n == 0 {
		return nil
	}
	tb := c.m.layout.LayerTokenBytes(layer)
	if w := c.spans[layer].Window; w > 0 && n > w {
		// A sliding layer keeps its last W positions: the ones before would be evicted at once.
		skip := n - w
		keys, values, from, n = keys[skip*tb:], values[skip*tb:], from+skip, w
	}
	old := c.spans[layer]
	held := c.spans.Import(layer, from, n)
	c.reserve(layer, held.Lo, held.Hi, max(old.Lo, held.Lo), min(old.Hi, held.Hi))
	l := &c.layers[layer]
	hd, heads := c.m.layout.Layers[layer].HeadDim, c.m.layout.Layers[layer].KVHeads
	for t := 0; t < n; t++ {
		for h := 0; h < heads; h++ {
			dst := (h*l.cap + from + t - l.base) * hd
			src := (t*heads + h) * hd
			if l.k32 != nil {
				for j := 0; j < hd; j++ {
					l.k32[dst+j] = math.Float32frombits(binary.LittleEndian.Uint32(keys[4*(src+j):]))
					l.v32[dst+j] = math.Float32frombits(binary.LittleEndian.Uint32(values[4*(src+j):]))
				}
			} else {
				for j := 0; j < hd; j++ {
					l.k16[dst+j] = binary.LittleEndian.Uint16(keys[2*(src+j):])
					l.v16[dst+j] = binary.LittleEndian.Uint16(values[2*(src+j):])
				}
			}
		}
	}
	return nil
}

func (c *cache) Bytes() int64 {
	var n int64
	for i := range c.layers {
		l := &c.layers[i]
		n += int64(len(l.k32)+len(l.v32))*4 + int64(len(l.k16)+len(l.v16))*2
	}
	return n + c.linearBytes()
}

func (c *cache) Release() {
	if !c.released {
		c.releaseLinear()
	}
	c.released = true
	c.layers, c.spans = nil, nil
}

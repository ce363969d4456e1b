package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// cache is the CPU backend's KV cache. Each layer keeps keys and values head-major, [kv_heads][capacity][head_dim],
// so attention reads one head's history as a contiguous block. Elements are stored in the layout dtype: float32
// slices for float32 models, raw 16-bit patterns for float16/bfloat16 ones (half the memory, rounded on write).
type cache struct {
	m        *cpuModel
	layers   []kvLayer
	lens     backend.LayerLengths // positions held, per layer
	released bool
}

type kvLayer struct {
	cap      int // positions allocated
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
	return &cache{m: m, layers: make([]kvLayer, m.cfg.NumLayers), lens: make(backend.LayerLengths, m.cfg.NumLayers)}
}

func (c *cache) Len() int { return c.lens.Len() }

func (c *cache) Truncate(n int) { c.lens.Truncate(n) }

func (c *cache) Clone(n int) (backend.Cache, error) {
	if c.released {
		return nil, backend.ErrReleased
	}
	if err := c.lens.CheckClone(n); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	out := c.m.newCache()
	for i := range c.layers {
		out.grow(i, n)
		c.copyPositions(&c.layers[i], &out.layers[i], n)
		out.lens[i] = n
	}
	return out, nil
}

func (c *cache) copyPositions(src, dst *kvLayer, n int) {
	hd, heads := c.m.cfg.HeadDim, c.m.cfg.NumKVHeads
	for h := 0; h < heads; h++ {
		s, d := h*src.cap*hd, h*dst.cap*hd
		if src.k32 != nil {
			copy(dst.k32[d:d+n*hd], src.k32[s:s+n*hd])
			copy(dst.v32[d:d+n*hd], src.v32[s:s+n*hd])
		} else {
			copy(dst.k16[d:d+n*hd], src.k16[s:s+n*hd])
			copy(dst.v16[d:d+n*hd], src.v16[s:s+n*hd])
		}
	}
}

// grow makes layer i able to hold need positions, doubling its capacity (bounded by the context limit).
func (c *cache) grow(i, need int) {
	l := &c.layers[i]
	if need <= l.cap && (l.k32 != nil || l.k16 != nil) {
		return
	}
	newCap := max(need, min(2*l.cap, c.m.maxCtx), 16)
	hd, heads := c.m.cfg.HeadDim, c.m.cfg.NumKVHeads
	nl := kvLayer{cap: newCap}
	if c.m.kvType == dtype.Float32 {
		nl.k32, nl.v32 = make([]float32, heads*newCap*hd), make([]float32, heads*newCap*hd)
	} else {
		nl.k16, nl.v16 = make([]uint16, heads*newCap*hd), make([]uint16, heads*newCap*hd)
	}
	if l.cap > 0 {
		c.copyPositions(l, &nl, c.lens[i])
	}
	*l = nl
}

// put stores one token's keys and values (kv_heads×head_dim each, float32) at pos in layer i, rounding to the
// layout dtype. The capacity must already be there.
func (c *cache) put(i, pos int, k, v []float32) {
	l := &c.layers[i]
	hd := c.m.cfg.HeadDim
	for h := 0; h < c.m.cfg.NumKVHeads; h++ {
		off := (h*l.cap + pos) * hd
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

// span returns the float32 keys and values of positions [lo, hi) of KV head h of layer i, in ascending position
// order: the stored slices for float32 caches, otherwise widened into kbuf and vbuf (each at least
// (hi-lo)×head_dim long). Attention reads the cache only through span. The slices are valid until the next
// write to the cache (float32) or use of kbuf and vbuf.
func (c *cache) span(i, h, lo, hi int, kbuf, vbuf []float32) (k, v []float32) {
	l := &c.layers[i]
	hd := c.m.cfg.HeadDim
	off, n := (h*l.cap+lo)*hd, hi-lo
	switch c.m.kvType {
	case dtype.Float32:
		return l.k32[off : off+n*hd], l.v32[off : off+n*hd]
	case dtype.BFloat16:
		ks, vs := l.k16[off:off+n*hd], l.v16[off:off+n*hd]
		k, v = kbuf[:len(ks)], vbuf[:len(vs)]
		for j, b := range ks {
			k[j] = math.Float32frombits(uint32(b) << 16)
		}
		for j, b := range vs {
			v[j] = math.Float32frombits(uint32(b) << 16)
		}
	default:
		ks, vs := l.k16[off:off+n*hd], l.v16[off:off+n*hd]
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
	if err := c.lens.CheckExport(c.m.KVLayout(), layer, from, to, keys, values); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	l := &c.layers[layer]
	hd, heads := c.m.cfg.HeadDim, c.m.cfg.NumKVHeads
	for t := from; t < to; t++ {
		for h := 0; h < heads; h++ {
			src := (h*l.cap + t) * hd
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
	n, err := c.lens.CheckImport(c.m.KVLayout(), c.m.maxCtx, layer, from, keys, values)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	c.grow(layer, from+n)
	l := &c.layers[layer]
	hd, heads := c.m.cfg.HeadDim, c.m.cfg.NumKVHeads
	for t := 0; t < n; t++ {
		for h := 0; h < heads; h++ {
			dst := (h*l.cap + from + t) * hd
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
	c.lens[layer] = max(c.lens[layer], from+n)
	return nil
}

func (c *cache) Bytes() int64 {
	var n int64
	for i := range c.layers {
		l := &c.layers[i]
		n += int64(len(l.k32)+len(l.v32))*4 + int64(len(l.k16)+len(l.v16))*2
	}
	return n
}

func (c *cache) Release() {
	c.released = true
	c.layers, c.lens = nil, nil
}

package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// The recurrent part of the cache: what a linear (Gated DeltaNet) layer keeps per sequence, and the snapshots
// that let a cache with such layers be cut at earlier positions (docs/hybrid-design.md §3).

// linState is one linear layer's state for one sequence: the conv window, the pre-conv rows of the K-1 positions
// before the next one, oldest first, [K-1][conv_dim] in the layout dtype (conv32 for float32 layouts, raw 16-bit
// patterns in conv16 otherwise: rounded on write, as keys and values are); and the delta-rule state
// [Nv][Dv][Dk] in float32. Nil slices are the zero state: a cache allocates a layer's state when it is first
// written, and a snapshot of a zero state holds nothing.
type linState struct {
	conv32 []float32
	conv16 []uint16
	state  []float32
}

func (s *linState) bytes() int64 {
	return int64(len(s.conv32))*4 + int64(len(s.conv16))*2 + int64(len(s.state))*4
}

// copyFrom makes s hold src's values, reusing s's buffers when it has them.
func (s *linState) copyFrom(src *linState) {
	s.conv32 = copyOrClear(s.conv32, src.conv32)
	s.conv16 = copyOrClear(s.conv16, src.conv16)
	s.state = copyOrClear(s.state, src.state)
}

// copyOrClear returns dst holding src (nil src: zeros, or nil when dst is nil).
func copyOrClear[E float32 | uint16](dst, src []E) []E {
	switch {
	case src == nil:
		clear(dst)
	case dst == nil:
		dst = slices.Clone(src)
	default:
		copy(dst, src)
	}
	return dst
}

// snapshot is the state of every linear layer of a cache at a position, the payload of the cache's
// backend.Snapshots. It is immutable once made and shared by reference between a cache and its clones; every
// holder counts its bytes in full (Cache.Bytes). refs counts the holders (atomically: the caches sharing it may
// belong to different goroutines); the last to let go drops the buffers, so a use after that fails loudly
// instead of reading stale state.
type snapshot struct {
	layers []linState // indexed by layer; zero for attention layers
	bytes  int64
	refs   atomic.Int32
}

func (s *snapshot) retain() *snapshot {
	s.refs.Add(1)
	return s
}

func (s *snapshot) release() {
	if s.refs.Add(-1) == 0 {
		s.layers = nil
	}
}

// linearDims are the sizes of linear layer ly's state: the conv window's rows (K-1) and channels (conv_dim), and
// the delta-rule state's length (Nv·Dv·Dk). The layout has passed backend.CheckLayout.
func linearDims(ly *backend.LayerKV) (rows, convDim, stateLen int) {
	return ly.State[0].Shape[1], ly.State[0].Shape[2], ly.State[1].Elems()
}

// isLinear reports whether layer i of the cache's layout is a linear layer.
func (c *cache) isLinear(i int) bool { return c.m.layout.Layers[i].Kind == backend.KVLinear }

// alloc makes linear layer i's live state allocated (zeros when it was the zero state) and returns it.
func (c *cache) alloc(i int) *linState {
	s := &c.lin[i]
	if s.state != nil {
		return s
	}
	rows, convDim, stateLen := linearDims(&c.m.layout.Layers[i])
	if c.m.kvType == dtype.Float32 {
		s.conv32 = make([]float32, rows*convDim)
	} else {
		s.conv16 = make([]uint16, rows*convDim)
	}
	s.state = make([]float32, stateLen)
	return s
}

// convWindow returns linear layer i's conv window as float32, [K-1][conv_dim], oldest position first: the stored
// slice for float32 caches, otherwise widened into buf (at least (K-1)·conv_dim long). The values carry the
// cache dtype's rounding, so a conv output does not depend on where a Forward call started. Read-only.
func (c *cache) convWindow(i int, buf []float32) []float32 {
	s := c.alloc(i)
	switch c.m.kvType {
	case dtype.Float32:
		return s.conv32
	case dtype.BFloat16:
		w := buf[:len(s.conv16)]
		for j, b := range s.conv16 {
			w[j] = math.Float32frombits(uint32(b) << 16)
		}
		return w
	default:
		w := buf[:len(s.conv16)]
		for j, b := range s.conv16 {
			w[j] = f16Table[b]
		}
		return w
	}
}

// pushConv appends the pre-conv rows of a step's positions to linear layer i's conv window (rows: [n][conv_dim],
// float32, in position order), rounding them to the layout dtype; the window keeps the last K-1 rows.
func (c *cache) pushConv(i int, rows []float32) {
	s := c.alloc(i)
	keep, convDim, _ := linearDims(&c.m.layout.Layers[i])
	n := len(rows) / convDim
	if n >= keep {
		rows, n = rows[(n-keep)*convDim:], keep
	}
	shift := (keep - n) * convDim // the old rows that stay, moved to the front
	switch c.m.kvType {
	case dtype.Float32:
		copy(s.conv32, s.conv32[n*convDim:])
		copy(s.conv32[shift:], rows)
	case dtype.BFloat16:
		copy(s.conv16, s.conv16[n*convDim:])
		for j, f := range rows {
			s.conv16[shift+j] = dtype.F32ToBF16(f)
		}
	default:
		copy(s.conv16, s.conv16[n*convDim:])
		for j, f := range rows {
			s.conv16[shift+j] = dtype.F32ToF16(f)
		}
	}
}

// recurrent returns linear layer i's delta-rule state, [Nv][Dv][Dk] float32, which the forward pass updates in
// place, token by token.
func (c *cache) recurrent(i int) []float32 { return c.alloc(i).state }

// livePos is the position every linear layer's live state describes; ok is false when an unfinished import
// left them at different positions.
func (c *cache) livePos() (pos int, ok bool) { return backend.LivePos(c.m.layout, c.spans) }

// keep records a copy of the live state of every linear layer as a snapshot at pos, unless there is one.
func (c *cache) keep(pos int) { c.snaps.Keep(pos, c.take) }

// take returns a snapshot holding a copy of the live state of every linear layer.
func (c *cache) take() *snapshot {
	s := &snapshot{layers: make([]linState, len(c.lin))}
	for i := range c.lin {
		s.layers[i].copyFrom(&c.lin[i])
		s.bytes += s.layers[i].bytes()
	}
	s.refs.Store(1)
	return s
}

// keepSnapshot is what Forward does for a sequence with Seq.Snapshot after its tokens: it keeps the live state
// of the linear layers as a cut at Len(). A cache without linear layers has nothing to keep.
func (c *cache) keepSnapshot() {
	if c.lin == nil {
		return
	}
	c.snaps.KeepLive(c.m.layout, c.spans, c.take)
}

// cuts lists the positions where the linear layers' state is known (backend.Snapshots.Known).
func (c *cache) cuts() []int { return c.snaps.Known(c.m.layout, c.spans) }

func (c *cache) Cuts() []int {
	if c.lin == nil || c.released {
		return nil
	}
	return c.snaps.Cuts(c.m.layout, c.spans)
}

// stateAt returns the state of every linear layer at cut pos: a snapshot's, the live one, or nil for the zero
// state at 0.
func (c *cache) stateAt(pos int) []linState {
	if s, ok := c.snaps.At(pos); ok {
		return s.layers
	}
	if p, ok := c.livePos(); ok && p == pos {
		return c.lin
	}
	return nil
}

// truncateLinear is Truncate for a cache with linear layers: a linear layer beyond n goes back to the newest cut
// <= n, and so does every other layer, dropping the snapshots above.
func (c *cache) truncateLinear(n int) {
	if !backend.LinearBeyond(c.m.layout, c.spans, n) {
		c.spans.Truncate(n)
		return
	}
	cut := backend.NewestCut(c.cuts(), n) // >= 0: 0 is always a cut
	src := c.stateAt(cut)
	for i := range c.lin {
		if !c.isLinear(i) {
			continue
		}
		if src == nil {
			c.lin[i].copyFrom(&linState{})
		} else {
			c.lin[i].copyFrom(&src[i])
		}
	}
	c.snaps.DropAbove(cut, (*snapshot).release)
	c.spans.Truncate(cut)
}

// cloneLinear gives out, a clone of the first n positions (a cut), the snapshots at positions <= n by reference
// and a copy of the state at n as its live state.
func (c *cache) cloneLinear(out *cache, n int) {
	out.snaps = c.snaps.Upto(n, (*snapshot).retain)
	if src := c.stateAt(n); src != nil {
		for i := range out.lin {
			out.lin[i].copyFrom(&src[i])
		}
	}
}

func (c *cache) ExportState(layer int, dst [][]byte) error {
	if c.released {
		return backend.ErrReleased
	}
	if err := c.spans.CheckExportState(c.m.layout, layer, dst); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	s := &c.lin[layer]
	switch {
	case s.state == nil:
		clear(dst[0])
		clear(dst[1])
		return nil
	case s.conv32 != nil:
		for j, f := range s.conv32 {
			binary.LittleEndian.PutUint32(dst[0][4*j:], math.Float32bits(f))
		}
	default:
		for j, b := range s.conv16 {
			binary.LittleEndian.PutUint16(dst[0][2*j:], b)
		}
	}
	for j, f := range s.state {
		binary.LittleEndian.PutUint32(dst[1][4*j:], math.Float32bits(f))
	}
	return nil
}

func (c *cache) ImportState(layer, n int, src [][]byte) error {
	if c.released {
		return backend.ErrReleased
	}
	if err := c.spans.CheckImportState(c.m.layout, c.m.maxCtx, layer, n, src); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if pos, ok := c.livePos(); ok && pos > 0 {
		c.keep(pos) // the state the import replaces stays a cut: a failed import truncates back to it
	}
	s := c.alloc(layer)
	if s.conv32 != nil {
		for j := range s.conv32 {
			s.conv32[j] = math.Float32frombits(binary.LittleEndian.Uint32(src[0][4*j:]))
		}
	} else {
		for j := range s.conv16 {
			s.conv16[j] = binary.LittleEndian.Uint16(src[0][2*j:])
		}
	}
	for j := range s.state {
		s.state[j] = math.Float32frombits(binary.LittleEndian.Uint32(src[1][4*j:]))
	}
	c.spans.Import(layer, 0, n)
	if pos, ok := c.livePos(); ok && pos == n {
		c.keep(n) // every linear layer imported: the imported state is a cut
	}
	return nil
}

// linearBytes is what the linear layers' live states and the snapshots the cache holds take.
func (c *cache) linearBytes() int64 {
	var n int64
	for i := range c.lin {
		n += c.lin[i].bytes()
	}
	for _, s := range c.snaps.All() {
		n += s.bytes
	}
	return n
}

// releaseLinear lets go of the live states and the snapshots.
func (c *cache) releaseLinear() {
	c.snaps.Clear((*snapshot).release)
	c.lin = nil
}

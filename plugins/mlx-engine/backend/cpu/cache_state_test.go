package cpu

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
)

// The CPU forward pass does not compute linear layers yet, so these tests build caches of a hybrid layout
// directly and feed them with a stand-in for it that uses the same accessors (convWindow, pushConv, recurrent,
// put, spans.Advance, keepSnapshot).

// hybridLayout: two full attention layers and two linear layers (K=4, conv_dim 6, Nv=2, Dv=3, Dk=2).
func hybridLayout(dt dtype.DType) backend.KVLayout {
	lin := backend.LinearLayer(dt, 4, 6, 2, 3, 2)
	full := backend.LayerKV{Kind: backend.KVFull, KVHeads: 1, HeadDim: 4}
	return backend.KVLayout{DType: dt, Layers: []backend.LayerKV{full, lin, full, lin}}
}

// hybridCache returns an empty cache of layout l for a model that holds at most 64 positions.
func hybridCache(t *testing.T, l backend.KVLayout) *cache {
	t.Helper()
	if err := backend.CheckLayout(l); err != nil {
		t.Fatal(err)
	}
	m := &cpuModel{layout: l, kvType: l.DType, maxCtx: 64, chunk: 8}
	c := m.newCache()
	t.Cleanup(c.Release)
	return c
}

// feed stands in for Forward over n positions: every attention layer gets keys and values, and every linear
// layer a conv row and a state update that depend on the position and on what the layer held before (the
// window read back, rounded, and the state), so a layer's state carries its whole history.
func feed(c *cache, n int, snapshot bool) {
	start := c.Len()
	c.reserveStep(start, n)
	for i := range c.m.layout.Layers {
		ly := &c.m.layout.Layers[i]
		for p := start; p < start+n; p++ {
			if ly.Kind != backend.KVLinear {
				k, v := make([]float32, ly.KVHeads*ly.HeadDim), make([]float32, ly.KVHeads*ly.HeadDim)
				for j := range k {
					k[j], v[j] = float32(p*13+j+i)/9, -float32(p*5+j)/11
				}
				c.put(i, p, k, v)
				continue
			}
			rows, convDim, _ := linearDims(ly)
			w := c.convWindow(i, make([]float32, rows*convDim))
			row := make([]float32, convDim)
			for j := range row {
				row[j] = float32(p*31+j+i)/7 + 0.25*w[j]
			}
			st := c.recurrent(i)
			for j := range st {
				st[j] = 0.5*st[j] + row[j%convDim]
			}
			c.pushConv(i, row)
		}
		c.spans.Advance(i, start+n)
	}
	if snapshot {
		c.keepSnapshot()
	}
}

// dump is everything a cache holds, as the wire carries it: every attention layer's keys and values and every
// linear layer's state arrays.
func dump(t *testing.T, c *cache) []byte {
	t.Helper()
	var out []byte
	l := c.m.layout
	for i, ly := range l.Layers {
		if ly.Kind == backend.KVLinear {
			bufs := [][]byte{make([]byte, ly.State[0].Bytes()), make([]byte, ly.State[1].Bytes())}
			if err := c.ExportState(i, bufs); err != nil {
				t.Fatal(err)
			}
			out = append(append(out, bufs[0]...), bufs[1]...)
			continue
		}
		n := c.Len()
		k, v := make([]byte, n*l.LayerTokenBytes(i)), make([]byte, n*l.LayerTokenBytes(i))
		if err := c.ExportKV(i, 0, n, k, v); err != nil {
			t.Fatal(err)
		}
		out = append(append(out, k...), v...)
	}
	return out
}

// fedTo is a fresh cache of layout l fed n positions in one step: what any cache cut at n must hold.
func fedTo(t *testing.T, l backend.KVLayout, n int) []byte {
	t.Helper()
	c := hybridCache(t, l)
	feed(c, n, false)
	return dump(t, c)
}

var dtypes = []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float16}

// TestPushConv: the conv window keeps the last K-1 rows pushed, rounded to the layout dtype, however the rows
// are split across pushes.
func TestPushConv(t *testing.T) {
	for _, d := range dtypes {
		t.Run(string(d), func(t *testing.T) {
			l := hybridLayout(d)
			rows := make([]float32, 7*6)
			for j := range rows {
				rows[j] = float32(j)/3 + 0.001
			}
			want := make([]float32, 3*6)
			for j := range want {
				want[j] = d.Round(rows[4*6+j])
			}
			for _, split := range [][]int{{7}, {1, 1, 1, 1, 1, 1, 1}, {2, 5}, {5, 2}, {3, 3, 1}} {
				c := hybridCache(t, l)
				at := 0
				for _, n := range split {
					c.pushConv(1, rows[at*6:(at+n)*6])
					at += n
				}
				if got := c.convWindow(1, make([]float32, 18)); !slices.Equal(got, want) {
					t.Errorf("split %v: window %v, want %v", split, got, want)
				}
			}
			c := hybridCache(t, l)
			c.pushConv(1, rows[:6])
			if got := c.convWindow(1, make([]float32, 18)); !slices.Equal(got[:12], make([]float32, 12)) || got[12] != d.Round(rows[0]) {
				t.Errorf("one row: window %v, want two zero rows before it", got)
			}
		})
	}
}

// TestStateRoundTrip: a cache whose attention layers and linear states are exported and imported into a fresh
// one holds the same bytes and continues the same; the conv window goes out in the layout dtype, the state in
// float32; a complete import is a cut.
func TestStateRoundTrip(t *testing.T) {
	for _, d := range dtypes {
		t.Run(string(d), func(t *testing.T) {
			l := hybridLayout(d)
			src := hybridCache(t, l)
			feed(src, 7, false)
			dst := hybridCache(t, l)
			for i, ly := range l.Layers { // states first, as exo sends them, then KV
				if ly.Kind != backend.KVLinear {
					continue
				}
				bufs := [][]byte{make([]byte, ly.State[0].Bytes()), make([]byte, ly.State[1].Bytes())}
				if err := src.ExportState(i, bufs); err != nil {
					t.Fatal(err)
				}
				want := make([]byte, ly.State[0].Bytes())
				dtype.Encode(d, want, src.convWindow(i, make([]float32, 18)))
				if !bytes.Equal(bufs[0], want) {
					t.Errorf("layer %d: conv window bytes are not the layout dtype's encoding of the window", i)
				}
				want = make([]byte, ly.State[1].Bytes())
				dtype.Encode(dtype.Float32, want, src.recurrent(i))
				if !bytes.Equal(bufs[1], want) {
					t.Errorf("layer %d: state bytes are not the float32 state", i)
				}
				if err := dst.ImportState(i, 7, bufs); err != nil {
					t.Fatal(err)
				}
			}
			if dst.Len() != 0 || !slices.Equal(dst.Cuts(), []int{0}) {
				t.Errorf("states without KV: Len %d, Cuts %v", dst.Len(), dst.Cuts())
			}
			for i, ly := range l.Layers {
				if ly.Kind == backend.KVLinear {
					continue
				}
				k, v := make([]byte, 7*l.LayerTokenBytes(i)), make([]byte, 7*l.LayerTokenBytes(i))
				if err := src.ExportKV(i, 0, 7, k, v); err != nil {
					t.Fatal(err)
				}
				if err := dst.ImportKV(i, 0, k, v); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(dump(t, dst), dump(t, src)) {
				t.Fatal("imported cache differs from the exported one")
			}
			if !slices.Equal(dst.Cuts(), []int{0, 7}) || dst.snapAt(7) == nil {
				t.Errorf("after a complete import: Cuts %v, snapshot at 7: %v", dst.Cuts(), dst.snapAt(7) != nil)
			}
			feed(src, 3, false)
			feed(dst, 3, false)
			if !bytes.Equal(dump(t, dst), dump(t, src)) {
				t.Error("imported cache continued differently")
			}
			if !slices.Equal(dst.Cuts(), []int{0, 7, 10}) {
				t.Errorf("the imported state is no cut after feeding: Cuts %v", dst.Cuts())
			}
			if c, err := dst.Clone(7); err != nil || !bytes.Equal(dump(t, c.(*cache)), fedTo(t, l, 7)) {
				t.Errorf("clone at the imported cut: %v", err)
			}
		})
	}
}

// TestCutsCloneTruncate: a hybrid cache cuts at 0, its snapshots and its end; Clone elsewhere fails with
// ErrNoSnapshot; Truncate goes back to the newest cut at or below n and drops the snapshots above; every cut
// holds what a fresh cache fed as far holds.
func TestCutsCloneTruncate(t *testing.T) {
	for _, d := range dtypes {
		t.Run(string(d), func(t *testing.T) {
			l := hybridLayout(d)
			c := hybridCache(t, l)
			if !slices.Equal(c.Cuts(), []int{0}) {
				t.Errorf("empty cache: Cuts %v", c.Cuts())
			}
			feed(c, 4, true)
			feed(c, 6, false)
			feed(c, 3, true)
			feed(c, 2, false)
			if !slices.Equal(c.Cuts(), []int{0, 4, 13, 15}) {
				t.Fatalf("Cuts = %v, want [0 4 13 15]", c.Cuts())
			}
			for n := 0; n <= 15; n++ {
				cut := slices.Contains(c.Cuts(), n)
				if c.Restorable(n) != cut {
					t.Errorf("Restorable(%d) = %v", n, !cut)
				}
				clone, err := c.Clone(n)
				if !cut {
					if !errors.Is(err, backend.ErrNoSnapshot) {
						t.Errorf("Clone(%d): %v, want ErrNoSnapshot", n, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Clone(%d): %v", n, err)
				}
				cc := clone.(*cache)
				if cc.Len() != n || !bytes.Equal(dump(t, cc), fedTo(t, l, n)) {
					t.Errorf("Clone(%d) holds %d positions, or not what %d fed positions leave", n, cc.Len(), n)
				}
				wantCuts := slices.DeleteFunc(slices.Clone(c.Cuts()), func(k int) bool { return k > n })
				if !slices.Equal(cc.Cuts(), wantCuts) {
					t.Errorf("Clone(%d): Cuts %v, want %v", n, cc.Cuts(), wantCuts)
				}
				clone.Release()
			}
			if _, err := c.Clone(16); err == nil || errors.Is(err, backend.ErrNoSnapshot) || !strings.Contains(err.Error(), "clone of 16 positions from a cache holding 15") {
				t.Errorf("Clone past the end: %v", err)
			}
			if !bytes.Equal(dump(t, c), fedTo(t, l, 15)) {
				t.Fatal("cloning changed the cache")
			}

			c.Truncate(15) // its own length: nothing changes
			c.Truncate(100)
			if c.Len() != 15 || !slices.Equal(c.Cuts(), []int{0, 4, 13, 15}) {
				t.Errorf("Truncate at or past the end: Len %d, Cuts %v", c.Len(), c.Cuts())
			}
			for _, tc := range []struct{ n, len int }{{14, 13}, {12, 4}, {4, 4}, {3, 0}} {
				c.Truncate(tc.n)
				if c.Len() != tc.len || !bytes.Equal(dump(t, c), fedTo(t, l, tc.len)) {
					t.Fatalf("Truncate(%d): Len %d, want %d with what %[3]d fed positions leave", tc.n, c.Len(), tc.len)
				}
				if cuts := c.Cuts(); cuts[len(cuts)-1] != tc.len || slices.ContainsFunc(snapPositions(c), func(p int) bool { return p > tc.len }) {
					t.Errorf("Truncate(%d): Cuts %v, a snapshot above the cut kept", tc.n, cuts)
				}
			}
			feed(c, 9, false)
			if !bytes.Equal(dump(t, c), fedTo(t, l, 9)) {
				t.Error("a cache truncated to 0 continues unlike a fresh one")
			}
		})
	}
}

// TestSnapshotSharing: a clone holds its source's snapshots by reference; both count them in Bytes; each Release
// drops one reference, and the snapshot lives until the last.
func TestSnapshotSharing(t *testing.T) {
	l := hybridLayout(dtype.BFloat16)
	c := hybridCache(t, l)
	kvBytes := func(c *cache) int64 {
		var n int64
		for i := range c.layers {
			n += int64(len(c.layers[i].k16)+len(c.layers[i].v16)) * 2
		}
		return n
	}
	state := int64(l.StateBytes())
	if c.Bytes() != 0 {
		t.Errorf("an empty cache holds %d bytes", c.Bytes())
	}
	feed(c, 4, true)
	feed(c, 4, true)
	feed(c, 2, false)
	if c.snaps.Len() != 2 || c.Bytes() != kvBytes(c)+3*state {
		t.Fatalf("%d snapshots, Bytes %d, want KV %d + 3 states of %d", c.snaps.Len(), c.Bytes(), kvBytes(c), state)
	}
	s4, s8 := snapList(c)[0], snapList(c)[1]
	clone, err := c.Clone(8)
	if err != nil {
		t.Fatal(err)
	}
	cc := clone.(*cache)
	if cc.snaps.Len() != 2 || snapList(cc)[0] != s4 || snapList(cc)[1] != s8 || s4.refs.Load() != 2 || s8.refs.Load() != 2 {
		t.Fatalf("the clone holds copies, not the source's snapshots (refs %d, %d)", s4.refs.Load(), s8.refs.Load())
	}
	if cc.Bytes() != kvBytes(cc)+3*state {
		t.Errorf("clone Bytes %d, want KV %d + its state + 2 shared snapshots", cc.Bytes(), kvBytes(cc))
	}
	feed(cc, 2, true) // the clone's own snapshot at 10, not the source's
	if cc.snapAt(10) == nil || c.snapAt(10) != nil || c.snaps.Len() != 2 {
		t.Error("a snapshot of the clone showed up in the source")
	}
	c.Truncate(5) // drops the source's reference to s8
	if c.Len() != 4 || s8.refs.Load() != 1 || s8.layers == nil {
		t.Fatalf("Truncate(5): Len %d, snapshot at 8 held %d times", c.Len(), s8.refs.Load())
	}
	c.Release()
	if s4.refs.Load() != 1 || s4.layers == nil {
		t.Fatal("releasing the source freed a snapshot its clone holds")
	}
	cc.Truncate(9)
	if cc.Len() != 8 || !bytes.Equal(dump(t, cc), fedTo(t, l, 8)) {
		t.Error("the clone lost its shared snapshot when the source was released")
	}
	clone.Release()
	clone.Release()
	if s4.refs.Load() != 0 || s4.layers != nil || s8.refs.Load() != 0 || s8.layers != nil {
		t.Errorf("after the last Release: refs %d, %d", s4.refs.Load(), s8.refs.Load())
	}
	if clone.Bytes() != 0 || clone.Cuts() != nil {
		t.Errorf("a released cache holds %d bytes, cuts %v", clone.Bytes(), clone.Cuts())
	}
	if err := clone.ExportState(1, nil); !errors.Is(err, backend.ErrReleased) {
		t.Errorf("ExportState on a released cache: %v", err)
	}
	if err := clone.ImportState(1, 0, nil); !errors.Is(err, backend.ErrReleased) {
		t.Errorf("ImportState on a released cache: %v", err)
	}
}

// TestFailedImportRestores is the runner's failed fetch: a cache cloned at n (a snapshot, or its source's end)
// that receives part of an import is truncated back to n, and holds exactly what it held.
func TestFailedImportRestores(t *testing.T) {
	l := hybridLayout(dtype.BFloat16)
	src := hybridCache(t, l)
	feed(src, 5, true)
	feed(src, 4, false)
	remote := hybridCache(t, l)
	feed(remote, 20, false)
	ly := l.Layers[1]
	state := [][]byte{make([]byte, ly.State[0].Bytes()), make([]byte, ly.State[1].Bytes())}
	if err := remote.ExportState(1, state); err != nil {
		t.Fatal(err)
	}
	tb := l.LayerTokenBytes(0)
	k, v := make([]byte, 11*tb), make([]byte, 11*tb)
	if err := remote.ExportKV(0, 9, 20, k, v); err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{0, 5, 9} { // a fresh cache, a snapshot, the source's live end
		c, err := src.Clone(at)
		if err != nil {
			t.Fatal(err)
		}
		cc := c.(*cache)
		before := dump(t, cc)
		if err := cc.ImportState(1, 20, state); err != nil { // one linear layer of two
			t.Fatal(err)
		}
		if at == 9 {
			if err := cc.ImportKV(0, 9, k, v); err != nil {
				t.Fatal(err)
			}
		}
		if cc.Len() != at {
			t.Errorf("clone at %d: Len %d during the import", at, cc.Len())
		}
		cc.Truncate(at)
		if cc.Len() != at || !bytes.Equal(dump(t, cc), before) {
			t.Errorf("clone at %d: Truncate after a failed import gives %d positions, or other state", at, cc.Len())
		}
		if err := cc.ImportState(3, 20, state); err != nil {
			t.Fatal(err)
		}
		if err := cc.ImportState(1, 20, state); err != nil { // a complete import this time
			t.Fatal(err)
		}
		if cc.snapAt(20) == nil {
			t.Errorf("clone at %d: a complete import is not kept as a snapshot", at)
		}
		cc.Truncate(at)
		if cc.Len() != at || !bytes.Equal(dump(t, cc), before) || cc.snapAt(20) != nil {
			t.Errorf("clone at %d: Truncate after a complete import gives %d positions, or other state", at, cc.Len())
		}
		c.Release()
	}
}

// TestStateErrors: the cache refuses state calls on attention layers, KV calls on linear layers and malformed
// buffers with the contract's errors, and a refused call changes nothing.
func TestStateErrors(t *testing.T) {
	l := hybridLayout(dtype.BFloat16)
	c := hybridCache(t, l)
	feed(c, 3, false)
	before := dump(t, c)
	ly := l.Layers[1]
	good := func() [][]byte { return [][]byte{make([]byte, ly.State[0].Bytes()), make([]byte, ly.State[1].Bytes())} }
	tb := l.LayerTokenBytes(0)
	for _, tc := range []struct {
		name string
		err  error
		want string
		is   error
	}{
		{"ExportKV of a linear layer", c.ExportKV(1, 0, 1, make([]byte, tb), make([]byte, tb)), "cpu: layer 1 is a linear layer", backend.ErrLayerKind},
		{"ImportKV into a linear layer", c.ImportKV(3, 3, nil, nil), "cpu: layer 3 is a linear layer", backend.ErrLayerKind},
		{"ExportState of an attention layer", c.ExportState(0, good()), "cpu: layer 0 is a full attention layer", backend.ErrLayerKind},
		{"ImportState into an attention layer", c.ImportState(2, 3, good()), "cpu: layer 2 is a full attention layer", backend.ErrLayerKind},
		{"short state", c.ImportState(1, 3, [][]byte{make([]byte, ly.State[0].Bytes()), make([]byte, 5)}), "needs 48 bytes, got 5", nil},
		{"going back", c.ImportState(1, 2, good()), "truncate first", nil},
		{"past the context", c.ImportState(1, 65, good()), "context limit 64", nil},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) || (tc.is != nil && !errors.Is(tc.err, tc.is)) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, tc.err, tc.want)
		}
	}
	if !bytes.Equal(dump(t, c), before) || c.snaps.Len() != 0 {
		t.Error("a refused call changed the cache")
	}
}

// snapAt is c's snapshot at pos, or nil.
func (c *cache) snapAt(pos int) *snapshot {
	s, _ := c.snaps.At(pos)
	return s
}

// snapList is c's snapshots by ascending position.
func snapList(c *cache) []*snapshot {
	var out []*snapshot
	for _, s := range c.snaps.All() {
		out = append(out, s)
	}
	return out
}

// snapPositions is the positions of c's snapshots, ascending.
func snapPositions(c *cache) []int {
	var out []int
	for p := range c.snaps.All() {
		out = append(out, p)
	}
	return out
}

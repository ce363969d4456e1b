package runner_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"sync/atomic"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend"
	"github.com/duet-ai/duet/sdk/kvwire"
)

// stateModel is a stand-in for a hybrid model (Gated DeltaNet layers between attention layers) that keeps the
// backend contract of linear layers exactly, so the runner's snapshot policy and its KV wire for states can be
// tested without a real forward pass: layers 0 and 2 are linear (a conv window of the last K-1 rows in bf16 and a
// float32 state that folds in every token), layers 1 and 3 full attention whose K/V depend on the state before
// them, and the logits (one-hot) hash everything the cache holds. A position's K/V thus depend on the whole
// prefix, and decode tokens on every byte a transfer imports: a wrong state, position or conversion changes them.
// Its values are small integers, exact in bf16 (conv), float16 and float32 (state), so the tests can send them in
// another dtype and expect the same bytes back.
type stateModel struct {
	layout backend.KVLayout
	// positions counts the positions fed, for tests that check what a prefix-cache hit saved.
	positions atomic.Int64
}

const (
	stateConvK   = 3
	stateVocab   = 64
	stateModelFP = "state-model"
)

func newStateModel() *stateModel {
	lin := backend.LinearLayer(backend.BFloat16, stateConvK, 4, 2, 2, 2)
	full := backend.LayerKV{Kind: backend.KVFull, KVHeads: 1, HeadDim: 2}
	return &stateModel{layout: backend.KVLayout{DType: backend.BFloat16, Layers: []backend.LayerKV{lin, full, lin, full}}}
}

func (m *stateModel) KVLayout() backend.KVLayout { return m.layout }
func (m *stateModel) VocabSize() int             { return stateVocab }
func (m *stateModel) MaxContext() int            { return 4096 }
func (m *stateModel) Close() error               { return nil }

func (m *stateModel) NewCache() (backend.Cache, error) {
	c := &stateCache{m: m, kv: make([][2][]byte, len(m.layout.Layers)), count: make([]int, len(m.layout.Layers)),
		state: make([][][]byte, len(m.layout.Layers)), snaps: map[int][][][]byte{}}
	for l, ly := range m.layout.Layers {
		for _, a := range ly.State {
			c.state[l] = append(c.state[l], make([]byte, a.Bytes()))
		}
	}
	c.snaps[0] = c.copyState()
	return c, nil
}

func (m *stateModel) Forward(batch []backend.Seq) error {
	for i, s := range batch {
		c, ok := s.Cache.(*stateCache)
		if !ok || c.m != m {
			return fmt.Errorf("sequence %d: %w", i, backend.ErrForeignCache)
		}
		if c.kv == nil {
			return backend.ErrReleased
		}
		if _, ok := c.uniform(); !ok {
			return fmt.Errorf("sequence %d: layers hold different lengths", i)
		}
	}
	for _, s := range batch {
		c := s.Cache.(*stateCache)
		for _, t := range s.Tokens {
			c.feed(t)
		}
		m.positions.Add(int64(len(s.Tokens)))
		if s.Snapshot {
			c.snaps[c.Len()] = c.copyState()
		}
		if s.Logits != nil {
			h := fnv.New64a()
			for l := range c.kv {
				h.Write(c.kv[l][0])
				h.Write(c.kv[l][1])
				for _, a := range c.state[l] {
					h.Write(a)
				}
			}
			clear(s.Logits)
			s.Logits[h.Sum64()%stateVocab] = 1
		}
	}
	return nil
}

func bf16(v int) []byte {
	return binary.LittleEndian.AppendUint16(nil, uint16(math.Float32bits(float32(v))>>16))
}

func f32At(b []byte, i int) int {
	return int(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
}

// feed advances every layer by one token at position Len().
func (c *stateCache) feed(t int32) {
	p := c.Len()
	carry := 0 // the last linear layer's state, which the next attention layer reads
	for l, ly := range c.m.layout.Layers {
		if ly.Kind == backend.KVLinear {
			conv, st := c.state[l][0], c.state[l][1]
			row := len(conv) / (stateConvK - 1)
			copy(conv, conv[row:])
			sum := 0
			for j := 0; j < row/2; j++ {
				v := (int(t)*7 + l*3 + j) % 251
				copy(conv[len(conv)-row+2*j:], bf16(v))
				sum += v
			}
			for i := range len(st) / 4 {
				// Every bit of the old value counts (a corrupted low bit changes what follows), and the new one is a
				// small integer again.
				v := (f32At(st, i)*31 + int(binary.LittleEndian.Uint32(st[4*i:])%65521) + int(t) + sum + l + i) % 2039
				binary.LittleEndian.PutUint32(st[4*i:], math.Float32bits(float32(v)))
			}
			carry = f32At(st, 0)
			c.count[l]++
			continue
		}
		for j := range ly.HeadDim {
			c.kv[l][0] = append(c.kv[l][0], bf16((carry+p+j+l)%251)...)
			c.kv[l][1] = append(c.kv[l][1], bf16((carry*3+int(t)+j)%251)...)
		}
	}
}

// stateCache is stateModel's cache: the K/V of its attention layers, the live state of its linear layers with the
// positions each describes, and snapshots of the states (at 0 or its clone point, at Seq.Snapshot, at a
// completed import).
type stateCache struct {
	m     *stateModel
	kv    [][2][]byte
	count []int
	state [][][]byte
	snaps map[int][][][]byte
}

var _ backend.Cache = (*stateCache)(nil)

func (c *stateCache) tb() int { return c.m.layout.LayerTokenBytes(1) }

func (c *stateCache) lens() []int {
	out := make([]int, len(c.kv))
	for l, ly := range c.m.layout.Layers {
		if ly.Kind == backend.KVLinear {
			out[l] = c.count[l]
		} else {
			out[l] = len(c.kv[l][0]) / c.tb()
		}
	}
	return out
}

func (c *stateCache) uniform() (int, bool) {
	ls := c.lens()
	return ls[0], slices.Min(ls) == slices.Max(ls)
}

func (c *stateCache) Len() int { return slices.Min(c.lens()) }

func (c *stateCache) copyState() [][][]byte {
	out := make([][][]byte, len(c.state))
	for l, arrays := range c.state {
		for _, a := range arrays {
			out[l] = append(out[l], slices.Clone(a))
		}
	}
	return out
}

func (c *stateCache) Cuts() []int {
	cuts := slices.Sorted(maps.Keys(c.snaps))
	if n, ok := c.uniform(); ok && !slices.Contains(cuts, n) {
		cuts = append(cuts, n)
	}
	return cuts
}

func (c *stateCache) Restorable(n int) bool {
	return n <= c.Len() && slices.Contains(c.Cuts(), n)
}

func (c *stateCache) Truncate(n int) {
	if n >= c.Len() {
		if _, ok := c.uniform(); ok {
			return
		}
	}
	cut := 0
	for p := range c.snaps {
		if p <= n && p > cut {
			cut = p
		}
	}
	for p := range c.snaps {
		if p > cut {
			delete(c.snaps, p)
		}
	}
	c.state = copyOf(c.snaps[cut])
	for l, ly := range c.m.layout.Layers {
		if ly.Kind == backend.KVLinear {
			c.count[l] = cut
		} else {
			c.kv[l][0], c.kv[l][1] = c.kv[l][0][:min(len(c.kv[l][0]), cut*c.tb())], c.kv[l][1][:min(len(c.kv[l][1]), cut*c.tb())]
		}
	}
}

func copyOf(s [][][]byte) [][][]byte {
	c := stateCache{state: s}
	return c.copyState()
}

func (c *stateCache) Clone(n int) (backend.Cache, error) {
	if !c.Restorable(n) {
		return nil, fmt.Errorf("clone at %d: %w", n, backend.ErrNoSnapshot)
	}
	st := c.snaps[n]
	if st == nil {
		st = c.state
	}
	out := &stateCache{m: c.m, kv: make([][2][]byte, len(c.kv)), count: make([]int, len(c.kv)), state: copyOf(st), snaps: map[int][][][]byte{}}
	for p, s := range c.snaps {
		if p <= n {
			out.snaps[p] = s // immutable: shared
		}
	}
	out.snaps[n] = copyOf(st)
	for l, ly := range c.m.layout.Layers {
		if ly.Kind == backend.KVLinear {
			out.count[l] = n
		} else {
			out.kv[l] = [2][]byte{slices.Clone(c.kv[l][0][:n*c.tb()]), slices.Clone(c.kv[l][1][:n*c.tb()])}
		}
	}
	return out, nil
}

func (c *stateCache) ExportKV(layer, from, to int, keys, values []byte) error {
	if c.m.layout.Layers[layer].Kind == backend.KVLinear {
		return fmt.Errorf("layer %d: %w", layer, backend.ErrLayerKind)
	}
	if to*c.tb() > len(c.kv[layer][0]) {
		return backend.ErrNotHeld
	}
	copy(keys, c.kv[layer][0][from*c.tb():to*c.tb()])
	copy(values, c.kv[layer][1][from*c.tb():to*c.tb()])
	return nil
}

func (c *stateCache) ImportKV(layer, from int, keys, values []byte) error {
	if c.m.layout.Layers[layer].Kind == backend.KVLinear {
		return fmt.Errorf("layer %d: %w", layer, backend.ErrLayerKind)
	}
	if from*c.tb() > len(c.kv[layer][0]) {
		return fmt.Errorf("import at %d past the layer's end", from)
	}
	c.kv[layer][0] = append(c.kv[layer][0][:from*c.tb()], keys...)
	c.kv[layer][1] = append(c.kv[layer][1][:from*c.tb()], values...)
	return nil
}

func (c *stateCache) ExportState(layer int, dst [][]byte) error {
	if c.m.layout.Layers[layer].Kind != backend.KVLinear {
		return fmt.Errorf("layer %d: %w", layer, backend.ErrLayerKind)
	}
	for i, a := range c.state[layer] {
		copy(dst[i], a)
	}
	return nil
}

func (c *stateCache) ImportState(layer, n int, src [][]byte) error {
	ly := c.m.layout.Layers[layer]
	if ly.Kind != backend.KVLinear {
		return fmt.Errorf("layer %d: %w", layer, backend.ErrLayerKind)
	}
	if len(src) != len(ly.State) || n < c.count[layer] {
		return fmt.Errorf("bad import of layer %d at %d", layer, n)
	}
	for i, a := range ly.State {
		if len(src[i]) != a.Bytes() {
			return fmt.Errorf("array %d of layer %d: %d bytes, want %d", i, layer, len(src[i]), a.Bytes())
		}
		copy(c.state[layer][i], src[i])
	}
	c.count[layer] = n
	done := true
	for l, ly := range c.m.layout.Layers {
		done = done && (ly.Kind != backend.KVLinear || c.count[l] == n)
	}
	if done {
		c.snaps[n] = c.copyState()
	}
	return nil
}

func (c *stateCache) Bytes() int64 {
	n := 0
	for l := range c.kv {
		n += len(c.kv[l][0]) + len(c.kv[l][1])
	}
	for _, s := range c.snaps {
		for _, arrays := range s {
			for _, a := range arrays {
				n += len(a)
			}
		}
	}
	return int64(n)
}

func (c *stateCache) Release() { c.kv, c.snaps = nil, nil }

// stateRef is what a cache of stateModel holds after tokens: each layer's K/V (attention) or state arrays (linear).
type stateRef struct {
	kv     [][2][]byte
	arrays [][][]byte
}

func refState(tokens []int32) stateRef {
	m := newStateModel()
	bc, _ := m.NewCache()
	c := bc.(*stateCache)
	for _, t := range tokens {
		c.feed(t)
	}
	return stateRef{kv: c.kv, arrays: c.state}
}

// stateBlobs are a linear layer's arrays as a kvwire peer sends them, the conv window in conv's dtype and the
// state in state's (the model's values are exact in each).
func stateBlobs(l backend.LayerKV, arrays [][]byte, conv, state kvwire.DType) []kvwire.TensorBlob {
	var out []kvwire.TensorBlob
	for i, a := range l.State {
		to := conv
		if i == 1 {
			to = state
		}
		from, _ := kvwire.ParseDType(string(a.DType))
		data := make([]byte, kvwire.ConvertedLen(len(arrays[i]), from, to))
		if err := kvwire.Convert(data, to, arrays[i], from); err != nil {
			panic(err)
		}
		out = append(out, kvwire.TensorBlob{DType: to, Shape: slices.Clone(a.Shape), Data: data})
	}
	return out
}

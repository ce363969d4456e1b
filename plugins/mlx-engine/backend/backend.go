package backend

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/duet-ai/duet/plugins/mlx-engine/backend/dtype"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
)

// DType is an element type by its wire name ("float32", "float16", "bfloat16").
type DType = dtype.DType

// The element types a KV cache can hold.
const (
	Float32  = dtype.Float32
	Float16  = dtype.Float16
	BFloat16 = dtype.BFloat16
)

// LayerKind says which positions a layer's KV cache keeps.
type LayerKind uint8

const (
	// KVFull keeps every position fed (full causal attention).
	KVFull LayerKind = iota
	// KVSliding keeps the last Window positions (sliding-window attention: a query at p sees [p-W+1, p]).
	KVSliding
	// KVLinear keeps no positions but a fixed-size recurrent state (linear attention, Gated DeltaNet): the
	// arrays of LayerKV.State, whatever the number of positions fed.
	KVLinear
)

// String names the kind as errors and descriptions print it.
func (k LayerKind) String() string {
	switch k {
	case KVFull:
		return "full"
	case KVSliding:
		return "sliding"
	case KVLinear:
		return "linear"
	}
	return fmt.Sprintf("LayerKind(%d)", uint8(k))
}

// LayerKV is one layer's part of a KV layout: its kind, its window (KVSliding only), the shape of one
// position's keys (or values), KVHeads×HeadDim (attention layers), and the arrays of its state (KVLinear only).
type LayerKV struct {
	Kind             LayerKind
	Window           int
	KVHeads, HeadDim int
	// State lists a linear layer's state arrays in wire order (Cache.ExportState): the conv window
	// {layout dtype, [1, K-1, conv_dim]}, then the delta-rule state {float32, [1, Nv, Dv, Dk]}: what mlx-lm's
	// ArraysCache holds and exo's arrays_state carries.
	State []ArraySpec
}

// ArraySpec is the element type and shape of one array of a linear layer's state. Its bytes on the wire are
// row-major and little-endian.
type ArraySpec struct {
	DType DType
	Shape []int
}

// Elems is the number of elements: the product of the shape.
func (a ArraySpec) Elems() int {
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	return n
}

// Bytes is the size of the array on the wire.
func (a ArraySpec) Bytes() int { return a.Elems() * a.DType.Size() }

// LinearLayer is the layout entry of a Gated DeltaNet layer whose cache holds elements of dt: convKernel is the
// conv's kernel size K (its window keeps the K-1 previous positions), convDim its channels (2·Nk·Dk + Nv·Dv), and
// the state has valueHeads (Nv) matrices of valueDim (Dv) rows by keyDim (Dk).
func LinearLayer(dt DType, convKernel, convDim, valueHeads, valueDim, keyDim int) LayerKV {
	return LayerKV{Kind: KVLinear, State: []ArraySpec{
		{DType: dt, Shape: []int{1, convKernel - 1, convDim}},
		{DType: Float32, Shape: []int{1, valueHeads, valueDim, keyDim}},
	}}
}

// Equal reports whether two layers have the same kind, shape and state arrays (LayerKV holds a slice, so == does
// not compile).
func (ly LayerKV) Equal(o LayerKV) bool {
	return ly.Kind == o.Kind && ly.Window == o.Window && ly.KVHeads == o.KVHeads && ly.HeadDim == o.HeadDim &&
		slices.EqualFunc(ly.State, o.State, func(a, b ArraySpec) bool { return a.DType == b.DType && slices.Equal(a.Shape, b.Shape) })
}

// StateBytes is the size of a layer's state on the wire (0 for attention layers).
func (ly LayerKV) StateBytes() int {
	n := 0
	for _, a := range ly.State {
		n += a.Bytes()
	}
	return n
}

// KVLayout describes a model's KV cache as it travels on the wire: per layer and per token, KVHeads×HeadDim keys
// and as many values, each element in DType.
type KVLayout struct {
	Layers []LayerKV
	DType  DType
}

// DenseLayout is the layout of a model whose layers all attend over every position with the same shape.
func DenseLayout(layers, kvHeads, headDim int, dt DType) KVLayout {
	l := KVLayout{Layers: make([]LayerKV, layers), DType: dt}
	for i := range l.Layers {
		l.Layers[i] = LayerKV{Kind: KVFull, KVHeads: kvHeads, HeadDim: headDim}
	}
	return l
}

// LayoutOf is the KV layout of a model with arch a whose cache holds elements of dt: a Gated DeltaNet layer is
// KVLinear (its conv window in dt, its recurrent state in float32), an attention layer with a window KVSliding,
// the others KVFull.
func LayoutOf(a *model.Arch, dt DType) KVLayout {
	l := KVLayout{Layers: make([]LayerKV, len(a.Layers)), DType: dt}
	for i := range a.Layers {
		if d := a.Layers[i].DeltaNet; a.Layers[i].Kind == model.LayerLinear && d != nil {
			l.Layers[i] = LinearLayer(dt, d.ConvKernel, d.ConvDim(), d.ValueHeads, d.ValueDim, d.KeyDim)
			continue
		}
		at := &a.Layers[i].Attn
		l.Layers[i] = LayerKV{Kind: KVFull, KVHeads: at.KVHeads, HeadDim: at.HeadDim}
		if at.Window > 0 {
			l.Layers[i].Kind, l.Layers[i].Window = KVSliding, at.Window
		}
	}
	return l
}

// NumLayers is the number of layers.
func (l KVLayout) NumLayers() int { return len(l.Layers) }

// LayerTokenBytes is the size of one token's keys (or values) in layer i on the wire (0 for a linear layer).
func (l KVLayout) LayerTokenBytes(i int) int {
	return l.Layers[i].KVHeads * l.Layers[i].HeadDim * l.DType.Size()
}

// PositionBytes is what one position's keys and values cost over all layers, in a cache that holds it in every
// layer (the wire's bytes per prompt token of a dense model).
func (l KVLayout) PositionBytes() int {
	n := 0
	for i := range l.Layers {
		n += 2 * l.LayerTokenBytes(i)
	}
	return n
}

// HasLinear reports whether some layer is KVLinear: the cache then holds recurrent state and can be cut only
// where it keeps a snapshot (Cache.Cuts).
func (l KVLayout) HasLinear() bool {
	for _, ly := range l.Layers {
		if ly.Kind == KVLinear {
			return true
		}
	}
	return false
}

// StateBytes is what the states of every linear layer cost together: one sequence's recurrent state, and the
// size of one snapshot of it.
func (l KVLayout) StateBytes() int {
	n := 0
	for _, ly := range l.Layers {
		n += ly.StateBytes()
	}
	return n
}

// HasWindows reports whether some layer is KVSliding.
func (l KVLayout) HasWindows() bool {
	for _, ly := range l.Layers {
		if ly.Kind == KVSliding {
			return true
		}
	}
	return false
}

// Uniform returns the shape every attention layer shares (the per-model figures the engine's description
// carries); ok is false when they differ in shape or there are none. Linear layers have no per-token shape.
func (l KVLayout) Uniform() (kvHeads, headDim int, ok bool) {
	for _, ly := range l.Layers {
		if ly.Kind == KVLinear {
			continue
		}
		if !ok {
			kvHeads, headDim, ok = ly.KVHeads, ly.HeadDim, true
		}
		if ly.KVHeads != kvHeads || ly.HeadDim != headDim {
			return 0, 0, false
		}
	}
	return kvHeads, headDim, ok
}

// Options tune how a backend runs a model. Zero values pick the backend's defaults.
type Options struct {
	// Threads is the number of worker threads (the CPU backend's default is GOMAXPROCS).
	Threads int
	// PrefillChunk is the most tokens one step of a forward pass processes; longer prompts are prefilled in
	// chunks, which bounds activation memory. Results do not depend on it.
	PrefillChunk int
	// MemoryLimit, when positive, caps the memory the backend's allocator may hold (bytes); allocations past
	// it fail the request that needs them instead of swapping. Backends without their own allocator ignore it.
	MemoryLimit int64
	// Weights says how a backend that computes in float32 holds matrices stored in 16-bit or quantized form
	// (the MLX backend computes in the stored format and ignores it).
	Weights Weights
}

// Weights is a choice of how the CPU backend holds 16-bit and quantized matrices.
type Weights string

const (
	// WeightsAuto expands them when the float32 copy fits comfortably in the machine's memory.
	WeightsAuto Weights = ""
	// WeightsFloat32 expands every matrix to float32 once, at load: the fewest operations per weight, and
	// 2× (16-bit) to 8× (4-bit) the memory of the file.
	WeightsFloat32 Weights = "f32"
	// WeightsStored keeps matrices as the file stores them (memory-mapped) and expands a tile of rows at a
	// time inside each product: the memory of the file, for more work per weight.
	WeightsStored Weights = "stored"
)

// WeightsHolder is implemented by a Model that chose how to hold its weights (WeightsFloat32 or WeightsStored),
// so that the engine can say which WeightsAuto picked.
type WeightsHolder interface {
	Weights() Weights
}

// ParseWeights reads a Weights option ("auto", "f32" or "stored").
func ParseWeights(s string) (Weights, error) {
	switch s {
	case "auto", "":
		return WeightsAuto, nil
	case string(WeightsFloat32), string(WeightsStored):
		return Weights(s), nil
	}
	return "", fmt.Errorf("weights %q: want auto, f32 or stored", s)
}

// Backend loads models for one kind of hardware.
type Backend interface {
	// Name identifies the backend ("cpu", "mlx").
	Name() string
	// Load prepares m for inference. m must stay open until the returned Model is closed: a backend may use
	// its memory-mapped weights in place.
	Load(m *model.Model, opts Options) (Model, error)
}

// Model runs a loaded model's forward pass.
type Model interface {
	KVLayout() KVLayout
	VocabSize() int
	// MaxContext is the most positions a cache of this model can hold.
	MaxContext() int
	NewCache() (Cache, error)
	// Forward feeds each sequence's tokens at positions [Cache.Len(), Cache.Len()+len(Tokens)), appends their
	// K/V to the sequence's cache (advances its linear layers' states, and keeps a snapshot of them when
	// Seq.Snapshot is set), and writes the logits of the last token into Logits when Logits is non-nil
	// (len VocabSize). Several sequences in one call is how the engine batches decode steps: weights are read
	// once for all of them. On error no cache has been changed.
	Forward(batch []Seq) error
	// Close releases the model's memory. Caches must be released first.
	Close() error
}

// Seq is one sequence's part of a Forward batch.
type Seq struct {
	Cache  Cache
	Tokens []int32
	Logits []float32
	// Snapshot asks the cache to keep a snapshot of every linear layer's state after this call's tokens, so
	// that Clone and Truncate can later cut there (Cache.Cuts). The caller chooses where (a grid, a prompt's
	// end); a cache without linear layers ignores it.
	Snapshot bool
}

// Cache is one sequence's KV cache. Byte slices passed to ExportKV, ImportKV, ExportState and ImportState are
// owned by the caller; the cache copies from and into them and keeps no reference.
type Cache interface {
	// Len is the number of positions fed: the end of what every layer holds (a sliding layer holds only the
	// last Window of them; a linear layer holds its state after them).
	Len() int
	// Truncate keeps the first n positions (n >= Len() is a no-op). A sliding layer cannot get back what it
	// evicted: ask Restorable(n) first, or the cache refuses Forward (ErrWindowGap) until refilled. In a cache
	// with linear layers it restores the newest cut <= n (Cuts) and drops the snapshots above it, so the cache
	// may hold fewer than n positions afterwards: read Len().
	Truncate(n int)
	// Restorable reports whether Truncate(n) or Clone(n) leaves a cache of n positions that Forward accepts:
	// n <= Len(), every sliding layer still holds every position a query at n sees, and n is a cut.
	Restorable(n int) bool
	// Clone returns a new cache holding a copy of the first n positions (for the prefix cache); it fails with
	// ErrWindowGone when a sliding layer has evicted what n needs, and with ErrNoSnapshot when n is not one of
	// Cuts. The clone shares the snapshots at positions <= n (they are immutable) and copies the state at n.
	Clone(n int) (Cache, error)
	// Cuts lists, ascending, the positions at which Clone and Truncate can cut a cache with linear layers: 0,
	// the snapshots it keeps (Seq.Snapshot, ImportState, inherited from the cache it was cloned from) and
	// Len() (its live state; while an import is unfinished, only where a snapshot is). nil means every position
	// up to Len(): a cache without linear layers.
	Cuts() []int
	// ExportKV copies positions [from, to) of one layer into keys and values, in the wire layout
	// [tokens, kv_heads, head_dim] with elements in KVLayout().DType; each must hold
	// (to-from)×LayerTokenBytes(layer). The layer must hold them (ErrNotHeld otherwise).
	ExportKV(layer, from, to int, keys, values []byte) error
	// ImportKV writes positions [from, from+n) of one layer from wire-layout bytes
	// (n = len(keys)/LayerTokenBytes(layer)); from must not exceed the end of what the layer holds, except in a
	// sliding layer, where a later from opens a gap: the layer then holds [from, from+n) and nothing below.
	// Layers may advance independently (chunks arrive per layer); Len() is the minimum over layers.
	ImportKV(layer, from int, keys, values []byte) error
	// ExportState copies a linear layer's state after the positions it holds into dst, one slice per array of
	// KVLayout().Layers[layer].State, in that order and each exactly ArraySpec.Bytes() long. An attention layer
	// has no state (ErrLayerKind); ExportKV and ImportKV refuse linear layers the same way.
	ExportState(layer int, dst [][]byte) error
	// ImportState replaces a linear layer's state with src (the arrays of ExportState) describing positions
	// [0, n): the layer then holds n positions. n must not be below what the layer holds (Truncate first).
	// Layers advance independently, as with ImportKV. Once every linear layer holds the same n, the imported
	// states are a snapshot (a cut at n); the state the cache held before the first import stays one too, so a
	// failed import is undone by Truncate to where the cache was.
	ImportState(layer, n int, src [][]byte) error
	// Bytes is the memory the cache holds, its snapshots included, each in full even when other caches share
	// it: a sum over caches over-counts and never under-counts.
	Bytes() int64
	// Release frees the memory now (a shared snapshot when its last holder lets go); the cache must not be used
	// afterwards.
	Release()
}

// ErrReleased is returned when a released cache is used.
var ErrReleased = errors.New("backend: cache has been released")

// ErrForeignCache is returned (wrapped, naming the sequence) when a Forward batch holds a cache that another
// model made, or none.
var ErrForeignCache = errors.New("backend: cache does not belong to this model")

// ErrWindowGap is returned (wrapped) by Forward when a sliding layer of a cache lacks a position the first new
// query sees (an import that opened a gap, a truncation past its window): the caller prefills from scratch.
var ErrWindowGap = errors.New("backend: a sliding layer lacks positions its window needs")

// ErrWindowGone is returned (wrapped) by Clone when a sliding layer no longer holds the window of the clone's end.
var ErrWindowGone = errors.New("backend: a sliding layer has evicted positions the clone needs")

// ErrNoSnapshot is returned (wrapped) by Clone when a cache with linear layers has no state at the position
// asked for: it is not one of Cuts.
var ErrNoSnapshot = errors.New("backend: no snapshot of the linear layers' state at that position")

// ErrLayerKind is returned (wrapped) by ExportKV and ImportKV for a linear layer, and by ExportState and
// ImportState for an attention layer.
var ErrLayerKind = errors.New("backend: the layer's kind does not hold that")

// ErrNotHeld is returned (wrapped) by ExportKV for positions a layer does not hold (beyond its end, or evicted
// from its window).
var ErrNotHeld = errors.New("backend: positions not held by the layer")

var (
	registryMu sync.Mutex
	registry   = map[string]Backend{}
)

// Register makes a backend available by name, typically from the init function of its package (the MLX
// backend registers itself only in builds with the mlx tag). Registering a name twice panics.
func Register(b Backend) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[b.Name()]; dup {
		panic("backend: duplicate registration of " + b.Name())
	}
	registry[b.Name()] = b
}

// Lookup returns the backend registered under name.
func Lookup(name string) (Backend, error) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if b, ok := registry[name]; ok {
		return b, nil
	}
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("backend: no backend %q in this build (available: %v)", name, names)
}

// Names lists the registered backends.
func Names() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

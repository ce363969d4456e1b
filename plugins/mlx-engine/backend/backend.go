package backend

import (
	"errors"
	"fmt"
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
)

// LayerKV is one layer's part of a KV layout: its kind, its window (KVSliding only) and the shape of one
// position's keys (or values), KVHeads×HeadDim.
type LayerKV struct {
	Kind             LayerKind
	Window           int
	KVHeads, HeadDim int
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

// LayoutOf is the KV layout of a model with arch a whose cache holds elements of dt: a layer with a window is
// KVSliding, the others KVFull.
func LayoutOf(a *model.Arch, dt DType) KVLayout {
	l := KVLayout{Layers: make([]LayerKV, len(a.Layers)), DType: dt}
	for i := range a.Layers {
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

// LayerTokenBytes is the size of one token's keys (or values) in layer i on the wire.
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

// HasWindows reports whether some layer is KVSliding.
func (l KVLayout) HasWindows() bool {
	for _, ly := range l.Layers {
		if ly.Kind == KVSliding {
			return true
		}
	}
	return false
}

// Uniform returns the shape every layer shares (the per-model figures the engine's description carries); ok is
// false when layers differ in shape.
func (l KVLayout) Uniform() (kvHeads, headDim int, ok bool) {
	if len(l.Layers) == 0 {
		return 0, 0, false
	}
	kvHeads, headDim = l.Layers[0].KVHeads, l.Layers[0].HeadDim
	for _, ly := range l.Layers {
		if ly.KVHeads != kvHeads || ly.HeadDim != headDim {
			return 0, 0, false
		}
	}
	return kvHeads, headDim, true
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
	// K/V to the sequence's cache, and writes the logits of the last token into Logits when Logits is non-nil
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
}

// Cache is one sequence's KV cache. Byte slices passed to ExportKV and ImportKV are owned by the caller; the
// cache copies from and into them and keeps no reference.
type Cache interface {
	// Len is the number of positions fed: the end of what every layer holds (a sliding layer holds only the
	// last Window of them).
	Len() int
	// Truncate keeps the first n positions (n >= Len() is a no-op). A sliding layer cannot get back what it
	// evicted: ask Restorable(n) first, or the cache refuses Forward (ErrWindowGap) until refilled.
	Truncate(n int)
	// Restorable reports whether Truncate(n) or Clone(n) leaves a cache that Forward accepts: n <= Len() and
	// every sliding layer still holds every position a query at n sees.
	Restorable(n int) bool
	// Clone returns a new cache holding a copy of the first n positions (for the prefix cache); it fails with
	// ErrWindowGone when n is not Restorable.
	Clone(n int) (Cache, error)
	// ExportKV copies positions [from, to) of one layer into keys and values, in the wire layout
	// [tokens, kv_heads, head_dim] with elements in KVLayout().DType; each must hold
	// (to-from)×LayerTokenBytes(layer). The layer must hold them (ErrNotHeld otherwise).
	ExportKV(layer, from, to int, keys, values []byte) error
	// ImportKV writes positions [from, from+n) of one layer from wire-layout bytes
	// (n = len(keys)/LayerTokenBytes(layer)); from must not exceed the end of what the layer holds, except in a
	// sliding layer, where a later from opens a gap: the layer then holds [from, from+n) and nothing below.
	// Layers may advance independently (chunks arrive per layer); Len() is the minimum over layers.
	ImportKV(layer, from int, keys, values []byte) error
	// Bytes is the memory the cache holds.
	Bytes() int64
	// Release frees the memory now; the cache must not be used afterwards.
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

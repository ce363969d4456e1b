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

// KVLayout describes a model's KV cache as it travels on the wire: per layer and per token, NumKVHeads×HeadDim
// keys and as many values, each element in DType.
type KVLayout struct {
	NumLayers, NumKVHeads, HeadDim int
	DType                          DType
}

// TokenBytes is the size of one token's keys (or values) in one layer on the wire.
func (l KVLayout) TokenBytes() int { return l.NumKVHeads * l.HeadDim * l.DType.Size() }

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
	// Len is the number of positions held in every layer.
	Len() int
	// Truncate keeps the first n positions (n >= Len() is a no-op).
	Truncate(n int)
	// Clone returns a new cache holding a copy of the first n positions (for the prefix cache).
	Clone(n int) (Cache, error)
	// ExportKV copies positions [from, to) of one layer into keys and values, in the wire layout
	// [tokens, kv_heads, head_dim] with elements in KVLayout().DType; each must hold (to-from)×TokenBytes().
	ExportKV(layer, from, to int, keys, values []byte) error
	// ImportKV writes positions [from, from+n) of one layer from wire-layout bytes (n = len(keys)/TokenBytes());
	// from must not exceed what the layer holds. Layers may advance independently (chunks arrive per layer);
	// Len() is the minimum over layers.
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

package affinity

import (
	"hash/maphash"
	"math/bits"
	"sort"
	"sync"
)

const (
	// Ways is how many instances one prefix remembers, most recent first.
	Ways = 4
	// DenseBlocks is how many leading blocks are all remembered before sampling starts.
	DenseBlocks = 32
	// perOctave is how many positions are sampled per doubling of the prompt length past DenseBlocks.
	perOctave = 16
	// MaxHits bounds the instances one Match reports.
	MaxHits = 32
)

// ID identifies an instance in the index: a hash of its id (IDOf). 0 is no instance.
type ID uint64

var idSeed = maphash.MakeSeed()

// IDOf returns the index's ID for an instance id. It is stable for the life of the process.
func IDOf(instance string) ID {
	if instance == "" {
		return 0
	}
	return ID(maphash.String(idSeed, instance) | 1) // never 0
}

// Hit is an instance that served the request's prefix: Blocks leading blocks of it, at least.
type Hit struct {
	Instance ID
	Blocks   int
}

// Match is what the index remembers of one request's prefix.
type Match struct {
	// Blocks is how many of the request's block hashes were considered.
	Blocks int
	// Hits are the instances that served some of the prefix, deepest first.
	Hits []Hit
}

// Cached is how many leading blocks the instance likely holds (0 when the index knows nothing of it).
func (m Match) Cached(instance ID) int {
	for _, h := range m.Hits {
		if h.Instance == instance {
			return h.Blocks
		}
	}
	return 0
}

// Fraction is the share of the request's blocks the instance likely holds, in [0, 1].
func (m Match) Fraction(instance ID) float64 {
	if m.Blocks == 0 {
		return 0
	}
	return float64(m.Cached(instance)) / float64(m.Blocks)
}

// Index is a bounded LRU of prefix hashes. A nil *Index remembers nothing. It is safe for concurrent use.
type Index struct {
	mu        sync.RWMutex
	capacity  int
	slots     map[uint64]int32
	nodes     []node
	head      int32 // most recently used, -1 when empty
	tail      int32 // least recently used
	maxBlocks int
	positions []int // sampled block positions below maxBlocks, ascending
}

type node struct {
	hash       uint64
	prev, next int32
	inst       [Ways]ID
}

// New returns an index of at most capacity prefix hashes that looks at the first maxBlocks blocks of a
// request. A capacity or maxBlocks of 0 or less returns nil: affinity is off.
func New(capacity, maxBlocks int) *Index {
	if capacity <= 0 || maxBlocks <= 0 {
		return nil
	}
	return &Index{
		capacity:  capacity,
		slots:     make(map[uint64]int32, min(capacity, 1<<12)),
		head:      -1,
		tail:      -1,
		maxBlocks: maxBlocks,
		positions: Positions(maxBlocks),
	}
}

// Positions returns the sampled block positions below n, ascending: every position below DenseBlocks, then
// those p with (p+1) a multiple of 2^(⌊log2(p+1)⌋-4), which is 16 positions per doubling.
func Positions(n int) []int {
	var out []int
	for p := 0; p < n; p++ {
		if p < DenseBlocks {
			out = append(out, p)
			continue
		}
		step := 1 << (bits.Len(uint(p+1)) - 1 - 4) // 2^(⌊log2(p+1)⌋-4); p+1 ≥ 33, so the shift is ≥ 1
		if (p+1)%step == 0 {
			out = append(out, p)
		}
	}
	return out
}

// sampled returns the sampled positions below n.
func (x *Index) sampled(n int) []int {
	k := sort.SearchInts(x.positions, n)
	return x.positions[:k]
}

// Len is how many prefix hashes the index holds.
func (x *Index) Len() int {
	if x == nil {
		return 0
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.slots)
}

// Record remembers that instance was sent a prompt with these block hashes.
func (x *Index) Record(hashes []uint64, instance ID) {
	if x == nil || len(hashes) == 0 || instance == 0 {
		return
	}
	ps := x.sampled(len(hashes))
	x.mu.Lock()
	defer x.mu.Unlock()
	for k := len(ps) - 1; k >= 0; k-- {
		x.touch(hashes[ps[k]], instance)
	}
}

// touch moves the hash's entry to the front, creating it (evicting the least recently used when full), and
// puts instance first among its instances.
func (x *Index) touch(h uint64, instance ID) {
	i, ok := x.slots[h]
	switch {
	case ok:
		x.unlink(i)
	case len(x.nodes) < x.capacity:
		i = int32(len(x.nodes))
		x.nodes = append(x.nodes, node{})
		x.slots[h] = i
	default:
		i = x.tail
		x.unlink(i)
		delete(x.slots, x.nodes[i].hash)
		x.nodes[i] = node{}
		x.slots[h] = i
	}
	n := &x.nodes[i]
	n.hash = h
	if n.inst[0] != instance {
		// Move instance to the front, dropping its older place or the oldest instance.
		last := Ways - 1
		for k, s := range n.inst {
			if s == instance || s == 0 {
				last = k
				break
			}
		}
		copy(n.inst[1:last+1], n.inst[:last])
		n.inst[0] = instance
	}
	x.pushFront(i)
}

func (x *Index) unlink(i int32) {
	n := &x.nodes[i]
	if n.prev >= 0 {
		x.nodes[n.prev].next = n.next
	} else {
		x.head = n.next
	}
	if n.next >= 0 {
		x.nodes[n.next].prev = n.prev
	} else {
		x.tail = n.prev
	}
}

func (x *Index) pushFront(i int32) {
	n := &x.nodes[i]
	n.prev, n.next = -1, x.head
	if x.head >= 0 {
		x.nodes[x.head].prev = i
	}
	x.head = i
	if x.tail < 0 {
		x.tail = i
	}
}

// Match looks up the request's block hashes. It appends the hits to dst[:0] and returns them in the Match, so
// a caller that reuses dst allocates nothing.
func (x *Index) Match(hashes []uint64, dst []Hit) Match {
	m := Match{Hits: dst[:0]}
	if x == nil || len(hashes) == 0 {
		return m
	}
	ps := x.sampled(len(hashes))
	m.Blocks = min(len(hashes), x.maxBlocks) // blocks past the index's reach are not counted
	x.mu.RLock()
	defer x.mu.RUnlock()
	// Deepest remembered position: presence is monotone along the prompt (see the package comment).
	top := sort.Search(len(ps), func(k int) bool {
		_, ok := x.slots[hashes[ps[k]]]
		return !ok
	}) - 1
	for k := top; k >= 0 && len(m.Hits) < MaxHits; k-- {
		i, ok := x.slots[hashes[ps[k]]]
		if !ok {
			continue
		}
	next:
		for _, s := range x.nodes[i].inst {
			if s == 0 {
				break
			}
			for _, h := range m.Hits {
				if h.Instance == s {
					continue next
				}
			}
			m.Hits = append(m.Hits, Hit{Instance: s, Blocks: ps[k] + 1})
			if len(m.Hits) == MaxHits {
				break
			}
		}
	}
	return m
}

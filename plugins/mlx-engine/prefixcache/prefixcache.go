// Package prefixcache keeps the KV caches of past sequences so that a request sharing a token prefix with one
// of them skips recomputing it (a system prompt, the earlier turns of a chat, a prompt prefilled on another
// node). It is bounded by bytes and evicts the least recently used entries.
//
// An entry is a whole sequence: its tokens and the backend cache that holds their KV. A lookup finds the entry
// sharing the longest prefix with the request; the engine then copies that many positions out of it (the
// backend's Clone), so entries are never shared mutably. Finding the longest prefix is fast even for long
// prompts: each entry keeps chained hashes of its token blocks, so matching whole blocks is a binary search, and
// only the last partial block is compared token by token.
//
// A cache whose model has sliding-window layers holds, in those layers, only the window at its end, so an entry
// is usable only at lengths where its windows still hold what the next query sees. SetRestorable tells the
// cache so: Lookup then returns the longest prefix that can be restored (a miss or a shorter hit, never KV with
// a hole), and Insert keeps a shorter entry a longer one cannot stand in for.
//
// A cache whose model has linear-attention layers holds a recurrent state that cannot be rewound: it can be cut
// only where it kept a snapshot of it. Such a value says where by implementing Cutter. Lookup then reduces an
// entry's shared prefix to the entry's largest cut within it (an entry without one is no hit), and Insert keeps
// a shorter entry unless the longer one can cut where the shorter one ends (covered) or keeps every cut the
// shorter one has (superseded). A lookup past the last snapshot is a shorter hit or a miss, never a wrong state.
package prefixcache

import (
	"slices"
	"sort"
	"sync"

	"github.com/duet-ai/duet/sdk/prefixhash"
)

// Value is what an entry holds: a backend KV cache, in practice.
type Value interface {
	Bytes() int64
	Release()
}

// Cutter is implemented by values that can be restored only at some lengths (a backend cache with linear
// layers: backend.Cache.Cuts). Cuts lists them in ascending order; nil means every length up to the value's own.
type Cutter interface {
	Cuts() []int
}

// cutsOf is v's Cuts, or nil (every length) when v is no Cutter.
func cutsOf[T Value](v T) []int {
	if c, ok := any(v).(Cutter); ok {
		return c.Cuts()
	}
	return nil
}

// cutBelow is the largest of cuts at most n (n itself when cuts is nil), or -1 when there is none.
func cutBelow(cuts []int, n int) int {
	if cuts == nil {
		return n
	}
	i, found := slices.BinarySearch(cuts, n)
	switch {
	case found:
		return n
	case i == 0:
		return -1
	}
	return cuts[i-1]
}

// isCut reports whether n is one of cuts (nil: every length).
func isCut(cuts []int, n int) bool { return cutBelow(cuts, n) == n }

// keepsCuts reports whether every cut of an old value of oldLen tokens (oldCuts, nil: every length) is one of
// cuts, the new value's.
func keepsCuts(cuts, oldCuts []int, oldLen int) bool {
	if cuts == nil {
		return true
	}
	if oldCuts == nil {
		for n := 0; n <= oldLen; n++ {
			if !isCut(cuts, n) {
				return false
			}
		}
		return true
	}
	for _, n := range oldCuts {
		if !isCut(cuts, n) {
			return false
		}
	}
	return true
}

// blockSize is the number of tokens per hashed block: the SDK's, so that a router's prefix affinity (fed the
// same hashes by the gateway) predicts this cache's hits.
const blockSize = prefixhash.BlockTokens

// blockHashes returns the chained hash of every whole block of tokens: hash i covers blocks 0..i.
func blockHashes(tokens []int32) []uint64 { return prefixhash.Chain(nil, tokens, blockSize) }

type entry[T Value] struct {
	tokens   []int32
	hashes   []uint64
	val      T
	bytes    int64
	lastUsed uint64
	pins     int
	dead     bool // removed while pinned: released when the last pin goes
}

// Stats describe the cache.
type Stats struct {
	Hits, Misses  int64
	HitTokens     int64
	Entries       int64
	Bytes         int64
	CapacityBytes int64
	Evictions     int64
}

// Cache is a prefix cache of Values. It is safe for concurrent use.
type Cache[T Value] struct {
	ok       func(val T, n int) bool // SetRestorable's; nil: every prefix of an entry is restorable
	mu       sync.Mutex
	entries  []*entry[T]
	capacity int64
	used     int64
	clock    uint64
	stats    Stats
}

// New returns a cache holding at most capacity bytes (0 disables it: every insert is released at once).
func New[T Value](capacity int64) *Cache[T] {
	return &Cache[T]{capacity: capacity}
}

// SetRestorable tells the cache at which lengths an entry's value can be restored (Clone in the backend): a
// cache with sliding-window layers holds the windows of its end only. Lookup then counts only prefixes ok
// accepts, and Insert keeps an entry that is a prefix of the new one when the new one cannot restore its length
// (a prompt's KV beside the generation that followed it). ok must accept every n above one it accepts, up to the
// entry's length. Call it before the cache is used.
func (c *Cache[T]) SetRestorable(ok func(val T, n int) bool) { c.ok = ok }

// Handle pins an entry found by Lookup, so eviction leaves it alone until Release.
type Handle[T Value] struct {
	c *Cache[T]
	e *entry[T]
}

// Value is the entry's value; valid until Release.
func (h *Handle[T]) Value() T { return h.e.val }

// Tokens are the entry's tokens; do not modify them.
func (h *Handle[T]) Tokens() []int32 { return h.e.tokens }

// Release unpins the entry.
func (h *Handle[T]) Release() {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	h.e.pins--
	if h.e.dead && h.e.pins == 0 {
		h.e.val.Release()
	}
	c.evictLocked()
}

// commonPrefix returns how many leading tokens e shares with tokens, whose block hashes are qh.
func commonPrefix[T Value](e *entry[T], tokens []int32, qh []uint64) int {
	nb := min(len(e.hashes), len(qh))
	// Chained hashes: if block i matches, all before it do.
	blocks := sort.Search(nb, func(i int) bool { return e.hashes[i] != qh[i] })
	n := blocks * blockSize
	// The hash is public (clients choose the tokens), so a match is checked: reusing KV on a collision would
	// answer one prompt with another's cache.
	if !slices.Equal(e.tokens[:n], tokens[:n]) {
		n = 0
	}
	limit := min(len(e.tokens), len(tokens))
	for n < limit && e.tokens[n] == tokens[n] {
		n++
	}
	return n
}

// Lookup finds the entry that shares the longest prefix with tokens, at most max tokens long (a request must
// compute at least its last token itself, so callers pass len(tokens)-1). It returns nil and 0 on a miss. A
// Cutter's shared prefix counts up to its largest cut within it.
func (c *Cache[T]) Lookup(tokens []int32, max int) (*Handle[T], int) {
	return c.LookupFunc(tokens, max, c.ok)
}

// LookupFunc is Lookup among the prefixes that ok accepts: an entry whose shared prefix of n tokens fails
// ok(value, n) does not count (a cache whose sliding-window layers have moved past n cannot be restored there).
// ok must accept every n above one it accepts, up to the entry's length, so the longest shared prefix is the
// only one of an entry worth asking about. A nil ok accepts everything.
func (c *Cache[T]) LookupFunc(tokens []int32, max int, ok func(val T, n int) bool) (*Handle[T], int) {
	qh := blockHashes(tokens)
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *entry[T]
	bestN := 0
	for _, e := range c.entries {
		n := min(commonPrefix(e, tokens, qh), max)
		if n > bestN {
			n = cutBelow(cutsOf(e.val), n)
		}
		if n > bestN && (ok == nil || ok(e.val, n)) {
			best, bestN = e, n
		}
	}
	if best == nil {
		c.stats.Misses++
		return nil, 0
	}
	c.stats.Hits++
	c.stats.HitTokens += int64(bestN)
	c.clock++
	best.lastUsed = c.clock
	best.pins++
	return &Handle[T]{c: c, e: best}, bestN
}

// Insert hands val, the KV of tokens, to the cache, which owns it from now on. Entries that are prefixes of
// tokens become redundant and are dropped; if an entry already covers tokens, val is released at once (with
// SetRestorable: only where the longer value can be restored at the shorter length). With Cutters, an entry
// covers tokens only when it can cut at len(tokens), and a prefix entry is dropped only when val keeps every
// cut it has (as a clone of it does: snapshots are inherited).
func (c *Cache[T]) Insert(tokens []int32, val T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	size := val.Bytes()
	if c.capacity <= 0 || size > c.capacity || len(tokens) == 0 {
		val.Release()
		return
	}
	qh := blockHashes(tokens)
	cuts := cutsOf(val)
	kept := c.entries[:0]
	covered := false
	for _, e := range c.entries {
		n := commonPrefix(e, tokens, qh)
		switch {
		case n == len(tokens) && (c.ok == nil || c.ok(e.val, n)) && isCut(cutsOf(e.val), n):
			covered = true // e holds all of tokens, and maybe more
			kept = append(kept, e)
		case n == len(e.tokens) && (c.ok == nil || c.ok(val, n)) && keepsCuts(cuts, cutsOf(e.val), n):
			c.dropLocked(e) // e is a prefix of tokens: the new entry supersedes it
		default:
			kept = append(kept, e)
		}
	}
	c.entries = kept
	if covered {
		val.Release()
		return
	}
	c.clock++
	c.entries = append(c.entries, &entry[T]{tokens: tokens, hashes: qh, val: val, bytes: size, lastUsed: c.clock})
	c.used += size
	c.evictLocked()
}

func (c *Cache[T]) dropLocked(e *entry[T]) {
	c.used -= e.bytes
	if e.pins > 0 {
		e.dead = true
		return
	}
	e.val.Release()
}

// evictLocked drops least recently used, unpinned entries until the cache fits its capacity.
func (c *Cache[T]) evictLocked() {
	for c.used > c.capacity {
		victim := -1
		for i, e := range c.entries {
			if e.pins == 0 && (victim < 0 || e.lastUsed < c.entries[victim].lastUsed) {
				victim = i
			}
		}
		if victim < 0 {
			return // everything is pinned
		}
		e := c.entries[victim]
		c.entries = append(c.entries[:victim], c.entries[victim+1:]...)
		c.dropLocked(e)
		c.stats.Evictions++
	}
}

// Clear drops every entry (pinned ones when their handles are released).
func (c *Cache[T]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		c.dropLocked(e)
	}
	c.entries = nil
}

// Stats reports the cache's figures.
func (c *Cache[T]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries = int64(len(c.entries))
	s.Bytes = c.used
	s.CapacityBytes = c.capacity
	return s
}

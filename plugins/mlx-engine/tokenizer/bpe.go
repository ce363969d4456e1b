package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxVocabID bounds token ids read from files, so that a corrupt file cannot make us allocate gigabytes.
const maxVocabID = 1 << 24

// bpeJSON is the "model" object of a BPE tokenizer.json.
type bpeJSON struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Dropout                 *float64         `json:"dropout"`
}

// merge is what a pair of adjacent symbols turns into, and how early it is applied.
type merge struct {
	rank int32
	id   int32
}

// bpe is a byte-pair-encoding model: a word starts as one symbol per character and the adjacent pair with the
// lowest merge rank is merged, leftmost first, until no pair can merge.
type bpe struct {
	vocab        map[string]int32
	tokens       []string // id -> token, "" for unused ids
	merges       map[uint64]merge
	asciiIDs     [128]int32 // fast path of runeIDs; -1 when absent
	runeIDs      map[rune]int32
	byteIDs      [256]int32 // <0xXX> tokens for byte fallback; -1 when absent
	unk          int32      // -1 when the model has no unknown token
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix, added to every character but the first
	suffix       string // end_of_word_suffix, added to the last character
	// metaspaceChunks is set when no token holds a "▁" right after another character, so no merge can
	// cross the start of a "▁word": long SentencePiece-style texts (which no pre-tokenizer cuts) are then
	// encoded word by word, with the word cache, instead of as one huge word. The ids are the same.
	metaspaceChunks bool

	cache   wordCache
	scratch sync.Pool // *bpeScratch
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newBPE(raw json.RawMessage) (*bpe, error) {
	var t typeJSON
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if t.Type != "BPE" && t.Type != "" {
		return nil, fmt.Errorf("unsupported model type %q (only BPE is supported)", t.Type)
	}
	var c bpeJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if c.Type == "" && c.Merges == nil {
		return nil, errors.New("model has no type and no merges; only BPE is supported")
	}
	if c.Dropout != nil && *c.Dropout > 0 {
		return nil, errors.New("BPE dropout is not supported for inference")
	}
	if len(c.Vocab) == 0 {
		return nil, errors.New("model vocab is empty")
	}
	m := &bpe{
		vocab:        c.Vocab,
		runeIDs:      map[rune]int32{},
		unk:          -1,
		fuseUnk:      c.FuseUnk,
		byteFallback: c.ByteFallback,
		ignoreMerges: c.IgnoreMerges,
	}
	if c.ContinuingSubwordPrefix != nil {
		m.prefix = *c.ContinuingSubwordPrefix
	}
	if c.EndOfWordSuffix != nil {
		m.suffix = *c.EndOfWordSuffix
	}
	maxID := int32(-1)
	for tok, id := range c.Vocab {
		if id < 0 || id >= maxVocabID {
			return nil, fmt.Errorf("vocab token %q has id %d out of range [0, %d)", tok, id, maxVocabID)
		}
		maxID = max(maxID, id)
	}
	// Vocab ids are dense in practice; a few holes are fine, an id far beyond the vocab size is a broken file
	// that would make the id table huge.
	if int(maxID) >= 2*len(c.Vocab)+1024 {
		return nil, fmt.Errorf("vocab has %d tokens but ids up to %d; ids must be dense", len(c.Vocab), maxID)
	}
	m.tokens = make([]string, maxID+1)
	for tok, id := range c.Vocab {
		if m.tokens[id] != "" {
			return nil, fmt.Errorf("vocab id %d is used by both %q and %q", id, m.tokens[id], tok)
		}
		m.tokens[id] = tok
	}
	for i := range m.asciiIDs {
		m.asciiIDs[i] = -1
	}
	for tok, id := range c.Vocab {
		if r, size := utf8.DecodeRuneInString(tok); size == len(tok) && r != utf8.RuneError {
			if r < 128 {
				m.asciiIDs[r] = id
			}
			m.runeIDs[r] = id
		}
	}
	for b := range m.byteIDs {
		m.byteIDs[b] = -1
		if id, ok := c.Vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	if c.UnkToken != nil {
		id, ok := c.Vocab[*c.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocab", *c.UnkToken)
		}
		m.unk = id
	}
	if _, ok := c.Vocab["▁"]; ok && m.prefix == "" && m.suffix == "" {
		m.metaspaceChunks = true
		for tok := range c.Vocab {
			if strings.Contains(tok, "▁") && !metaspaceOnlyLeading(tok) {
				m.metaspaceChunks = false
				break
			}
		}
	}
	pairs, err := parseMerges(c.Merges)
	if err != nil {
		return nil, err
	}
	m.merges = make(map[uint64]merge, len(pairs))
	for rank, p := range pairs {
		a, ok := c.Vocab[p[0]]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocab", rank, p[0], p[1], p[0])
		}
		b, ok := c.Vocab[p[1]]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocab", rank, p[0], p[1], p[1])
		}
		right := p[1]
		if m.prefix != "" {
			right = strings.TrimPrefix(right, m.prefix)
		}
		id, ok := c.Vocab[p[0]+right]
		if !ok {
			return nil, fmt.Errorf("merge %d (%q %q): result %q is not in the vocab", rank, p[0], p[1], p[0]+right)
		}
		m.merges[pairKey(a, b)] = merge{rank: int32(rank), id: id}
	}
	m.scratch.New = func() any { return new(bpeScratch) }
	return m, nil
}

// parseMerges reads merges written either as "a b" strings or, since tokenizers 0.20, as ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	inner := bytes.TrimSpace(bytes.TrimPrefix(raw, []byte("[")))
	if len(inner) > 0 && inner[0] == '[' {
		var pairs [][2]string
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("merges: %w", err)
		}
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("merges: %w", err)
	}
	pairs := make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("merge %d %q is not two tokens separated by one space", i, l)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

func (m *bpe) tokenID(tok string) (int32, bool) {
	id, ok := m.vocab[tok]
	return id, ok
}

// metaspaceOnlyLeading reports whether every "▁" in tok follows another "▁" or starts the token.
func metaspaceOnlyLeading(tok string) bool {
	prev := '▁'
	for _, r := range tok {
		if r == '▁' && prev != '▁' {
			return false
		}
		prev = r
	}
	return true
}

// encode appends the ids of a pre-tokenized piece of text to dst.
func (m *bpe) encode(dst []int32, w string) []int32 {
	if !m.metaspaceChunks || m.ignoreMerges {
		return m.encodeWord(dst, w)
	}
	start, prev := 0, '▁'
	for i, r := range w {
		if r == '▁' && prev != '▁' {
			dst = m.encodeWord(dst, w[start:i])
			start = i
		}
		prev = r
	}
	return m.encodeWord(dst, w[start:])
}

// maxCachedWord is the longest word (in bytes) whose encoding is cached.
const maxCachedWord = 256

// encodeWord appends the ids of one pre-tokenized word to dst.
func (m *bpe) encodeWord(dst []int32, w string) []int32 {
	if w == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(w) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(w); ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	dst = m.mergeWord(dst, w)
	if cacheable {
		m.cache.put(w, append([]int32(nil), dst[start:]...))
	}
	return dst
}

type symbol struct {
	id         int32
	prev, next int32 // neighbours in the word, -1 at the ends
	gone       bool  // merged into its left neighbour
}

// candidate is a possible merge of the symbol at pos with its right neighbour.
type candidate struct {
	rank        int32
	pos         int32
	left, right int32 // the ids the merge was found for; stale when they changed
	id          int32
}

type bpeScratch struct {
	syms []symbol
	heap []candidate
}

// mergeWord runs the merge loop on w: a heap orders the candidate merges by (rank, position), and stale
// candidates are skipped when popped, so a word of n characters costs O(n log n).
func (m *bpe) mergeWord(dst []int32, w string) []int32 {
	sc := m.scratch.Get().(*bpeScratch)
	defer m.scratch.Put(sc)
	syms := m.initialSymbols(sc.syms[:0], w)
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		h = m.pushPair(h, syms, int32(i), int32(i+1))
	}
	for len(h) > 0 {
		c := h[0]
		h = heapPop(h)
		s := &syms[c.pos]
		if s.gone || s.next < 0 || s.id != c.left || syms[s.next].id != c.right {
			continue
		}
		right := s.next
		s.id = c.id
		s.next = syms[right].next
		syms[right].gone = true
		if s.next >= 0 {
			syms[s.next].prev = c.pos
			h = m.pushPair(h, syms, c.pos, s.next)
		}
		if s.prev >= 0 {
			h = m.pushPair(h, syms, s.prev, c.pos)
		}
	}
	for i := int32(0); len(syms) > 0 && i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.syms, sc.heap = syms, h
	return dst
}

// initialSymbols turns w into one symbol per character, falling back to byte tokens or the unknown token for
// characters that are not in the vocab, as the Rust tokenizers do.
func (m *bpe) initialSymbols(syms []symbol, w string) []symbol {
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: -1})
		if n > 0 {
			syms[n-1].next = n
		}
	}
	pendingUnk := false
	flushUnk := func() {
		if pendingUnk {
			add(m.unk)
			pendingUnk = false
		}
	}
	plain := m.prefix == "" && m.suffix == ""
	for i, r := range w {
		id := int32(-1)
		var s string
		if plain {
			if r < 128 {
				id = m.asciiIDs[r]
			} else if v, ok := m.runeIDs[r]; ok {
				id = v
			}
		} else {
			s = string(r)
			if i > 0 {
				s = m.prefix + s
			}
			if i+utf8.RuneLen(r) == len(w) {
				s += m.suffix
			}
			if v, ok := m.vocab[s]; ok {
				id = v
			}
		}
		if id >= 0 {
			flushUnk()
			add(id)
			continue
		}
		if m.byteFallback {
			var buf [utf8.UTFMax]byte
			n := utf8.EncodeRune(buf[:], r)
			ok := true
			for _, b := range buf[:n] {
				ok = ok && m.byteIDs[b] >= 0
			}
			if ok {
				flushUnk()
				for _, b := range buf[:n] {
					add(m.byteIDs[b])
				}
				continue
			}
		}
		if m.unk >= 0 {
			if pendingUnk && !m.fuseUnk {
				add(m.unk)
			}
			pendingUnk = true
		}
		// Without an unknown token the character is dropped, as in the Rust tokenizers.
	}
	flushUnk()
	return syms
}

func (m *bpe) pushPair(h []candidate, syms []symbol, a, b int32) []candidate {
	mg, ok := m.merges[pairKey(syms[a].id, syms[b].id)]
	if !ok {
		return h
	}
	return heapPush(h, candidate{rank: mg.rank, pos: a, left: syms[a].id, right: syms[b].id, id: mg.id})
}

func (c candidate) less(o candidate) bool {
	return c.rank < o.rank || (c.rank == o.rank && c.pos < o.pos)
}

func heapPush(h []candidate, c candidate) []candidate {
	h = append(h, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []candidate) []candidate {
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, min := 2*i+1, 2*i+2, i
		if l < n && h[l].less(h[min]) {
			min = l
		}
		if r < n && h[r].less(h[min]) {
			min = r
		}
		if min == i {
			return h
		}
		h[i], h[min] = h[min], h[i]
		i = min
	}
}

// wordCache remembers the ids of recently encoded words. It is safe for concurrent use; a full shard is
// emptied, which bounds memory without bookkeeping on the hot path.
type wordCache struct {
	shards [16]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const cacheShardSize = 4096

func (c *wordCache) shard(w string) *cacheShard {
	h := uint32(2166136261)
	for i := 0; i < len(w); i++ {
		h = (h ^ uint32(w[i])) * 16777619
	}
	return &c.shards[h%uint32(len(c.shards))]
}

func (c *wordCache) get(w string) ([]int32, bool) {
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	s := c.shard(w)
	s.mu.Lock()
	if s.m == nil || len(s.m) >= cacheShardSize {
		s.m = make(map[string][]int32, 64)
	}
	s.m[strings.Clone(w)] = ids // w may point into a long input text; keep only its bytes
	s.mu.Unlock()
}

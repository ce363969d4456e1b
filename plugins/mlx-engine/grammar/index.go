package grammar

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"unicode/utf8"
)

// Vocabulary describes a tokenizer's tokens to NewIndex.
type Vocabulary struct {
	// Tokens holds, for each token id, the bytes the token adds to the output on its own (for byte-level
	// BPE the bytes its symbols stand for, which may be part of a UTF-8 character; for byte-fallback pieces
	// their byte). Leave nil the ids that are not text: special and control tokens, unused ids.
	Tokens [][]byte
	// Special maps the text of special tokens to their ids, for grammars that name them with Special (such as
	// Mistral's "[TOOL_CALLS]"). Special tokens never match ordinary text.
	Special map[string]int32
	// EOS lists the ids that end generation. A Matcher allows them exactly when the grammar is complete.
	EOS []int32
}

// TokenSource is what VocabularyOf needs of a tokenizer; the engine's *tokenizer.Tokenizer has it.
type TokenSource interface {
	VocabSize() int
	TokenBytes(id int32) []byte
	IsSpecial(id int32) bool
	EOS() []int32
}

// VocabularyOf reads a tokenizer's vocabulary: ordinary tokens by their bytes, special tokens by their text,
// and the tokenizer's end-of-sequence ids (an engine that also stops on other ids, such as Llama 3's
// <|eom_id|>, adds them to EOS before calling NewIndex).
func VocabularyOf(t TokenSource) Vocabulary {
	v := Vocabulary{Tokens: make([][]byte, t.VocabSize()), Special: map[string]int32{}, EOS: t.EOS()}
	for id := range int32(t.VocabSize()) {
		b := t.TokenBytes(id)
		if len(b) == 0 {
			continue
		}
		if t.IsSpecial(id) {
			if _, dup := v.Special[string(b)]; !dup {
				v.Special[string(b)] = id
			}
			continue
		}
		v.Tokens[id] = b
	}
	return v
}

// Index is a vocabulary prepared for computing token masks: the bytes of every token, sorted so that tokens
// sharing a prefix are neighbours (a byte trie laid out flat, as XGrammar does). It is built once per
// tokenizer and shared by every grammar and Matcher; it is immutable and safe for concurrent use.
type Index struct {
	size   int      // vocabulary size: one more than the largest id
	words  int      // uint64 words in a mask
	valid  []uint64 // ids that have bytes (ordinary and named special tokens)
	nvalid int
	eos    []int32

	order  []int32 // position -> id, sorted by the token's bytes
	lcp    []int32 // position -> length of the prefix shared with the previous position
	skip   []int32 // position j -> the first position after j whose lcp is smaller than lcp[j] (or the end)
	data   []byte
	off    []int32 // position -> start in data; off[len(order)] is the end
	pos    []int32 // id -> position, or -1
	maxLen int

	special map[string]int32
}

// maxTokenBytes bounds one token's bytes; longer tokens are not text any grammar here needs.
const maxTokenBytes = 1 << 12

// NewIndex prepares a vocabulary. Tokens whose bytes contain 0xFF (never part of UTF-8) are left out: they
// could only ever produce invalid text.
func NewIndex(v Vocabulary) (*Index, error) {
	size := len(v.Tokens)
	for _, id := range v.Special {
		size = max(size, int(id)+1)
	}
	for _, id := range v.EOS {
		size = max(size, int(id)+1)
	}
	if size == 0 {
		return nil, errors.New("grammar: empty vocabulary")
	}
	for text, id := range v.Special {
		if id < 0 {
			return nil, fmt.Errorf("grammar: special token %q has negative id %d", text, id)
		}
		if text == "" || !utf8.ValidString(text) {
			return nil, fmt.Errorf("grammar: special token %d has empty or invalid text %q", id, text)
		}
	}
	idx := &Index{size: size, words: (size + 63) / 64, special: map[string]int32{}}
	idx.valid = make([]uint64, idx.words)
	isEOS := map[int32]bool{}
	for _, id := range v.EOS {
		if id < 0 {
			return nil, fmt.Errorf("grammar: end-of-sequence id %d is negative", id)
		}
		if !isEOS[id] {
			isEOS[id] = true
			idx.eos = append(idx.eos, id)
		}
	}
	toks := make([][]byte, size)
	for id, b := range v.Tokens {
		if len(b) == 0 || len(b) > maxTokenBytes || bytes.IndexByte(b, specialMark) >= 0 || isEOS[int32(id)] {
			continue
		}
		toks[id] = b
	}
	for text, id := range v.Special {
		if isEOS[id] {
			continue
		}
		b := make([]byte, 0, len(text)+2)
		b = append(append(append(b, specialMark), text...), specialMark)
		toks[id] = b
		idx.special[text] = id
	}
	idx.pos = make([]int32, size)
	for id, b := range toks {
		idx.pos[id] = -1
		if b != nil {
			idx.order = append(idx.order, int32(id))
			idx.valid[id/64] |= 1 << (id % 64)
			idx.nvalid++
		}
	}
	slices.SortFunc(idx.order, func(a, b int32) int {
		if c := bytes.Compare(toks[a], toks[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	idx.lcp = make([]int32, len(idx.order))
	idx.off = make([]int32, len(idx.order)+1)
	var prev []byte
	for p, id := range idx.order {
		b := toks[id]
		idx.pos[id] = int32(p)
		idx.off[p] = int32(len(idx.data))
		idx.data = append(idx.data, b...)
		idx.lcp[p] = int32(commonPrefix(prev, b))
		idx.maxLen = max(idx.maxLen, len(b))
		prev = b
	}
	idx.off[len(idx.order)] = int32(len(idx.data))
	// skip by a monotonic stack: each position is pushed and popped once.
	idx.skip = make([]int32, len(idx.order))
	var stack []int32
	for j := range idx.lcp {
		for len(stack) > 0 && idx.lcp[j] < idx.lcp[stack[len(stack)-1]] {
			idx.skip[stack[len(stack)-1]] = int32(j)
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, int32(j))
	}
	for _, j := range stack {
		idx.skip[j] = int32(len(idx.order))
	}
	return idx, nil
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Size is the vocabulary size: masks have a bit for every id below it.
func (x *Index) Size() int { return x.size }

// MaskWords is the length of a mask in uint64 words.
func (x *Index) MaskWords() int { return x.words }

// EOS returns the end-of-sequence ids.
func (x *Index) EOS() []int32 { return slices.Clone(x.eos) }

// MemoryBytes estimates the memory the index holds.
func (x *Index) MemoryBytes() int {
	return 8*len(x.valid) + 4*(len(x.order)+len(x.lcp)+len(x.skip)+len(x.off)+len(x.pos)) + len(x.data) + 32*len(x.special)
}

// subtreeEnd returns the first position after p whose token does not start with tok(p)[:d]: the end of the
// trie subtree below that prefix. Positions in between share lcp >= d, and skip jumps over runs of them; each
// jump lands on a smaller lcp, so there are at most d jumps.
func (x *Index) subtreeEnd(p, d int) int {
	j := p + 1
	for j < len(x.lcp) && int(x.lcp[j]) >= d {
		j = int(x.skip[j])
	}
	return j
}

func (x *Index) tok(p int) []byte { return x.data[x.off[p]:x.off[p+1]] }

// spelled appends to out the lengths l, ascending, for which text[:l] is a token. The tokens that start with
// text[:l] are a range of the sorted order, narrowed one byte at a time; a token equal to text[:l] comes first
// in its range.
func (x *Index) spelled(text []byte, out []int) []int {
	lo, hi := 0, len(x.order)
	for l := 1; l <= len(text) && lo < hi; l++ {
		b := text[l-1]
		lo += sort.Search(hi-lo, func(i int) bool {
			t := x.tok(lo + i)
			return len(t) >= l && t[l-1] >= b
		})
		hi = lo + sort.Search(hi-lo, func(i int) bool {
			t := x.tok(lo + i)
			return len(t) >= l && t[l-1] > b
		})
		if lo < hi && len(x.tok(lo)) == l {
			out = append(out, l)
		}
	}
	return out
}

// bytesOf returns the bytes of id, or nil for ids that have none.
func (x *Index) bytesOf(id int32) []byte {
	if id < 0 || int(id) >= x.size || x.pos[id] < 0 {
		return nil
	}
	return x.tok(int(x.pos[id]))
}

func (x *Index) isEOS(id int32) bool { return slices.Contains(x.eos, id) }

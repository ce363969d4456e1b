package modelgen

import (
	"container/heap"
	"strings"
	"unicode"
	"unicode/utf8"
)

// bpeResult is what merge learning produces: the merges in rank order, every symbol they create, and the
// training text as a sequence of those symbols (for the bigram statistics).
type bpeResult struct {
	symbols []string   // internal id → symbol (initial symbols first, then one per merge)
	merges  [][2]int32 // rank order
	stream  []int32    // the training text, tokenized
}

// learnBPE learns up to maxMerges merges over pre-split words. initial gives each word's starting symbols;
// allow vetoes pairs (e.g. digits for SentencePiece-style vocabularies).
// Ties between equally frequent pairs go to the pair created earliest, so the result is deterministic.
func learnBPE(words []string, initial func(string) []string, maxMerges int, allow func(a, b string) bool) *bpeResult {
	res := &bpeResult{}
	ids := map[string]int32{}
	intern := func(s string) int32 {
		if id, ok := ids[s]; ok {
			return id
		}
		id := int32(len(res.symbols))
		ids[s] = id
		res.symbols = append(res.symbols, s)
		return id
	}
	index := map[string]int{}
	var uniq [][]int32
	var freq []int
	order := make([]int, len(words))
	for i, w := range words {
		j, ok := index[w]
		if !ok {
			j = len(uniq)
			index[w] = j
			var syms []int32
			for _, s := range initial(w) {
				syms = append(syms, intern(s))
			}
			uniq = append(uniq, syms)
			freq = append(freq, 0)
		}
		freq[j]++
		order[i] = j
	}
	counts := map[uint64]int{}
	where := map[uint64][]int32{}
	key := func(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }
	h := &pairHeap{}
	for w, syms := range uniq {
		for i := 0; i+1 < len(syms); i++ {
			k := key(syms[i], syms[i+1])
			counts[k] += freq[w]
			where[k] = append(where[k], int32(w))
		}
	}
	for k, c := range counts {
		heap.Push(h, pairCount{k, c})
	}
	for len(res.merges) < maxMerges && h.Len() > 0 {
		top := heap.Pop(h).(pairCount)
		if counts[top.key] != top.count {
			continue // stale entry
		}
		a, b := int32(top.key>>32), int32(uint32(top.key))
		if !allow(res.symbols[a], res.symbols[b]) {
			delete(counts, top.key)
			continue
		}
		c := intern(res.symbols[a] + res.symbols[b])
		res.merges = append(res.merges, [2]int32{a, b})
		changed := map[uint64]bool{}
		done := map[int32]bool{}
		for _, w := range where[top.key] {
			if done[w] {
				continue
			}
			done[w] = true
			syms := uniq[w]
			for i := 0; i+1 < len(syms); i++ {
				k := key(syms[i], syms[i+1])
				counts[k] -= freq[w]
				changed[k] = true
			}
			out := syms[:0]
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
					out = append(out, c)
					i++
				} else {
					out = append(out, syms[i])
				}
			}
			uniq[w] = out
			for i := 0; i+1 < len(out); i++ {
				k := key(out[i], out[i+1])
				counts[k] += freq[w]
				changed[k] = true
				if out[i] == c || out[i+1] == c {
					where[k] = append(where[k], w)
				}
			}
		}
		delete(where, top.key)
		for k := range changed {
			if counts[k] <= 0 {
				delete(counts, k)
			} else {
				heap.Push(h, pairCount{k, counts[k]})
			}
		}
	}
	for _, w := range order {
		res.stream = append(res.stream, uniq[w]...)
	}
	return res
}

type pairCount struct {
	key   uint64
	count int
}

type pairHeap []pairCount

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count > h[j].count
	}
	return h[i].key < h[j].key
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairCount)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// byteLevelAlphabet is GPT-2's reversible byte → printable-rune map used by byte-level BPE vocabularies
// (Llama 3, Qwen): printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100 onwards. The order of
// the returned bytes is the order of the first 256 ids in those vocabularies.
func byteLevelAlphabet() (order []byte, runeOf [256]rune) {
	var printable [256]bool
	for b := '!'; b <= '~'; b++ {
		printable[b] = true
	}
	for b := 0xa1; b <= 0xac; b++ {
		printable[b] = true
	}
	for b := 0xae; b <= 0xff; b++ {
		printable[b] = true
	}
	for b := 0; b < 256; b++ {
		if printable[b] {
			order = append(order, byte(b))
			runeOf[b] = rune(b)
		}
	}
	n := 0
	for b := 0; b < 256; b++ {
		if !printable[b] {
			order = append(order, byte(b))
			runeOf[b] = rune(256 + n)
			n++
		}
	}
	return order, runeOf
}

// splitByteLevel approximates the Llama 3 pre-tokenizer regex
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// closely enough for learning merges (the real tokenizer applies the real regex at run time).
func splitByteLevel(text string) []string {
	var out []string
	rs := []rune(text)
	isL := func(i int) bool { return i < len(rs) && unicode.IsLetter(rs[i]) }
	isN := func(i int) bool { return i < len(rs) && unicode.IsNumber(rs[i]) }
	isS := func(i int) bool { return i < len(rs) && unicode.IsSpace(rs[i]) }
	isNL := func(i int) bool { return i < len(rs) && (rs[i] == '\n' || rs[i] == '\r') }
	for i := 0; i < len(rs); {
		j := i
		switch {
		case rs[i] == '\'' && contraction(rs[i+1:]) > 0:
			j = i + 1 + contraction(rs[i+1:])
		case isL(i) || (!isNL(i) && !isN(i) && isL(i+1)):
			j = i + 1
			for isL(j) {
				j++
			}
		case isN(i):
			for j < len(rs) && j-i < 3 && isN(j) {
				j++
			}
		case !isS(i) || (rs[i] == ' ' && i+1 < len(rs) && !isS(i+1)):
			j = i
			if rs[j] == ' ' {
				j++
			}
			for j < len(rs) && !isS(j) && !isL(j) && !isN(j) {
				j++
			}
			for isNL(j) {
				j++
			}
		default: // whitespace
			for isS(j) && !isNL(j) {
				j++
			}
			if isNL(j) {
				for isNL(j) {
					j++
				}
			} else if j < len(rs) && j-i > 1 {
				j-- // leave one space for the next word
			}
		}
		if j == i {
			j = i + 1
		}
		out = append(out, string(rs[i:j]))
		i = j
	}
	return out
}

func contraction(rs []rune) int {
	s := strings.ToLower(string(rs[:min(2, len(rs))]))
	switch {
	case strings.HasPrefix(s, "re"), strings.HasPrefix(s, "ve"), strings.HasPrefix(s, "ll"):
		return 2
	case strings.HasPrefix(s, "s"), strings.HasPrefix(s, "t"), strings.HasPrefix(s, "m"), strings.HasPrefix(s, "d"):
		return 1
	}
	return 0
}

// splitSentencePiece normalises text as Llama 2 / Mistral tokenizers do (prepend "▁", spaces become "▁") and
// splits it before every "▁" and around newlines, the boundaries SentencePiece never merges across.
func splitSentencePiece(text string) []string {
	norm := "▁" + strings.ReplaceAll(text, " ", "▁")
	var out []string
	start := 0
	for i, r := range norm {
		if (r == '▁' || r == '\n') && i > start {
			out = append(out, norm[start:i])
			start = i
		}
		if r == '\n' {
			out = append(out, "\n")
			start = i + 1
		}
	}
	if start < len(norm) {
		out = append(out, norm[start:])
	}
	return out
}

func runesOf(s string) []string {
	out := make([]string, 0, utf8.RuneCountInString(s))
	for _, r := range s {
		out = append(out, string(r))
	}
	return out
}

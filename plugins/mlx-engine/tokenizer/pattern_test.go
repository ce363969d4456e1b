package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/duet-ai/duet/internal/testnode"
)

// patternAlphabet mixes the characters the hand-written matchers must classify: letters of several scripts,
// numbers of all three Unicode kinds, every sort of whitespace (including the two where JavaScript and
// Oniguruma disagree), apostrophe contractions, marks, joiners and emoji.
var patternAlphabet = []string{
	"a", "Z", "é", "ß", "中", "ア", "한", "ж", "0", "7", "٣", "²", "Ⅻ", " ", "  ", "\t", "\n", "\r", "\r\n",
	"\u00a0", "\u3000", "\u2028", "\u0085", "\ufeff", "\u200b", "\u200d", "\u0301", "'", "s", "t", "re", "ve",
	"m", "ll", "d", "S", "T", "RE", "LL", ".", ",", "!", "-", "_", "$", "😀", "👍🏽", "«", "\x00",
}

func randomPatternTexts(n int) []string {
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"", " ", "\n", "a", "'s", "  x", "x  ", " \n ", "123456", "I'M 'Ll 're"}
	for len(texts) < n {
		var b strings.Builder
		for k := rng.IntN(24); k > 0; k-- {
			b.WriteString(patternAlphabet[rng.IntN(len(patternAlphabet))])
		}
		texts = append(texts, b.String())
	}
	return texts
}

func matches(p pattern, s string) []string {
	out := []string{}
	p.find(s, func(start, end int) { out = append(out, s[start:end]) })
	return out
}

// TestPatternsMatchJavaScript runs the hand-written matchers for the GPT-2, Llama 3, Qwen 2 and o200k regexes, and
// regexes translated to RE2, on random text, and compares every match with JavaScript's RegExp running the
// original pattern as transformers.js does.
func TestPatternsMatchJavaScript(t *testing.T) {
	exprs := []string{
		regexGPT2, regexLlama3, regexQwen2, regexO200k,
		// Lookaround-free regexes take the RE2 path.
		` ?[^\s\p{L}\p{N}]+|\s+`,
		`\p{N}{1,3}|[\p{L}\p{M}]+|\S`,
		`[^\r\n\p{L}\p{N}]?\p{L}+|\d+|\w`,
	}
	texts := randomPatternTexts(3000)
	script, err := filepath.Abs(filepath.Join("testdata", "regex.js"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"patterns": exprs, "texts": texts})
	var want [][][]string
	if err := json.Unmarshal(testnode.Run(t, script, req), &want); err != nil {
		t.Fatal(err)
	}
	for i, expr := range exprs {
		p, err := compileRegex(expr)
		if err != nil {
			t.Fatalf("compileRegex(%q): %v", expr, err)
		}
		failures := 0
		for j, text := range texts {
			if got := matches(p, text); !slices.Equal(got, want[i][j]) && failures < 5 {
				failures++
				t.Errorf("pattern %q on %q:\n got %q\nwant %q", expr, text, got, want[i][j])
			}
		}
	}
}

func TestKnownPatternsUseHandWrittenMatchers(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want pattern
	}{
		{"gpt2", regexGPT2, gpt2Pattern{}},
		{"llama3", regexLlama3, cl100kPattern{maxDigits: 3}},
		{"qwen2", regexQwen2, cl100kPattern{maxDigits: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := compileRegex(tt.expr)
			if err != nil || got != tt.want {
				t.Errorf("compileRegex = %#v, %v; want %#v", got, err, tt.want)
			}
		})
	}
}

func TestUnsupportedRegexesFailClearly(t *testing.T) {
	tests := []struct {
		name, expr, wantErr string
	}{
		{"lookahead", `\s+(?!\S)|\w+`, "lookaround"},
		{"lookbehind", `(?<=a)b`, "lookaround"},
		{"backreference", `(a)\1`, "backreferences"},
		{"negated space in class", `[\S]+`, `\S inside a character class`},
		{"bad syntax", `(unclosed`, "cannot run in Go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compileRegex(tt.expr)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("compileRegex(%q) error = %v, want it to mention %q", tt.expr, err, tt.wantErr)
			}
		})
	}
}

// TestHandWrittenPatternsTileInput checks the property the matchers rely on: on any input, the matches are
// non-empty, in order, and cover every byte.
func TestHandWrittenPatternsTileInput(t *testing.T) {
	o200k, err := compileRegex(regexO200k)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []pattern{gpt2Pattern{}, cl100kPattern{maxDigits: 3}, cl100kPattern{maxDigits: 1}, o200k} {
		for _, text := range randomPatternTexts(2000) {
			checkTiling(t, p, text)
		}
	}
}

func checkTiling(t *testing.T, p pattern, text string) {
	t.Helper()
	next := 0
	p.find(text, func(start, end int) {
		if start != next || end <= start || !utf8.ValidString(text[start:end]) {
			t.Fatalf("%T on %q: match [%d,%d) after %d", p, text, start, end, next)
		}
		next = end
	})
	if next != len(text) {
		t.Fatalf("%T on %q: matches stop at %d of %d", p, text, next, len(text))
	}
}

package tokenizer

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A pattern finds the non-overlapping matches that Split pre-tokenizers, Replace normalizers and Replace
// decoders act on. Patterns in tokenizer.json are written for Oniguruma (the Rust tokenizers) and run by
// JavaScript's RegExp in transformers.js; the popular ones use lookahead, which Go's RE2 cannot run. Those are
// recognised by their exact text and matched by hand-written code; any other regex is translated to RE2 when it
// means the same there, and refused with an error otherwise.
type pattern interface {
	// find calls fn with the start and end byte offsets of each non-empty match in s, in order.
	find(s string, fn func(start, end int))
}

// A stepPattern's matches cover its input end to end, and the match at a position depends only on the text
// from there on. So a long text can be cut into words a batch at a time, and the cutting stopped early,
// with exactly the words find gives. The hand-written GPT-2 and cl100k matchers are such patterns.
type stepPattern interface {
	pattern
	// matchAt returns the end of the match that starts at i (> i, for i < len(s)).
	matchAt(s string, i int) int
}

// Known pre-tokenizer regexes, exactly as tokenizer.json spells them.
const (
	// regexGPT2 is the ByteLevel pre-tokenizer's built-in regex (GPT-2, RoBERTa, ...).
	regexGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// regexLlama3 is the cl100k-style Split regex of Llama 3 (numbers in groups of up to three digits).
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// regexQwen2 is the Qwen2/Qwen3 variant of regexLlama3 that splits numbers into single digits.
	regexQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// regexO200k is the o200k Split regex of gpt-oss (o200k_harmony): words split at case changes, with their
	// contraction attached.
	regexO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// spaceTail is how regexGPT2-like patterns end: whitespace runs, the last space left to the next word. It is
// the only lookaround they use.
const spaceTail = `|\s+(?!\S)|\s+`

// foldedContraction is the case-insensitive contraction group as transformers.js rewrites it for JavaScript:
// ASCII letters only (Go's (?i) would also take the Kelvin sign and the long s).
const (
	foldedContraction = `(?i:'s|'t|'re|'ve|'m|'ll|'d)`
	asciiContraction  = `(?:'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))`
)

// patternJSON is the "pattern" field of Split and Replace: {"String": "..."} or {"Regex": "..."}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func compilePattern(p patternJSON) (pattern, error) {
	switch {
	case p.String != nil && p.Regex == nil:
		return literalPattern(*p.String), nil
	case p.Regex != nil && p.String == nil:
		return compileRegex(*p.Regex)
	default:
		return nil, errors.New(`pattern must have exactly one of "String" or "Regex"`)
	}
}

func compileRegex(expr string) (pattern, error) {
	switch expr {
	case regexGPT2:
		return gpt2Pattern{}, nil
	case regexLlama3:
		return cl100kPattern{maxDigits: 3}, nil
	case regexQwen2:
		return cl100kPattern{maxDigits: 1}, nil
	case regexO200k:
		return newWordsThenSpaces(strings.TrimSuffix(regexO200k, spaceTail))
	}
	translated, err := translateRegex(expr)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", expr, err)
	}
	re, err := regexp.Compile(translated)
	if err != nil {
		return nil, fmt.Errorf("regex %q cannot run in Go: %w", expr, err)
	}
	return re2Pattern{re}, nil
}

// literalPattern matches a fixed string.
type literalPattern string

func (p literalPattern) find(s string, fn func(start, end int)) {
	if p == "" {
		return
	}
	for off := 0; ; {
		i := strings.Index(s[off:], string(p))
		if i < 0 {
			return
		}
		fn(off+i, off+i+len(p))
		off += i + len(p)
	}
}

type re2Pattern struct{ re *regexp.Regexp }

func (p re2Pattern) find(s string, fn func(start, end int)) {
	for _, m := range p.re.FindAllStringIndex(s, -1) {
		if m[1] > m[0] {
			fn(m[0], m[1])
		}
	}
}

// jsSpaceClass lists what \s matches in JavaScript, the reference these patterns are checked against. It is
// Unicode White_Space minus U+0085, plus U+FEFF. (Oniguruma's \s differs on exactly these two.)
const jsSpaceClass = `\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}`

// isSpace reports whether r is matched by \s.
func isSpace(r rune) bool {
	switch {
	case r == ' ' || (r >= '\t' && r <= '\r'):
		return true
	case r < 0xA0:
		return false
	case r == 0xA0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200A) || r == 0x2028 || r == 0x2029 ||
		r == 0x202F || r == 0x205F || r == 0x3000 || r == 0xFEFF:
		return true
	}
	return false
}

// isLetter and isNumber are \p{L} and \p{N}, with an ASCII fast path.
func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return (r|0x20) >= 'a' && (r|0x20) <= 'z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '0' && r <= '9'
	}
	return unicode.IsNumber(r)
}

// translateRegex rewrites a tokenizer regex into RE2 syntax with the same meaning: \s and \S become explicit
// classes (RE2's are ASCII-only). Lookaround and backreferences have no RE2 form and are refused.
func translateRegex(expr string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '\\' && i+1 < len(expr):
			n := expr[i+1]
			i++
			switch {
			case n == 's' && inClass:
				b.WriteString(jsSpaceClass)
			case n == 's':
				b.WriteString("[" + jsSpaceClass + "]")
			case n == 'S' && inClass:
				return "", errors.New(`\S inside a character class is not supported`)
			case n == 'S':
				b.WriteString("[^" + jsSpaceClass + "]")
			case n >= '1' && n <= '9':
				return "", errors.New("backreferences are not supported")
			default:
				b.WriteByte('\\')
				b.WriteByte(n)
			}
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// A ']' right after '[' or '[^' is a literal member.
			if i+1 < len(expr) && expr[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(expr) && expr[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		case c == '(' && !inClass && strings.HasPrefix(expr[i:], "(?="),
			c == '(' && !inClass && strings.HasPrefix(expr[i:], "(?!"),
			c == '(' && !inClass && strings.HasPrefix(expr[i:], "(?<="),
			c == '(' && !inClass && strings.HasPrefix(expr[i:], "(?<!"):
			return "", errors.New("lookaround is only supported in the known pre-tokenizer patterns " +
				"(GPT-2, Llama 3, Qwen 2)")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// gpt2Pattern runs regexGPT2:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Every character belongs to one of the alternatives, so the matches tile the input.
type gpt2Pattern struct{}

func (gpt2Pattern) matchAt(s string, i int) int { return gpt2MatchAt(s, i) }

func (gpt2Pattern) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		end := gpt2MatchAt(s, i)
		fn(i, end)
		i = end
	}
}

func gpt2MatchAt(s string, i int) int {
	if n := contraction(s, i, false); n > 0 {
		return i + n
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	// ' ?' before a letter, number or other-symbol run.
	j := i
	if r == ' ' && i+1 < len(s) {
		r2, size2 := utf8.DecodeRuneInString(s[i+1:])
		if !isSpace(r2) {
			j, r, size = i+1, r2, size2
		}
	}
	switch {
	case isLetter(r):
		return runEnd(s, j+size, isLetter)
	case isNumber(r):
		return runEnd(s, j+size, isNumber)
	case !isSpace(r):
		return runEnd(s, j+size, isOther)
	}
	return spaceRunMatch(s, i)
}

// cl100kPattern runs regexLlama3 (maxDigits 3) and regexQwen2 (maxDigits 1):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// The alternatives are tried in order as a backtracking engine would; every character belongs to one of them,
// so the matches tile the input.
type cl100kPattern struct{ maxDigits int }

func (p cl100kPattern) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		end := p.matchAt(s, i)
		fn(i, end)
		i = end
	}
}

func (p cl100kPattern) matchAt(s string, i int) int {
	if n := contraction(s, i, true); n > 0 {
		return i + n
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r) {
		return runEnd(s, i+size, isLetter)
	}
	if r != '\r' && r != '\n' && !isNumber(r) && i+size < len(s) {
		if r2, size2 := utf8.DecodeRuneInString(s[i+size:]); isLetter(r2) {
			return runEnd(s, i+size+size2, isLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if isNumber(r) {
		end := i + size
		for n := 1; n < p.maxDigits && end < len(s); n++ {
			r2, size2 := utf8.DecodeRuneInString(s[end:])
			if !isNumber(r2) {
				break
			}
			end += size2
		}
		return end
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j, rj, sizej := i, r, size
	if r == ' ' && i+1 < len(s) {
		j = i + 1
		rj, sizej = utf8.DecodeRuneInString(s[j:])
	}
	if isOther(rj) {
		end := runEnd(s, j+sizej, isOther)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	// Only whitespace is left: \s*[\r\n]+ ends at the last line break of the whitespace run, if it has one.
	runStop := runEnd(s, i, isSpace)
	lastBreak := -1
	for k := i; k < runStop; k++ {
		if s[k] == '\r' || s[k] == '\n' {
			lastBreak = k
		}
	}
	if lastBreak >= 0 {
		return lastBreak + 1
	}
	return spaceRunMatch(s, i)
}

// wordsThenSpaces runs a pattern of the shape `WORDS|\s+(?!\S)|\s+` whose WORDS alternatives match at every
// character that is not whitespace (regexO200k): WORDS, anchored, in RE2 (leftmost-first, so the match a
// backtracking engine takes), and the whitespace tail by hand.
type wordsThenSpaces struct{ re *regexp.Regexp }

func newWordsThenSpaces(words string) (pattern, error) {
	translated, err := translateRegex(strings.ReplaceAll(words, foldedContraction, asciiContraction))
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", words, err)
	}
	re, err := regexp.Compile(`^(?:` + translated + `)`)
	if err != nil {
		return nil, fmt.Errorf("regex %q cannot run in Go: %w", words, err)
	}
	return wordsThenSpaces{re}, nil
}

func (p wordsThenSpaces) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		end := p.matchAt(s, i)
		fn(i, end)
		i = end
	}
}

func (p wordsThenSpaces) matchAt(s string, i int) int {
	if m := p.re.FindStringIndex(s[i:]); m != nil && m[1] > 0 {
		return i + m[1]
	}
	if r, size := utf8.DecodeRuneInString(s[i:]); !isSpace(r) {
		return i + size // not reached for regexO200k, whose words take every other character
	}
	return spaceRunMatch(s, i)
}

// spaceRunMatch matches '\s+(?!\S)|\s+' at i, where s[i] is whitespace: the whole run when it ends the input,
// all but its last character when that leaves at least one (the last one then joins the next word), else the
// single character.
func spaceRunMatch(s string, i int) int {
	end := runEnd(s, i, isSpace)
	if end == len(s) {
		return end
	}
	_, lastSize := utf8.DecodeLastRuneInString(s[i:end])
	if end-lastSize > i {
		return end - lastSize
	}
	return end
}

// contraction matches 's 't 're 've 'm 'll 'd at i and returns its length in bytes, or 0. With fold, ASCII case is
// ignored ((?i:...) as transformers.js rewrites it for JavaScript).
func contraction(s string, i int, fold bool) int {
	if s[i] != '\'' || i+1 >= len(s) {
		return 0
	}
	lower := func(c byte) byte {
		if fold && c >= 'A' && c <= 'Z' {
			return c + ('a' - 'A')
		}
		return c
	}
	c1 := lower(s[i+1])
	switch c1 {
	case 's', 't', 'm', 'd':
		return 2
	}
	if i+2 >= len(s) {
		return 0
	}
	c2 := lower(s[i+2])
	switch {
	case c1 == 'r' && c2 == 'e', c1 == 'v' && c2 == 'e', c1 == 'l' && c2 == 'l':
		return 3
	}
	return 0
}

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

// runEnd returns the offset of the first rune at or after i that is not in class.
func runEnd(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if !class(rune(c)) {
				return i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !class(r) {
			return i
		}
		i += size
	}
	return i
}

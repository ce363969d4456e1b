package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// A normalizer rewrites the text between added tokens before pre-tokenization.
type normalizer interface {
	normalize(s string) string
	// shrink bounds how many bytes of input one byte of output can stand for (1 when the normalizer never
	// shortens text), or is 0 when it can delete any amount of text. MaxBytesPerToken rests on it.
	shrink() int
}

type typeJSON struct {
	Type string `json:"type"`
}

// isNull reports whether a component field is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typeJSON
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch t.Type {
	case "Sequence":
		var c struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("normalizer Sequence: %w", err)
		}
		var seq normalizerSequence
		for i, r := range c.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, fmt.Errorf("normalizer Sequence[%d]: %w", i, err)
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	case "Prepend":
		var c struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("normalizer Prepend: %w", err)
		}
		return prependNormalizer(c.Prepend), nil
	case "Replace":
		var c struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		p, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		return replaceNormalizer{p, c.Content}, nil
	case "NFC":
		return formNormalizer{norm.NFC}, nil
	case "NFD":
		return formNormalizer{norm.NFD}, nil
	case "NFKC":
		return formNormalizer{norm.NFKC}, nil
	case "NFKD":
		return formNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		var c struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("normalizer Strip: %w", err)
		}
		return stripNormalizer{c.Left, c.Right}, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", t.Type)
}

type normalizerSequence []normalizer

func (seq normalizerSequence) normalize(s string) string {
	for _, n := range seq {
		s = n.normalize(s)
	}
	return s
}

func (seq normalizerSequence) shrink() int {
	f := 1
	for _, n := range seq {
		f *= n.shrink()
	}
	return f
}

// prependNormalizer adds a prefix to non-empty text (the SentencePiece "▁" of Llama 2 and Mistral).
type prependNormalizer string

func (prependNormalizer) shrink() int { return 1 }

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

type replaceNormalizer struct {
	pattern pattern
	content string
}

func (r replaceNormalizer) normalize(s string) string { return replaceAll(s, r.pattern, r.content) }

// shrink: a literal of L bytes replaced by C bytes shortens text at most L/C times; a regex can match runs
// of any length, and an empty replacement deletes.
func (r replaceNormalizer) shrink() int {
	lit, ok := r.pattern.(literalPattern)
	if !ok || r.content == "" {
		return 0
	}
	return max(1, (len(lit)+len(r.content)-1)/len(r.content))
}

// replaceAll replaces every match of p in s with the literal content.
func replaceAll(s string, p pattern, content string) string {
	if lit, ok := p.(literalPattern); ok {
		if lit == "" {
			return s
		}
		return strings.ReplaceAll(s, string(lit), content)
	}
	var b strings.Builder
	last := 0
	p.find(s, func(start, end int) {
		b.WriteString(s[last:start])
		b.WriteString(content)
		last = end
	})
	if last == 0 && b.Len() == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

type formNormalizer struct{ form norm.Form }

// shrink: composition joins at most three characters into one (Hangul jamo: 9 bytes to 3), and a
// compatibility mapping can turn a 4-byte character into one byte (𝐀 to A); a canonical decomposition can
// still shorten one (Ω, 3 bytes, to Ω, 2).
func (f formNormalizer) shrink() int {
	switch f.form {
	case norm.NFKC, norm.NFKD:
		return 4
	case norm.NFC:
		return 3
	}
	return 2
}

func (f formNormalizer) normalize(s string) string {
	if f.form.IsNormalString(s) {
		return s
	}
	return f.form.String(s)
}

type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string { return strings.ToLower(s) }

// shrink: the Kelvin sign (3 bytes) lowercases to k.
func (lowercaseNormalizer) shrink() int { return 3 }

type stripNormalizer struct{ left, right bool }

// shrink: stripping deletes whitespace runs of any length.
func (stripNormalizer) shrink() int { return 0 }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A preTokenizer cuts normalized text into the words that the model encodes one by one.
type preTokenizer interface {
	// split appends the pieces of s to dst. first reports whether s begins the input text (Metaspace's
	// prepend_scheme "first" depends on it).
	split(dst []string, s string, first bool) []string
}

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typeJSON
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch t.Type {
	case "Sequence":
		var c struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Sequence: %w", err)
		}
		var seq preTokenizerSequence
		for i, r := range c.PreTokenizers {
			p, err := parsePreTokenizer(r)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer Sequence[%d]: %w", i, err)
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "Split":
		var c struct {
			Pattern  patternJSON `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		p, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		b, err := parseBehavior(c.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		return splitPreTokenizer{p, b, c.Invert}, nil
	case "ByteLevel":
		c := struct {
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
		}{UseRegex: true}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("pre_tokenizer ByteLevel: %w", err)
		}
		return byteLevelPreTokenizer{addPrefixSpace: c.AddPrefixSpace, useRegex: c.UseRegex}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
		}
		return m, nil
	case "Digits":
		var c struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Digits: %w", err)
		}
		b := contiguous
		if c.IndividualDigits {
			b = isolated
		}
		return splitPreTokenizer{runePattern(unicode.IsNumber), b, false}, nil
	case "WhitespaceSplit":
		return splitPreTokenizer{runePattern(unicode.IsSpace), removed, false}, nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer type %q", t.Type)
}

type preTokenizerSequence []preTokenizer

func (seq preTokenizerSequence) split(dst []string, s string, first bool) []string {
	return seq.splitPieces(dst, []string{s}, first)
}

// splitPieces runs the sequence over pieces as if they were the output of an earlier stage: each stage cuts
// every piece, and first holds for the first piece only.
func (seq preTokenizerSequence) splitPieces(dst []string, pieces []string, first bool) []string {
	base := len(dst)
	dst = append(dst, pieces...)
	var tmp []string
	for _, p := range seq {
		tmp = append(tmp[:0], dst[base:]...)
		dst = dst[:base]
		if bp, ok := p.(batchPreTokenizer); ok {
			dst = bp.splitAll(dst, tmp)
			continue
		}
		for i, piece := range tmp {
			dst = p.split(dst, piece, first && i == 0)
		}
	}
	return dst
}

// splitBehavior says what happens to the matched delimiters of a Split (names as in tokenizer.json).
type splitBehavior int

const (
	isolated           splitBehavior = iota // each match is a piece of its own
	removed                                 // matches are dropped
	mergedWithPrevious                      // a match joins the piece before it
	mergedWithNext                          // a match joins the piece after it
	contiguous                              // adjacent matches form one piece
)

func parseBehavior(s string) (splitBehavior, error) {
	switch strings.ToLower(s) {
	case "isolated":
		return isolated, nil
	case "removed":
		return removed, nil
	case "mergedwithprevious":
		return mergedWithPrevious, nil
	case "mergedwithnext":
		return mergedWithNext, nil
	case "contiguous":
		return contiguous, nil
	}
	return 0, fmt.Errorf("unknown split behavior %q", s)
}

// eachBatch calls yield with the words of s, a batch of at most about batch at a time, stopping when yield
// returns false. The words are exactly split's, and no more than one batch is held at once, when the
// pre-tokenizer's first stage is an isolated split on a stepPattern (Llama 3, Qwen, GPT-2 styles); otherwise
// all words come in one batch. dst is scratch space, returned for reuse.
func eachBatch(p preTokenizer, dst []string, s string, first bool, batch int, yield func([]string) bool) []string {
	var step stepPattern
	var rest preTokenizerSequence
	switch p := p.(type) {
	case preTokenizerSequence:
		if len(p) > 0 {
			if sp, ok := p[0].(splitPreTokenizer); ok && sp.behavior == isolated && !sp.invert {
				step, _ = sp.pattern.(stepPattern)
				rest = p[1:]
			}
		}
	case byteLevelPreTokenizer:
		if p.useRegex && !p.addPrefixSpace {
			step = gpt2Pattern{}
			rest = preTokenizerSequence{byteLevelPreTokenizer{}}
		}
	}
	if step == nil {
		dst = p.split(dst[:0], s, first)
		yield(dst)
		return dst
	}
	var pieces []string
	for i := 0; i < len(s); {
		end := step.matchAt(s, i)
		pieces = append(pieces, s[i:end])
		i = end
		if len(pieces) == batch || i == len(s) {
			dst = rest.splitPieces(dst[:0], pieces, first)
			if !yield(dst) {
				break
			}
			pieces, first = pieces[:0], false
		}
	}
	return dst
}

type splitPreTokenizer struct {
	pattern  pattern
	behavior splitBehavior
	invert   bool
}

func (p splitPreTokenizer) split(dst []string, s string, _ bool) []string {
	return splitPieces(dst, s, p.pattern, p.invert, p.behavior)
}

// span is a piece of the input and whether the pattern matched it.
type span struct {
	start, end int
	match      bool
}

// splitPieces cuts s at the matches of p with the given behavior, as the Rust tokenizers'
// NormalizedString::split does, and appends the non-empty pieces to dst.
func splitPieces(dst []string, s string, p pattern, invert bool, behavior splitBehavior) []string {
	if behavior == isolated && !invert {
		last := 0
		p.find(s, func(start, end int) {
			if start > last {
				dst = append(dst, s[last:start])
			}
			dst = append(dst, s[start:end])
			last = end
		})
		if last < len(s) {
			dst = append(dst, s[last:])
		}
		return dst
	}
	var spans []span
	last := 0
	p.find(s, func(start, end int) {
		if start > last {
			spans = append(spans, span{last, start, invert})
		}
		spans = append(spans, span{start, end, !invert})
		last = end
	})
	if last < len(s) {
		spans = append(spans, span{last, len(s), invert})
	}
	var out []span
	switch behavior {
	case isolated:
		out = spans
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case mergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		prevMatch := false
		for i, sp := range spans {
			if i > 0 && sp.match == prevMatch {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	}
	for _, sp := range out {
		if sp.end > sp.start {
			dst = append(dst, s[sp.start:sp.end])
		}
	}
	return dst
}

// runePattern matches every single rune for which the function is true.
type runePattern func(rune) bool

func (p runePattern) find(s string, fn func(start, end int)) {
	for i, r := range s {
		if p(r) {
			fn(i, i+utf8.RuneLen(r))
		}
	}
}

// byteLevelPreTokenizer optionally splits with the GPT-2 regex, then rewrites each piece's bytes in the
// byte-level alphabet.
type byteLevelPreTokenizer struct {
	addPrefixSpace bool
	useRegex       bool
}

// batchPreTokenizer is implemented by pre-tokenizers that handle a list of pieces faster than one by one.
// They must not depend on which piece comes first.
type batchPreTokenizer interface {
	splitAll(dst []string, pieces []string) []string
}

func (p byteLevelPreTokenizer) split(dst []string, s string, _ bool) []string {
	return p.splitAll(dst, []string{s})
}

// splitAll writes the byte-level text of all words into one buffer and converts it to a string once; the
// words are slices of it. One allocation per call instead of one per word.
func (p byteLevelPreTokenizer) splitAll(dst []string, pieces []string) []string {
	var buf []byte
	var ends []int
	for _, s := range pieces {
		if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
			s = " " + s
		}
		if !p.useRegex {
			buf = appendByteLevel(buf, s)
			ends = append(ends, len(buf))
			continue
		}
		gpt2Pattern{}.find(s, func(start, end int) {
			buf = appendByteLevel(buf, s[start:end])
			ends = append(ends, len(buf))
		})
	}
	all := string(buf)
	prev := 0
	for _, end := range ends {
		if end > prev {
			dst = append(dst, all[prev:end])
		}
		prev = end
	}
	return dst
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspace is the SentencePiece whitespace convention: spaces become "▁" and a "▁" may be prepended.
type metaspace struct {
	replacement rune
	scheme      prependScheme
	cut         bool // pre-tokenizer only: cut before each "▁" (the "split" field)
}

func parseMetaspace(raw json.RawMessage) (metaspace, error) {
	c := struct {
		Replacement    string  `json:"replacement"`
		PrependScheme  *string `json:"prepend_scheme"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
		Split          *bool   `json:"split"`
	}{Replacement: "▁"}
	if err := json.Unmarshal(raw, &c); err != nil {
		return metaspace{}, err
	}
	r, size := utf8.DecodeRuneInString(c.Replacement)
	if size == 0 || size != len(c.Replacement) || r == utf8.RuneError {
		return metaspace{}, fmt.Errorf("replacement %q must be a single character", c.Replacement)
	}
	m := metaspace{replacement: r, scheme: prependAlways, cut: true}
	if c.Split != nil {
		m.cut = *c.Split
	}
	if c.PrependScheme != nil {
		switch *c.PrependScheme {
		case "always":
			m.scheme = prependAlways
		case "first":
			m.scheme = prependFirst
		case "never":
			m.scheme = prependNever
		default:
			return metaspace{}, fmt.Errorf("unknown prepend_scheme %q", *c.PrependScheme)
		}
	}
	if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
		m.scheme = prependNever
	}
	return m, nil
}

func (m metaspace) split(dst []string, s string, first bool) []string {
	rep := string(m.replacement)
	s = strings.ReplaceAll(s, " ", rep)
	if !strings.HasPrefix(s, rep) && (m.scheme == prependAlways || (m.scheme == prependFirst && first)) {
		s = rep + s
	}
	if !m.cut {
		return append(dst, s)
	}
	return splitPieces(dst, s, literalPattern(rep), false, mergedWithNext)
}

package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Decoding runs the tokens through the stages of the tokenizer.json decoder. The reference implementations
// pass whole lists of strings from one decoder to the next; here every stage works on a stream instead, so that
// Decode and the incremental Stream are the same code and agree by construction. An "item" is one element of
// those lists: a token, a run of byte tokens, or after Fuse the whole text. Items reach a stage as pieces that
// say where an item begins and ends; a stage holds back only what the next token could still change (an
// unfinished UTF-8 character, trailing spaces that Strip may drop, the start of a Replace pattern).

// piece is a chunk of one item.
type piece struct {
	text  string
	begin bool // first chunk of the item
	end   bool // last chunk of the item
	added bool // the item is an added token (begin and end are both set)
}

type stage interface {
	push(p piece, out func(piece))
	flush(out func(piece))
}

// stageFactory makes the per-stream state of one decoder stage.
type stageFactory func() stage

func parseDecoder(raw json.RawMessage) ([]stageFactory, error) {
	if isNull(raw) {
		// Without a decoder, tokens are joined with spaces (both reference implementations).
		return []stageFactory{func() stage { return &joinStage{} }}, nil
	}
	var t typeJSON
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	switch t.Type {
	case "Sequence":
		var c struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("decoder Sequence: %w", err)
		}
		var all []stageFactory
		for i, r := range c.Decoders {
			if isNull(r) {
				continue
			}
			f, err := parseDecoder(r)
			if err != nil {
				return nil, fmt.Errorf("decoder Sequence[%d]: %w", i, err)
			}
			all = append(all, f...)
		}
		return all, nil
	case "Replace":
		var c struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		p, err := compilePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		return []stageFactory{func() stage { return &replaceStage{pattern: p, content: c.Content} }}, nil
	case "ByteFallback":
		return []stageFactory{func() stage { return &byteFallbackStage{} }}, nil
	case "ByteLevel":
		return []stageFactory{func() stage { return &byteLevelStage{} }}, nil
	case "Fuse":
		return []stageFactory{func() stage { return &fuseStage{} }}, nil
	case "Strip":
		var c struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("decoder Strip: %w", err)
		}
		r, size := utf8.DecodeRuneInString(c.Content)
		if size == 0 || size != len(c.Content) || c.Start < 0 || c.Stop < 0 {
			return nil, fmt.Errorf("decoder Strip: content must be one character and start, stop >= 0, got %q %d %d",
				c.Content, c.Start, c.Stop)
		}
		return []stageFactory{func() stage { return &stripStage{content: r, start: c.Start, stop: c.Stop} }}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw)
		if err != nil {
			return nil, fmt.Errorf("decoder Metaspace: %w", err)
		}
		return []stageFactory{func() stage { return &metaspaceStage{m: m} }}, nil
	}
	return nil, fmt.Errorf("unsupported decoder type %q", t.Type)
}

// pipeline connects the stages; its output collects in out.
type pipeline struct {
	stages []stage
	emits  []func(piece) // emits[i] takes the output of stages[i]
	out    []byte
}

func newPipeline(factories []stageFactory) *pipeline {
	p := &pipeline{stages: make([]stage, len(factories)), emits: make([]func(piece), len(factories))}
	for i, f := range factories {
		p.stages[i] = f()
	}
	sink := func(pc piece) { p.out = append(p.out, pc.text...) }
	for i := len(p.stages) - 1; i >= 0; i-- {
		if i == len(p.stages)-1 {
			p.emits[i] = sink
			continue
		}
		next, nextEmit := p.stages[i+1], p.emits[i+1]
		p.emits[i] = func(pc piece) { next.push(pc, nextEmit) }
	}
	return p
}

func (p *pipeline) push(pc piece) {
	if len(p.stages) == 0 {
		p.out = append(p.out, pc.text...)
		return
	}
	p.stages[0].push(pc, p.emits[0])
}

func (p *pipeline) flush() {
	for i, s := range p.stages {
		s.flush(p.emits[i])
	}
}

// take returns and clears the output collected so far.
func (p *pipeline) take() string {
	s := string(p.out)
	p.out = p.out[:0]
	return s
}

// replaceStage replaces a pattern in each item. A complete item is replaced at once; an item that arrives in
// chunks holds back the tail that could still start a match (for regexes, the whole item).
type replaceStage struct {
	pattern pattern
	content string
	held    string
}

func (s *replaceStage) push(p piece, out func(piece)) {
	if p.begin && p.end {
		p.text = replaceAll(p.text, s.pattern, s.content)
		out(p)
		return
	}
	text := s.held + p.text
	s.held = ""
	if !p.end {
		cut := 0 // a regex match may reach to the end of the item: hold it all
		if lit, ok := s.pattern.(literalPattern); ok {
			cut = literalSafeCut(text, string(lit))
		}
		text, s.held = text[:cut], text[cut:]
	}
	out(piece{text: replaceAll(text, s.pattern, s.content), begin: p.begin, end: p.end})
}

func (s *replaceStage) flush(out func(piece)) {
	if s.held != "" {
		// Only reachable when a stage before us never ended its item; end it now.
		out(piece{text: replaceAll(s.held, s.pattern, s.content), end: true})
		s.held = ""
	}
}

// literalSafeCut returns how much of text can be replaced without knowing what follows: everything up to the
// earliest position, after the last complete match, where the rest of text is a proper prefix of lit.
func literalSafeCut(text, lit string) int {
	if lit == "" {
		return len(text)
	}
	after := 0
	literalPattern(lit).find(text, func(_, end int) { after = end })
	for j := max(after, len(text)-len(lit)+1); j < len(text); j++ {
		if strings.HasPrefix(lit, text[j:]) {
			return j
		}
	}
	return len(text)
}

// byteFallbackStage turns runs of <0xXX> tokens into text; each run becomes one item.
type byteFallbackStage struct {
	inRun, runBegun bool
	utf8            utf8Assembler
	buf             []byte
}

func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(s[3])
	lo, ok2 := hexDigit(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func (s *byteFallbackStage) push(p piece, out func(piece)) {
	if p.begin && p.end && !p.added {
		if b, ok := parseByteToken(p.text); ok {
			s.inRun = true
			s.buf = s.utf8.write(s.buf[:0], b)
			if len(s.buf) > 0 {
				out(piece{text: string(s.buf), begin: !s.runBegun})
				s.runBegun = true
			}
			return
		}
	}
	s.endRun(out)
	out(p)
}

func (s *byteFallbackStage) endRun(out func(piece)) {
	if !s.inRun {
		return
	}
	s.buf = s.utf8.flush(s.buf[:0])
	out(piece{text: string(s.buf), begin: !s.runBegun, end: true})
	s.inRun, s.runBegun = false, false
}

func (s *byteFallbackStage) flush(out func(piece)) { s.endRun(out) }

// byteLevelStage maps tokens in the byte-level alphabet back to bytes and assembles UTF-8. As in
// transformers.js, an added token interrupts the byte run and is passed through as written.
type byteLevelStage struct {
	inRun, runBegun bool
	utf8            utf8Assembler
	bytes, buf      []byte
}

func (s *byteLevelStage) push(p piece, out func(piece)) {
	if p.added {
		s.endRun(out)
		out(p)
		return
	}
	s.inRun = true
	s.bytes = byteLevelBytes(s.bytes[:0], p.text)
	s.buf = s.utf8.write(s.buf[:0], s.bytes...)
	if len(s.buf) > 0 {
		out(piece{text: string(s.buf), begin: !s.runBegun})
		s.runBegun = true
	}
}

func (s *byteLevelStage) endRun(out func(piece)) {
	if !s.inRun {
		return
	}
	s.buf = s.utf8.flush(s.buf[:0])
	out(piece{text: string(s.buf), begin: !s.runBegun, end: true})
	s.inRun, s.runBegun = false, false
}

func (s *byteLevelStage) flush(out func(piece)) { s.endRun(out) }

// fuseStage joins all items into one.
type fuseStage struct{ begun bool }

func (s *fuseStage) push(p piece, out func(piece)) {
	out(piece{text: p.text, begin: !s.begun})
	s.begun = true
}

func (s *fuseStage) flush(out func(piece)) {
	out(piece{begin: !s.begun, end: true})
	s.begun = false
}

// stripStage removes up to start copies of content from the beginning of each item and up to stop from its
// end. Trailing copies are held back until the item ends or something else follows them.
type stripStage struct {
	content     rune
	start, stop int
	left        int  // copies still to strip at the beginning
	leading     bool // still at the beginning of the item
	held        int  // trailing copies held back
	buf         []byte
}

func (s *stripStage) push(p piece, out func(piece)) {
	if p.begin {
		s.left, s.leading, s.held = s.start, true, 0
	}
	s.buf = s.buf[:0]
	for _, r := range p.text {
		if s.leading && s.left > 0 && r == s.content {
			s.left--
			continue
		}
		s.leading = false
		if s.stop == 0 {
			s.buf = utf8.AppendRune(s.buf, r)
			continue
		}
		if r == s.content {
			if s.held == s.stop {
				s.buf = utf8.AppendRune(s.buf, r)
			} else {
				s.held++
			}
			continue
		}
		for ; s.held > 0; s.held-- {
			s.buf = utf8.AppendRune(s.buf, s.content)
		}
		s.buf = utf8.AppendRune(s.buf, r)
	}
	if p.end {
		s.held = 0 // the last copies, at most stop of them, are dropped
	}
	out(piece{text: string(s.buf), begin: p.begin, end: p.end, added: p.added})
}

func (s *stripStage) flush(func(piece)) { s.held = 0 }

// metaspaceStage turns "▁" back into spaces. In the first item it drops them instead (unless the prepend
// scheme is "never"), undoing the space the pre-tokenizer prepended, as the Rust tokenizers do.
type metaspaceStage struct {
	m     metaspace
	items int // items begun so far
	buf   []byte
}

func (s *metaspaceStage) push(p piece, out func(piece)) {
	if p.begin {
		s.items++
	}
	drop := s.items == 1 && s.m.scheme != prependNever
	s.buf = s.buf[:0]
	for _, r := range p.text {
		switch {
		case r != s.m.replacement:
			s.buf = utf8.AppendRune(s.buf, r)
		case !drop:
			s.buf = append(s.buf, ' ')
		}
	}
	out(piece{text: string(s.buf), begin: p.begin, end: p.end, added: p.added})
}

func (s *metaspaceStage) flush(func(piece)) {}

// joinStage separates items with a space; it stands in for a missing decoder.
type joinStage struct{ items int }

func (s *joinStage) push(p piece, out func(piece)) {
	if p.begin {
		s.items++
		if s.items > 1 {
			p.text = " " + p.text
		}
	}
	out(p)
}

func (s *joinStage) flush(func(piece)) {}

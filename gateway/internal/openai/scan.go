package openai

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// ScanPrompt reads a chat or completion body as far as it must to tell its model and how long its prompt text
// is, without decoding it: the prompt's bytes are counted as they would decode (escapes included), and
// nothing is allocated but the model's name. The gateway uses it to refuse a prompt that cannot fit the
// model's context before it parses, copies or sends megabytes of text.
//
// PromptBytes sums the decoded "content" strings of "messages" (and the "text" of content parts), or the
// "prompt" string of a completion; PromptTokens counts a prompt given as token ids. ok is false when the body
// is not an object it can read this way (malformed, nested too deep, a key spelled with escapes); the full
// parser then says what is wrong.
func ScanPrompt(body []byte) (s PromptScan, ok bool) {
	sc := scanner{b: body}
	sc.space()
	if !sc.byte('{') {
		return s, false
	}
	if sc.space(); sc.byte('}') {
		return s, true
	}
	for {
		key, ok := sc.key()
		if !ok {
			return s, false
		}
		// encoding/json matches keys without regard to case, and the last of a repeated key wins: so here.
		switch {
		case fold(key, "model"):
			start := sc.i
			if _, ok := sc.str(); !ok {
				if !sc.skip(0) {
					return s, false
				}
				break
			}
			s.Model = ""
			if raw := body[start+1 : sc.i-1]; len(raw) <= 256 && !hasEscape(raw) {
				s.Model = string(raw)
			}
		case fold(key, "messages"):
			s.PromptBytes = 0
			if !sc.messages(&s) {
				return s, false
			}
		case fold(key, "prompt"):
			s.PromptBytes, s.PromptTokens = 0, 0
			if !sc.prompt(&s) {
				return s, false
			}
		default:
			if !sc.skip(0) {
				return s, false
			}
		}
		sc.space()
		if sc.byte('}') {
			return s, true
		}
		if !sc.byte(',') {
			return s, false
		}
	}
}

// PromptScan is what ScanPrompt learns.
type PromptScan struct {
	Model        string
	PromptBytes  int
	PromptTokens int
}

// ones has a one in every byte, for the word-at-a-time scan of strings.
const ones = 0x0101010101010101

// maxScanDepth bounds the nesting the scanner follows; deeper bodies go to the full parser.
const maxScanDepth = 64

type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c if it comes next.
func (s *scanner) byte(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// key reads `"name":` and returns the name's bytes; ok is false when it is malformed or holds escapes.
func (s *scanner) key() ([]byte, bool) {
	s.space()
	start := s.i
	if _, ok := s.str(); !ok {
		return nil, false
	}
	raw := s.b[start+1 : s.i-1]
	s.space()
	if !s.byte(':') || hasEscape(raw) {
		return nil, false
	}
	s.space()
	return raw, true
}

func fold(key []byte, name string) bool { return bytes.EqualFold(key, []byte(name)) }

func hasEscape(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' {
			return true
		}
	}
	return false
}

// str reads a JSON string and returns its decoded length in bytes (invalid UTF-8 counts as it would decode,
// one U+FFFD per bad byte).
func (s *scanner) str() (int, bool) {
	if !s.byte('"') {
		return 0, false
	}
	n := 0
	for s.i < len(s.b) {
		// Eight plain ASCII bytes at a time (no quote, backslash, control or non-ASCII byte among them): the
		// bulk of a long prompt. Any flag, even a false one from a borrow, sends one character through the
		// switch below.
		for s.i+8 <= len(s.b) {
			x := binary.LittleEndian.Uint64(s.b[s.i:])
			q, bs := x^(ones*'"'), x^(ones*'\\')
			if ((x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs|x)&(ones*0x80) != 0 {
				break
			}
			s.i += 8
			n += 8
		}
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return n, true
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return 0, false
			}
			e := s.b[s.i+1]
			if e != 'u' {
				if e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't' {
					return 0, false
				}
				s.i += 2
				n++
				continue
			}
			r, ok := s.hex4(s.i + 2)
			if !ok {
				return 0, false
			}
			s.i += 6
			if r >= 0xd800 && r < 0xdc00 && s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
				if lo, ok := s.hex4(s.i + 2); ok && lo >= 0xdc00 && lo < 0xe000 {
					s.i += 6
					n += 4 // a surrogate pair: one supplementary character
					continue
				}
			}
			if r >= 0xd800 && r < 0xe000 {
				n += 3 // a lone surrogate decodes to U+FFFD
			} else {
				n += utf8.RuneLen(rune(r))
			}
		case c < 0x20:
			return 0, false
		case c < utf8.RuneSelf:
			s.i++
			n++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			s.i += size
			if r == utf8.RuneError && size == 1 {
				n += 3
			} else {
				n += size
			}
		}
	}
	return 0, false
}

func (s *scanner) hex4(at int) (uint32, bool) {
	if at+4 > len(s.b) {
		return 0, false
	}
	var r uint32
	for _, c := range s.b[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= uint32(c - '0')
		case c >= 'a' && c <= 'f':
			r |= uint32(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= uint32(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

// skip passes over one value of any kind.
func (s *scanner) skip(depth int) bool {
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{' || c == '[':
		if depth >= maxScanDepth {
			return false
		}
		close := byte('}')
		if c == '[' {
			close = ']'
		}
		s.i++
		if s.space(); s.byte(close) {
			return true
		}
		for {
			if c == '{' {
				if _, ok := s.str(); !ok {
					return false
				}
				if s.space(); !s.byte(':') {
					return false
				}
			}
			if !s.skip(depth + 1) {
				return false
			}
			s.space()
			if s.byte(close) {
				return true
			}
			if !s.byte(',') {
				return false
			}
			s.space()
		}
	default: // a number, true, false or null: up to the next delimiter
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return s.i > start
	}
}

// each calls fn at the start of every element of the array that comes next (fn must consume the element).
func (s *scanner) each(fn func() bool) bool {
	if !s.byte('[') {
		return false
	}
	if s.space(); s.byte(']') {
		return true
	}
	for {
		s.space()
		if !fn() {
			return false
		}
		s.space()
		if s.byte(']') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// fields calls fn with each key of the object that comes next (nil when spelled with escapes), positioned at
// its value (fn must consume it).
func (s *scanner) fields(fn func(key []byte) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.space(); s.byte('}') {
		return true
	}
	for {
		start := s.i
		if _, ok := s.str(); !ok {
			return false
		}
		raw := s.b[start+1 : s.i-1]
		if s.space(); !s.byte(':') {
			return false
		}
		s.space()
		if hasEscape(raw) {
			raw = nil
		}
		if !fn(raw) {
			return false
		}
		s.space()
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
		s.space()
	}
}

func (s *scanner) messages(out *PromptScan) bool {
	if s.i < len(s.b) && s.b[s.i] != '[' {
		return s.skip(0)
	}
	return s.each(func() bool {
		if s.i < len(s.b) && s.b[s.i] != '{' {
			return s.skip(1)
		}
		content := 0 // of this message; a repeated "content" replaces the one before
		ok := s.fields(func(key []byte) bool {
			if !fold(key, "content") {
				return s.skip(2)
			}
			content = 0
			switch {
			case s.i < len(s.b) && s.b[s.i] == '"':
				n, ok := s.str()
				content = n
				return ok
			case s.i < len(s.b) && s.b[s.i] == '[':
				return s.each(func() bool {
					if s.i < len(s.b) && s.b[s.i] != '{' {
						return s.skip(3)
					}
					text := 0
					ok := s.fields(func(key []byte) bool {
						if fold(key, "text") && s.i < len(s.b) && s.b[s.i] == '"' {
							n, ok := s.str()
							text = n
							return ok
						}
						return s.skip(4)
					})
					content += text
					return ok
				})
			}
			return s.skip(2)
		})
		out.PromptBytes += content
		return ok
	})
}

func (s *scanner) prompt(out *PromptScan) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		n, ok := s.str()
		out.PromptBytes += n
		return ok
	case '[':
		return s.each(func() bool {
			switch {
			case s.i < len(s.b) && s.b[s.i] == '"':
				n, ok := s.str()
				out.PromptBytes += n
				return ok
			case s.i < len(s.b) && s.b[s.i] == '[':
				return s.each(func() bool { out.PromptTokens++; return s.skip(2) })
			}
			out.PromptTokens++
			return s.skip(1)
		})
	}
	return s.skip(0)
}

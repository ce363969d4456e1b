package grammar

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// byteSet is a set of bytes, one bit each.
type byteSet [4]uint64

func (s *byteSet) add(b byte)     { s[b>>6] |= 1 << (b & 63) }
func (s byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s byteSet) empty() bool     { return s[0]|s[1]|s[2]|s[3] == 0 }
func (s byteSet) union(t byteSet) byteSet {
	return byteSet{s[0] | t[0], s[1] | t[1], s[2] | t[2], s[3] | t[3]}
}

func (s *byteSet) addRange(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s.add(byte(b))
	}
}

func setOf(chars string) byteSet {
	var s byteSet
	for i := 0; i < len(chars); i++ {
		s.add(chars[i])
	}
	return s
}

func rangeSet(lo, hi byte) byteSet {
	var s byteSet
	s.addRange(lo, hi)
	return s
}

func (s byteSet) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < 256; i++ {
		if !s.has(byte(i)) {
			continue
		}
		j := i
		for j+1 < 256 && s.has(byte(j+1)) {
			j++
		}
		fmt.Fprintf(&b, "%s", byteName(byte(i)))
		if j > i {
			fmt.Fprintf(&b, "-%s", byteName(byte(j)))
		}
		i = j
	}
	b.WriteByte(']')
	return b.String()
}

func byteName(c byte) string {
	if c > ' ' && c < 0x7f {
		return string(rune(c))
	}
	return fmt.Sprintf("\\x%02x", c)
}

// runeRange is an inclusive range of code points.
type runeRange struct{ lo, hi rune }

// runeSetNode matches one UTF-8 encoded code point out of ranges (surrogates are never matched: they are not
// valid UTF-8). The ranges become byte-level sequences the way RE2 and Rust's regex-syntax compile them: each
// range is split until every byte position of its encodings spans one contiguous byte range.
func runeSetNode(ranges []runeRange) *node {
	var alts []*node
	for _, r := range ranges {
		lo, hi := r.lo, r.hi
		if lo < 0 {
			lo = 0
		}
		if hi > utf8.MaxRune {
			hi = utf8.MaxRune
		}
		// Cut out the surrogates.
		if lo <= 0xDFFF && hi >= 0xD800 {
			if lo < 0xD800 {
				alts = utf8Sequences(alts, lo, 0xD7FF)
			}
			if hi > 0xDFFF {
				alts = utf8Sequences(alts, 0xE000, hi)
			}
			continue
		}
		if lo <= hi {
			alts = utf8Sequences(alts, lo, hi)
		}
	}
	return alt(alts...)
}

// utf8Sequences appends the byte-class sequences for the code points lo..hi (no surrogates inside).
func utf8Sequences(out []*node, lo, hi rune) []*node {
	// Split at the boundaries between encoded lengths.
	for _, edge := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= edge && hi > edge {
			out = utf8Sequences(out, lo, edge)
			return utf8Sequences(out, edge+1, hi)
		}
	}
	if hi < 0x80 {
		return append(out, class(rangeSet(byte(lo), byte(hi))))
	}
	// Split until each continuation byte covers a full or contiguous range.
	for i := 1; i < 4; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				out = utf8Sequences(out, lo, lo|m)
				return utf8Sequences(out, (lo|m)+1, hi)
			}
			if hi&m != m {
				out = utf8Sequences(out, lo, (hi&^m)-1)
				return utf8Sequences(out, hi&^m, hi)
			}
		}
	}
	var a, b [4]byte
	n := utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	kids := make([]*node, n)
	for i := 0; i < n; i++ {
		kids[i] = class(rangeSet(a[i], b[i]))
	}
	return append(out, seq(kids...))
}

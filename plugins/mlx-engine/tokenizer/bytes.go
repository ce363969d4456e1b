package tokenizer

import (
	"unicode/utf8"
)

// The GPT-2 byte-level alphabet maps each of the 256 byte values to a printable rune, so that byte-level BPE
// vocabularies can be written as ordinary strings: printable Latin-1 bytes map to themselves and the other 68
// bytes (controls, space, DEL, NBSP, soft hyphen) to U+0100 onwards, in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// appendByteLevel appends s, written in the byte-level alphabet, to dst.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = utf8.AppendRune(dst, byteToRune[s[i]])
	}
	return dst
}

// byteLevelBytes turns a token written in the byte-level alphabet back into its bytes. A token holding a rune
// outside the alphabet (an added token, say) stands for its own UTF-8 bytes, as in the Rust tokenizers.
func byteLevelBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// utf8Assembler turns a stream of bytes into valid UTF-8 text. Complete characters pass through; an ill-formed
// sequence becomes one U+FFFD per maximal subpart (the Unicode and WHATWG recommendation, which TextDecoder and
// Rust's from_utf8_lossy follow), so that the result does not depend on how the bytes were chunked. At most three
// bytes of an unfinished character are held back.
type utf8Assembler struct {
	pending [4]byte
	n       int  // bytes held in pending
	need    int  // continuation bytes still expected
	lo, hi  byte // allowed range of the next continuation byte
}

// write appends the text that bytes b complete to dst.
func (a *utf8Assembler) write(dst []byte, b ...byte) []byte {
	for _, c := range b {
		dst = a.writeByte(dst, c)
	}
	return dst
}

func (a *utf8Assembler) writeByte(dst []byte, c byte) []byte {
	if a.need > 0 {
		if c >= a.lo && c <= a.hi {
			a.pending[a.n] = c
			a.n++
			a.need--
			a.lo, a.hi = 0x80, 0xBF
			if a.need == 0 {
				dst = append(dst, a.pending[:a.n]...)
				a.n = 0
			}
			return dst
		}
		// The sequence so far is a maximal subpart: replace it and look at c afresh.
		dst = append(dst, "\uFFFD"...)
		a.n, a.need = 0, 0
	}
	a.lo, a.hi = 0x80, 0xBF
	switch {
	case c < 0x80:
		return append(dst, c)
	case c >= 0xC2 && c <= 0xDF:
		a.need = 1
	case c >= 0xE0 && c <= 0xEF:
		a.need = 2
		if c == 0xE0 {
			a.lo = 0xA0
		} else if c == 0xED {
			a.hi = 0x9F
		}
	case c >= 0xF0 && c <= 0xF4:
		a.need = 3
		if c == 0xF0 {
			a.lo = 0x90
		} else if c == 0xF4 {
			a.hi = 0x8F
		}
	default:
		return append(dst, "\uFFFD"...)
	}
	a.pending[0] = c
	a.n = 1
	return dst
}

// flush ends the byte stream: an unfinished character becomes U+FFFD.
func (a *utf8Assembler) flush(dst []byte) []byte {
	if a.need > 0 {
		dst = append(dst, "\uFFFD"...)
	}
	a.n, a.need = 0, 0
	a.lo, a.hi = 0x80, 0xBF
	return dst
}

// lossyUTF8 decodes b like the assembler, in one go.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var a utf8Assembler
	out := a.write(make([]byte, 0, len(b)+8), b...)
	return string(a.flush(out))
}

package mpack

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MaxDepthLimit is the largest nesting depth a Reader accepts as its bound.
const MaxDepthLimit = 64

// Kind is the MessagePack family of a value, independent of its width.
type Kind uint8

// The kinds a Reader distinguishes.
const (
	KindInvalid Kind = iota
	KindNil
	KindBool
	KindInt
	KindFloat
	KindStr
	KindBin
	KindArray
	KindMap
	KindExt
)

var kindNames = [...]string{
	KindInvalid: "invalid byte",
	KindNil:     "nil",
	KindBool:    "bool",
	KindInt:     "integer",
	KindFloat:   "float",
	KindStr:     "str",
	KindBin:     "bin",
	KindArray:   "array",
	KindMap:     "map",
	KindExt:     "ext",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// KindOf reports the kind that a value starting with byte c has.
func KindOf(c byte) Kind {
	switch {
	case c <= 0x7f || c >= 0xe0:
		return KindInt
	case c <= 0x8f:
		return KindMap
	case c <= 0x9f:
		return KindArray
	case c <= 0xbf:
		return KindStr
	}
	switch c {
	case 0xc0:
		return KindNil
	case 0xc2, 0xc3:
		return KindBool
	case 0xc4, 0xc5, 0xc6:
		return KindBin
	case 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return KindExt
	case 0xca, 0xcb:
		return KindFloat
	case 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3:
		return KindInt
	case 0xd9, 0xda, 0xdb:
		return KindStr
	case 0xdc, 0xdd:
		return KindArray
	case 0xde, 0xdf:
		return KindMap
	}
	return KindInvalid // 0xc1, never used
}

// Error describes malformed or unexpected MessagePack at a byte offset of the frame.
type Error struct {
	Offset int
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("msgpack at byte %d: %s", e.Offset, e.Msg) }

// Reader reads MessagePack values from one complete frame held in memory. The zero value reads an empty frame.
// Returned str and bin payloads alias the frame.
type Reader struct {
	b        []byte
	off      int
	maxDepth int
}

// MakeReader returns a Reader over frame whose Skip refuses values nested deeper than maxDepth containers
// (clamped to [1, MaxDepthLimit]).
func MakeReader(frame []byte, maxDepth int) Reader {
	maxDepth = min(max(maxDepth, 1), MaxDepthLimit)
	return Reader{b: frame, maxDepth: maxDepth}
}

// Offset is the number of bytes consumed so far.
func (r *Reader) Offset() int { return r.off }

// Len is the number of bytes left.
func (r *Reader) Len() int { return len(r.b) - r.off }

func (r *Reader) errorf(format string, args ...any) error {
	return &Error{Offset: r.off, Msg: fmt.Sprintf(format, args...)}
}

func (r *Reader) truncated(what string, need int) error {
	return r.errorf("%s needs %d bytes, only %d left in the frame", what, need, r.Len())
}

// Peek returns the kind of the next value without consuming it.
func (r *Reader) Peek() (Kind, error) {
	if r.off >= len(r.b) {
		return KindInvalid, r.truncated("a value", 1)
	}
	return KindOf(r.b[r.off]), nil
}

// uintN reads an n-byte big-endian unsigned integer after the current type byte, which it also consumes.
func (r *Reader) uintN(what string, n int) (uint64, error) {
	if r.Len() < 1+n {
		return 0, r.truncated(what, 1+n)
	}
	p := r.b[r.off+1 : r.off+1+n]
	var v uint64
	switch n {
	case 1:
		v = uint64(p[0])
	case 2:
		v = uint64(binary.BigEndian.Uint16(p))
	case 4:
		v = uint64(binary.BigEndian.Uint32(p))
	case 8:
		v = binary.BigEndian.Uint64(p)
	}
	r.off += 1 + n
	return v, nil
}

// ReadInt reads an integer of any MessagePack width. Unsigned values above math.MaxInt64 are an error.
func (r *Reader) ReadInt() (int64, error) {
	if r.off >= len(r.b) {
		return 0, r.truncated("an integer", 1)
	}
	c := r.b[r.off]
	switch {
	case c <= 0x7f:
		r.off++
		return int64(c), nil
	case c >= 0xe0:
		r.off++
		return int64(int8(c)), nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		u, err := r.uintN("an unsigned integer", 1<<(c-0xcc))
		if err != nil {
			return 0, err
		}
		if u > math.MaxInt64 {
			r.off -= 9
			return 0, r.errorf("integer %d overflows int64", u)
		}
		return int64(u), nil
	case 0xd0:
		u, err := r.uintN("an int8", 1)
		return int64(int8(u)), err
	case 0xd1:
		u, err := r.uintN("an int16", 2)
		return int64(int16(u)), err
	case 0xd2:
		u, err := r.uintN("an int32", 4)
		return int64(int32(u)), err
	case 0xd3:
		u, err := r.uintN("an int64", 8)
		return int64(u), err
	}
	return 0, r.errorf("expected integer, got %s", KindOf(c))
}

// ReadBool reads a bool.
func (r *Reader) ReadBool() (bool, error) {
	if r.off >= len(r.b) {
		return false, r.truncated("a bool", 1)
	}
	switch r.b[r.off] {
	case 0xc2:
		r.off++
		return false, nil
	case 0xc3:
		r.off++
		return true, nil
	}
	return false, r.errorf("expected bool, got %s", KindOf(r.b[r.off]))
}

// header reads a str, bin, array or map header of the wanted kind and returns its length. It checks nothing
// against the bytes left; callers do, because what one element costs differs.
func (r *Reader) header(want Kind) (int, error) {
	if r.off >= len(r.b) {
		return 0, r.truncated("a "+want.String(), 1)
	}
	c := r.b[r.off]
	got := KindOf(c)
	if got != want {
		return 0, r.errorf("expected %s, got %s", want, got)
	}
	var n uint64
	var err error
	switch {
	case want == KindStr && c <= 0xbf:
		n, r.off = uint64(c&0x1f), r.off+1
	case want == KindArray && c <= 0x9f:
		n, r.off = uint64(c&0x0f), r.off+1
	case want == KindMap && c <= 0x8f:
		n, r.off = uint64(c&0x0f), r.off+1
	case c == 0xc4 || c == 0xd9:
		n, err = r.uintN("a length header", 1)
	case c == 0xc5 || c == 0xda || c == 0xdc || c == 0xde:
		n, err = r.uintN("a length header", 2)
	case c == 0xc6 || c == 0xdb || c == 0xdd || c == 0xdf:
		n, err = r.uintN("a length header", 4)
	}
	return int(n), err // n < 2^32: fits an int on the 64-bit platforms this module supports
}

func (r *Reader) payload(what string, n int) ([]byte, error) {
	if n > r.Len() {
		return nil, r.errorf("%s of %d bytes, only %d left in the frame", what, n, r.Len())
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p, nil
}

// ReadStr reads a str and returns its bytes, aliasing the frame.
func (r *Reader) ReadStr() ([]byte, error) {
	n, err := r.header(KindStr)
	if err != nil {
		return nil, err
	}
	return r.payload("str", n)
}

// ReadBin reads a bin and returns its bytes, aliasing the frame.
func (r *Reader) ReadBin() ([]byte, error) {
	n, err := r.header(KindBin)
	if err != nil {
		return nil, err
	}
	return r.payload("bin", n)
}

// ReadArrayHeader reads an array header. The length is at most the bytes left, since every element takes one
// byte at least.
func (r *Reader) ReadArrayHeader() (int, error) {
	start := r.off
	n, err := r.header(KindArray)
	if err != nil {
		return 0, err
	}
	if n > r.Len() {
		r.off = start
		return 0, r.errorf("array of %d elements, only %d bytes left in the frame", n, r.Len()-1)
	}
	return n, nil
}

// ReadMapHeader reads a map header. The length is at most half the bytes left, since every entry takes two
// bytes at least.
func (r *Reader) ReadMapHeader() (int, error) {
	start := r.off
	n, err := r.header(KindMap)
	if err != nil {
		return 0, err
	}
	if n > r.Len()/2 {
		left := r.Len()
		r.off = start
		return 0, r.errorf("map of %d entries, only %d bytes left in the frame", n, left)
	}
	return n, nil
}

// Skip consumes one value of any kind, however nested, without recursion. A value nested deeper than the
// Reader's depth bound is an error, as is a length that runs past the frame.
func (r *Reader) Skip() error {
	var stack [MaxDepthLimit + 1]int
	stack[0] = 1
	sp := 1
	for sp > 0 {
		if stack[sp-1] == 0 {
			sp--
			continue
		}
		stack[sp-1]--
		if r.off >= len(r.b) {
			return r.truncated("a value", 1)
		}
		c := r.b[r.off]
		var children int
		switch k := KindOf(c); k {
		case KindInt:
			if _, err := r.ReadInt(); err != nil {
				return err
			}
		case KindNil, KindBool:
			r.off++
		case KindFloat:
			n := 4
			if c == 0xcb {
				n = 8
			}
			if r.Len() < 1+n {
				return r.truncated("a float", 1+n)
			}
			r.off += 1 + n
		case KindStr, KindBin:
			n, err := r.header(k)
			if err != nil {
				return err
			}
			if _, err := r.payload(k.String(), n); err != nil {
				return err
			}
		case KindExt:
			if err := r.skipExt(c); err != nil {
				return err
			}
		case KindArray:
			n, err := r.ReadArrayHeader()
			if err != nil {
				return err
			}
			children = n
		case KindMap:
			n, err := r.ReadMapHeader()
			if err != nil {
				return err
			}
			children = 2 * n
		default:
			return r.errorf("invalid byte 0x%02x", c)
		}
		if children > 0 {
			if sp > r.maxDepth {
				return r.errorf("values nested deeper than %d", r.maxDepth)
			}
			stack[sp] = children
			sp++
		}
	}
	return nil
}

func (r *Reader) skipExt(c byte) error {
	var n int
	switch c {
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16
		if r.Len() < 2 {
			return r.truncated("an ext", 2)
		}
		n = 1 << (c - 0xd4)
		r.off += 2
	default: // ext 8, 16, 32
		size := 1 << (c - 0xc7)
		u, err := r.uintN("an ext header", size)
		if err != nil {
			return err
		}
		if r.Len() < 1 {
			return r.truncated("an ext type", 1)
		}
		r.off++
		n = int(u)
	}
	_, err := r.payload("ext", n)
	return err
}

package kvwire

import (
	"encoding/binary"
	"errors"
	"io"
)

// growStep is the first allocation for a frame larger than the reader's buffer.
const growStep = 64 << 10

// FrameReader reads length-prefixed frames from a stream into one buffer it reuses from frame to frame, so a
// stream of similar chunks allocates once.
//
// A length prefix is a claim, not a fact. A prefix above the maximum is rejected before anything is read or
// allocated. Below it, a frame larger than the buffer grows the buffer as bytes arrive: doubling from 64 KiB
// until a quarter of the frame has arrived, then once to the exact size. So a peer must deliver a quarter of what
// it claims before the reader commits memory for all of it, a frame never costs more than twice its size plus
// 64 KiB in allocations, and the transient peak while the buffer grows stays under 1.5 times the frame.
type FrameReader struct {
	r    io.Reader
	max  int
	buf  []byte
	read int64
}

// NewFrameReader returns a reader of frames of at most maxFrameSize bytes (a non-positive value means the largest
// a 4-byte prefix allows).
func NewFrameReader(r io.Reader, maxFrameSize int) *FrameReader {
	if maxFrameSize <= 0 || maxFrameSize > maxFrameLimit {
		maxFrameSize = maxFrameLimit
	}
	return &FrameReader{r: r, max: maxFrameSize}
}

// BytesRead is the number of bytes consumed from the stream so far, length prefixes included.
func (f *FrameReader) BytesRead() int64 { return f.read }

// Next returns the body of the next frame. It is valid until the next call. A stream that ends cleanly between
// frames returns io.EOF, one that ends inside a frame io.ErrUnexpectedEOF; a prefix above the maximum returns a
// *FrameTooLargeError; other errors are the stream's.
func (f *FrameReader) Next() ([]byte, error) {
	var prefix [4]byte
	k, err := io.ReadFull(f.r, prefix[:])
	f.read += int64(k)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(prefix[:]))
	if n > f.max {
		return nil, &FrameTooLargeError{Size: int64(n), Max: int64(f.max)}
	}
	buf := f.buf[:cap(f.buf)]
	have := 0
	for have < n {
		if have == len(buf) {
			c := max(2*len(buf), growStep)
			if c > n || 4*have >= n {
				c = n
			}
			grown := make([]byte, c)
			copy(grown, buf[:have])
			buf = grown
		}
		k, err := io.ReadFull(f.r, buf[have:min(len(buf), n)])
		have += k
		f.read += int64(k)
		if err != nil {
			f.buf = buf
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	f.buf = buf
	return buf[:n], nil
}

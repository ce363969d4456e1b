package kvwire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// Defaults for FetchOptions' zero fields.
const (
	DefaultDialTimeout  = 5 * time.Second
	DefaultFetchTimeout = 5 * time.Minute
	DefaultFrameTimeout = 60 * time.Second
	DefaultMaxFrameSize = 1 << 30
)

// FetchOptions configures Fetch. The zero value (or nil) uses the defaults.
type FetchOptions struct {
	// DialTimeout bounds connecting.
	DialTimeout time.Duration
	// Timeout bounds the whole exchange, dial included. The context may end it sooner.
	Timeout time.Duration
	// FrameTimeout bounds the wait for each frame, from the end of the previous one (or the request) to its
	// last byte; it covers the server's compute time between chunks, so leave room for a prefill step. It also
	// bounds writing the request.
	FrameTimeout time.Duration
	// MaxFrameSize caps any frame received (a chunk carrying a whole layer of a long prompt can be large).
	MaxFrameSize int

	// Secret signs the request with the cluster secret (authentication extension). A server without the
	// extension ignores the proof.
	Secret []byte
	// Checksum asks for a CRC-32C per chunk (extension). Result.Checksummed reports whether the server agreed;
	// when it did, every chunk is verified before the handler sees it.
	Checksum bool

	// Buffer, when set, is the receive buffer; pass the same one to successive (not concurrent) fetches to
	// reuse its memory.
	Buffer *Buffer
	// DialContext replaces net.Dialer's (e.g. to pick the source interface).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock for signing (nil: time.Now). For tests.
	Now func() time.Time
}

// Buffer is a receive buffer that successive fetches can share.
type Buffer struct {
	b []byte
}

// Handler receives a stream as it arrives, so the caller can ingest while the rest is still on the wire. A
// nil function skips that kind of message. A non-nil error from a function aborts the fetch (closing the
// connection, which tells the server to stop) and Fetch returns that error.
//
// The *KVChunk and *ArraysState, and the Keys, Values and Data slices in them, point into the receive buffer
// and are valid only during the call: copy what must outlive it.
type Handler struct {
	OnHeader      func(*Header) error
	OnChunk       func(*KVChunk) error
	OnArraysState func(*ArraysState) error
}

// Result summarises a fetch. On error it holds what was received before the error.
type Result struct {
	Header        Header
	TotalTokens   int   // from the done message
	Chunks        int   // kv_chunk messages received
	TensorBytes   int64 // keys and values bytes received
	BytesReceived int64 // every byte read from the connection, length prefixes included
	Checksummed   bool  // the server acknowledged the checksum and every chunk was verified
}

// Fetch asks the server at addr for the KV of req and streams the answer to h. It returns after the done
// message, or with:
//   - a *RemoteError when the server sent an error message (400, 401, 500, 503, ...);
//   - an error matching ErrTimeout when the dial, the exchange or a frame ran past its deadline;
//   - an error matching ErrConnLost when the dial failed or the connection closed before done;
//   - an error matching ErrProtocol when the server's bytes are not a valid stream (including checksum
//     mismatches and unknown message types);
//   - the handler's error, or the context's when ctx was cancelled.
//
// req is not modified; Fetch signs and extends a copy.
func Fetch(ctx context.Context, addr string, req *Request, opts *FetchOptions, h Handler) (Result, error) {
	if req == nil {
		return Result{}, errors.New("kvwire: Fetch needs a request")
	}
	var o FetchOptions
	if opts != nil {
		o = *opts
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.DialTimeout, DefaultDialTimeout)
	def(&o.Timeout, DefaultFetchTimeout)
	def(&o.FrameTimeout, DefaultFrameTimeout)
	if o.MaxFrameSize <= 0 {
		o.MaxFrameSize = DefaultMaxFrameSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Buffer == nil {
		o.Buffer = new(Buffer)
	}
	f := &fetch{opts: &o}
	err := f.run(ctx, addr, req, h)
	return f.res, err
}

type fetch struct {
	opts     *FetchOptions
	ctx      context.Context
	deadline time.Time
	conn     net.Conn
	fr       *FrameReader
	res      Result
}

func (f *fetch) run(parent context.Context, addr string, req *Request, h Handler) (err error) {
	o := f.opts
	f.deadline = time.Now().Add(o.Timeout)
	ctx, cancel := context.WithDeadline(parent, f.deadline)
	defer cancel()
	if d, ok := ctx.Deadline(); ok && d.Before(f.deadline) {
		f.deadline = d
	}
	f.ctx = ctx

	r := *req
	r.Auth = nil
	if o.Checksum {
		r.Checksum = ChecksumCRC32C
	}
	if len(o.Secret) > 0 {
		if err := SignRequest(&r, o.Secret, o.Now()); err != nil {
			return err
		}
	}
	frame, err := appendFrame(nil, func(b []byte) ([]byte, error) { return AppendRequest(b, &r) })
	if err != nil {
		return err
	}

	dialCtx, dialCancel := context.WithTimeout(ctx, o.DialTimeout)
	dial := o.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(dialCtx, "tcp", addr)
	dialTimedOut := dialCtx.Err() == context.DeadlineExceeded
	dialCancel()
	if err != nil {
		if ctx.Err() == nil && dialTimedOut {
			return &TimeoutError{Op: "dialing " + addr, Err: err}
		}
		return f.classify(err, "dialing "+addr)
	}
	f.conn = conn
	defer conn.Close()
	// Cancelling ctx (or its deadline) interrupts whatever read or write is in progress.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}

	f.setDeadline(conn.SetWriteDeadline)
	if _, err := conn.Write(frame); err != nil {
		return f.classify(err, "sending the request")
	}

	// A small read buffer: it holds the small frames whole, and a chunk's body (read straight into the frame
	// buffer once the read buffer is empty) is copied through it only for its first few KiB.
	f.fr = NewFrameReader(bufio.NewReaderSize(conn, 8<<10), o.MaxFrameSize)
	f.fr.buf = o.Buffer.b
	defer func() {
		o.Buffer.b = f.fr.buf
		f.res.BytesReceived = f.fr.BytesRead()
	}()

	body, err := f.next("header")
	if err != nil {
		return err
	}
	typ, found, err := messageType(body)
	if err == nil && found {
		// A server that fails before its header may send the error message alone.
		if MessageType(typ) == TypeError {
			var m Error
			if err := decodeError(body, &m); err != nil {
				return err
			}
			return &RemoteError{Code: m.Code, Message: m.Message}
		}
		return protocolErrorf("expected the header, got a %q message", clip(typ))
	}
	hdr, err := DecodeHeader(body)
	if err != nil {
		return err
	}
	if hdr.RequestID != "" && hdr.RequestID != r.RequestID {
		return protocolErrorf("header is for request %q, not %q", clip([]byte(hdr.RequestID)), r.RequestID)
	}
	f.res.Header = hdr
	verify := hdr.Checksum == ChecksumCRC32C
	if h.OnHeader != nil {
		if err := h.OnHeader(&f.res.Header); err != nil {
			return err
		}
	}

	var chunk KVChunk
	for {
		body, err := f.next("message")
		if err != nil {
			return err
		}
		typ, found, err := messageType(body)
		if err != nil {
			return err
		}
		if !found {
			return protocolErrorf("message has no %q", keyType)
		}
		switch MessageType(typ) {
		case TypeKVChunk:
			if err := decodeKVChunk(body, &chunk); err != nil {
				return err
			}
			if chunk.LayerIdx >= hdr.NumLayers {
				return protocolErrorf("kv_chunk for layer %d, but the header has %d layers", chunk.LayerIdx, hdr.NumLayers)
			}
			if verify {
				if !chunk.HasCRC32C {
					return protocolErrorf("kv_chunk for layer %d has no checksum though the header promised one", chunk.LayerIdx)
				}
				if got := ChunkCRC32C(chunk.Keys, chunk.Values); got != chunk.CRC32C {
					return &ChecksumError{Type: TypeKVChunk, LayerIdx: chunk.LayerIdx, Want: chunk.CRC32C, Got: got}
				}
			}
			f.res.Chunks++
			f.res.TensorBytes += int64(len(chunk.Keys) + len(chunk.Values))
			if h.OnChunk != nil {
				if err := h.OnChunk(&chunk); err != nil {
					return err
				}
			}
		case TypeArraysState:
			var a ArraysState
			if err := decodeArraysState(body, &a); err != nil {
				return err
			}
			if a.LayerIdx >= hdr.NumLayers {
				return protocolErrorf("arrays_state for layer %d, but the header has %d layers", a.LayerIdx, hdr.NumLayers)
			}
			if verify {
				var got uint32
				for i := range a.Arrays {
					got = crc32Update(got, a.Arrays[i].Data)
				}
				if !a.HasCRC32C {
					return protocolErrorf("arrays_state for layer %d has no checksum though the header promised one", a.LayerIdx)
				}
				if got != a.CRC32C {
					return &ChecksumError{Type: TypeArraysState, LayerIdx: a.LayerIdx, Want: a.CRC32C, Got: got}
				}
			}
			if h.OnArraysState != nil {
				if err := h.OnArraysState(&a); err != nil {
					return err
				}
			}
		case TypeDone:
			var m Done
			if err := decodeDone(body, &m); err != nil {
				return err
			}
			f.res.TotalTokens = m.TotalTokens
			f.res.Checksummed = verify
			return nil
		case TypeError:
			var m Error
			if err := decodeError(body, &m); err != nil {
				return err
			}
			return &RemoteError{Code: m.Code, Message: m.Message}
		default:
			return &UnknownTypeError{Type: clip(typ)}
		}
	}
}

// setDeadline sets the frame deadline with set, unless ctx has ended: cancelling ctx sets a deadline in the past,
// and one set after it would undo that, leaving the fetch to wait out its frame timeout.
func (f *fetch) setDeadline(set func(time.Time) error) {
	set(f.frameDeadline())
	if f.ctx.Err() != nil {
		set(time.Unix(1, 0))
	}
}

func (f *fetch) frameDeadline() time.Time {
	d := time.Now().Add(f.opts.FrameTimeout)
	if f.deadline.Before(d) {
		return f.deadline
	}
	return d
}

// next reads the next frame within the frame deadline.
func (f *fetch) next(what string) ([]byte, error) {
	f.setDeadline(f.conn.SetReadDeadline)
	body, err := f.fr.Next()
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &ConnLostError{Op: "reading the " + what + ": server closed the connection before done", Err: err}
		}
		return nil, f.classify(err, "reading the "+what)
	}
	return body, nil
}

// classify turns a network error into the caller's context error, a *TimeoutError or a *ConnLostError.
func (f *fetch) classify(err error, op string) error {
	if errors.Is(err, ErrProtocol) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrConnLost) {
		return err
	}
	if ctxErr := f.ctx.Err(); ctxErr != nil {
		if ctxErr == context.DeadlineExceeded {
			return &TimeoutError{Op: fmt.Sprintf("%s: exchange deadline", op), Err: ctxErr}
		}
		return fmt.Errorf("kvwire: %s: %w", op, context.Cause(f.ctx))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if !time.Now().Before(f.deadline) {
			return &TimeoutError{Op: fmt.Sprintf("%s: exchange deadline", op), Err: err}
		}
		return &TimeoutError{Op: fmt.Sprintf("%s: frame deadline of %s", op, f.opts.FrameTimeout), Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &TimeoutError{Op: op, Err: err}
	}
	return &ConnLostError{Op: op, Err: err}
}

package kvwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Writer streams one job's response. The engine calls its methods from its compute loop, in this order:
// Header once, then any number of Chunk and ArraysState calls, then Done or Error once. (Error may also come
// first: the writer then sends exo's error header before it.)
//
// Sends are asynchronous so compute overlaps transfer: each call queues its frame and returns; the connection's
// goroutine writes queued frames in order. The queue is bounded in tensor bytes (ServerConfig.SendBuffer):
// Chunk blocks while the bound is reached, which is the backpressure that keeps a slow client from growing the
// engine's memory. A frame larger than the bound is still accepted when the queue is empty.
//
// Ownership: a chunk's Keys and Values belong to the writer from the call to Chunk until the writer calls the
// chunk's release function, which it does exactly once: after the bytes are written, when the job fails, or
// immediately when Chunk returns an error. Until then the engine must not modify or reuse them. The bytes go
// from those buffers to the socket without a copy.
//
// Failure: when the client leaves, a write fails or stalls past WriteTimeout, the job exceeds MaxJobDuration, or
// the server is closed, every later call returns an error wrapping ErrJobAborted (and the cause), the job's
// Context is cancelled, and queued chunks are released. Err reports the cause without blocking.
//
// Writer methods are not safe for concurrent use with each other: call them from one goroutine.
type Writer struct {
	job      *Job
	conn     net.Conn
	cancel   context.CancelCauseFunc
	checksum Checksum
	timeout  time.Duration
	limit    int64

	headerSent bool // touched only by the engine's goroutine
	// beforeFinal, when set, runs on the send loop just before the final frame is written.
	beforeFinal func()
	numLayers   int

	mu       sync.Mutex
	queue    []sendItem
	queued   int64
	ended    bool  // Done or Error was queued
	complete bool  // the final frame was written
	err      error // why the job failed
	work     chan struct{}
	space    chan struct{}
	failed   chan struct{}
	finished chan struct{}
	scratch  []byte     // chunk header scratch, used by the send loop only
	batch    []sendItem // the items being written, used by the send loop only
	iov      [][]byte   // their pieces, used by the send loop only
}

type sendItem struct {
	frame   []byte // a pre-encoded frame, or nil for a chunk
	chunk   KVChunk
	release func(KVChunk)
	size    int64
	final   bool

	// Where the chunk's frame pieces lie in the send loop's scratch while it is written (see appendChunkParts).
	partsAt, keysAt, valuesAt, partsEnd int
}

func newWriter(job *Job, conn net.Conn, cancel context.CancelCauseFunc, checksum Checksum, timeout time.Duration,
	limit int64) *Writer {
	return &Writer{
		job: job, conn: conn, cancel: cancel, checksum: checksum, timeout: timeout, limit: limit,
		work:     make(chan struct{}, 1),
		space:    make(chan struct{}, 1),
		failed:   make(chan struct{}),
		finished: make(chan struct{}),
	}
}

// Checksum is the checksum negotiated with the client, which the writer computes for every chunk and
// arrays_state (ChecksumNone when the client did not ask, or the server disables it).
func (w *Writer) Checksum() Checksum { return w.checksum }

// Err returns nil while the job can proceed, and the cause of its failure afterwards.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Queued is the number of tensor bytes queued and not yet written.
func (w *Writer) Queued() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queued
}

// Finished is closed when the writer is through: the final frame was written and the connection closed, or the
// job failed. Err then tells which.
func (w *Writer) Finished() <-chan struct{} { return w.finished }

func (w *Writer) abortedErr() error {
	return fmt.Errorf("%w: %w", ErrJobAborted, w.err)
}

// Header queues the header. Empty RequestID and ModelID default to the request's; the checksum
// acknowledgement is the writer's to set.
func (w *Writer) Header(h Header) error {
	if w.headerSent {
		return errors.New("kvwire: Writer.Header called twice")
	}
	if h.RequestID == "" {
		h.RequestID = w.job.Request.RequestID
	}
	if h.ModelID == "" {
		h.ModelID = w.job.Request.ModelID
	}
	h.Checksum = w.checksum
	frame, err := appendFrame(nil, func(b []byte) ([]byte, error) { return AppendHeader(b, &h) })
	if err != nil {
		return err
	}
	if err := w.enqueue(sendItem{frame: frame}, false); err != nil {
		return err
	}
	w.headerSent, w.numLayers = true, h.NumLayers
	return nil
}

// Chunk queues a kv_chunk and returns without waiting for it to be written, unless the queue is full, in which
// case it blocks until there is room or the job fails. release (which may be nil) gets the chunk back once the
// writer is done with its buffers; it runs on the connection's goroutine (or on the caller's, when Chunk
// fails), so it must be quick and safe to call from there — an engine whose buffers belong to its compute loop
// typically sends them back on a channel. The chunk's checksum fields are the writer's to set.
func (w *Writer) Chunk(c KVChunk, release func(KVChunk)) error {
	fail := func(err error) error {
		if release != nil {
			release(c)
		}
		return err
	}
	if !w.headerSent {
		return fail(errors.New("kvwire: Writer.Chunk before Header"))
	}
	if err := c.Check(); err != nil {
		var pe *ProtocolError
		errors.As(err, &pe)
		return fail(errors.New("kvwire: invalid chunk: " + pe.Msg))
	}
	if w.numLayers > 0 && c.LayerIdx >= w.numLayers {
		return fail(fmt.Errorf("kvwire: chunk layer_idx %d but the header has %d layers", c.LayerIdx, w.numLayers))
	}
	c.CRC32C, c.HasCRC32C = 0, false
	err := w.enqueue(sendItem{chunk: c, release: release, size: int64(len(c.Keys) + len(c.Values))}, false)
	if err != nil {
		return fail(err)
	}
	return nil
}

// ArraysState queues the state arrays of a recurrent layer. Unlike Chunk it copies the arrays (they are small),
// so the engine keeps ownership of a's buffers.
func (w *Writer) ArraysState(a ArraysState) error {
	if !w.headerSent {
		return errors.New("kvwire: Writer.ArraysState before Header")
	}
	a.HasCRC32C = w.checksum == ChecksumCRC32C
	if a.HasCRC32C {
		a.CRC32C = 0
		for i := range a.Arrays {
			a.CRC32C = crc32Update(a.CRC32C, a.Arrays[i].Data)
		}
	}
	frame, err := appendFrame(nil, func(b []byte) ([]byte, error) { return appendArraysState(b, &a) })
	if err != nil {
		return err
	}
	return w.enqueue(sendItem{frame: frame, size: int64(len(frame))}, false)
}

// Done queues the final done message. The engine need not wait for it to be written: Finished and Err tell the
// outcome.
func (w *Writer) Done(totalTokens int) error {
	if !w.headerSent {
		return errors.New("kvwire: Writer.Done before Header")
	}
	frame, err := appendFrame(nil, func(b []byte) ([]byte, error) {
		return AppendMessage(b, &Done{TotalTokens: totalTokens})
	})
	if err != nil {
		return err
	}
	return w.enqueue(sendItem{frame: frame, final: true}, true)
}

// Error queues a final error message after whatever is already queued. Called before Header, it sends exo's
// error header (no layers, float32) first.
func (w *Writer) Error(code int, message string) error {
	var frame []byte
	var err error
	if !w.headerSent {
		h := Header{RequestID: w.job.Request.RequestID, ModelID: w.job.Request.ModelID, DType: Float32,
			StartPos: w.job.Request.StartPos}
		frame, err = appendFrame(nil, func(b []byte) ([]byte, error) { return AppendHeader(b, &h) })
		if err != nil {
			return err
		}
	}
	frame, err = appendFrame(frame, func(b []byte) ([]byte, error) {
		return AppendMessage(b, &Error{Code: code, Message: message})
	})
	if err != nil {
		return err
	}
	if err := w.enqueue(sendItem{frame: frame, final: true}, true); err != nil {
		return err
	}
	w.headerSent = true
	return nil
}

// enqueue adds an item, waiting for room when the queue holds SendBuffer bytes already. Final items (done,
// error) never wait: they carry no tensor bytes.
func (w *Writer) enqueue(it sendItem, final bool) error {
	for {
		w.mu.Lock()
		switch {
		case w.err != nil:
			err := w.abortedErr()
			w.mu.Unlock()
			return err
		case w.ended:
			w.mu.Unlock()
			return ErrWriterClosed
		case it.size == 0 || w.queued == 0 || w.queued+it.size <= w.limit:
			w.queue = append(w.queue, it)
			w.queued += it.size
			w.ended = final
			w.mu.Unlock()
			select {
			case w.work <- struct{}{}:
			default:
			}
			return nil
		}
		w.mu.Unlock()
		select {
		case <-w.space:
		case <-w.failed:
		}
	}
}

// fail records the first failure, wakes everything that waits on the writer, cancels the job's context and
// closes the connection (which unblocks a write in progress). The send loop then releases what is queued.
func (w *Writer) fail(cause error) {
	w.mu.Lock()
	if w.err != nil || w.complete {
		w.mu.Unlock()
		return
	}
	w.err = cause
	// Cancel before anyone can see the failure: the send loop wakes on failed and, on its way out, cancels the
	// context without a cause, which would otherwise win the race and hide why the job ended.
	w.cancel(cause)
	close(w.failed)
	w.mu.Unlock()
	w.conn.Close()
}

// watchClient reads the connection after the request: a client sends nothing more, so any read result means it
// is gone (EOF or error) or broke the protocol (bytes).
func (w *Writer) watchClient(r io.Reader) {
	var b [1]byte
	n, err := r.Read(b[:])
	switch {
	case n > 0:
		w.fail(&ProtocolError{Msg: "client sent bytes after its request"})
	case err != nil:
		w.fail(&ConnLostError{Op: "client went away", Err: err})
	}
}

// sendLoop writes queued items in order until the final one, then closes the connection. It returns the
// failure, if any. It runs on the connection's goroutine.
func (w *Writer) sendLoop() error {
	defer close(w.finished)
	defer w.cancel(nil)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && w.err == nil {
			w.mu.Unlock()
			select {
			case <-w.work:
			case <-w.failed:
			}
			w.mu.Lock()
		}
		if w.err != nil {
			queue := w.queue
			w.queue, w.queued = nil, 0
			err := w.err
			w.mu.Unlock()
			for _, it := range queue {
				if it.release != nil {
					it.release(it.chunk)
				}
			}
			return err
		}
		// Everything queued goes out in one writev, up to a bound: a chunk per syscall cost a wakeup and a
		// syscall per chunk, and the peer's reads a partial buffer at every frame boundary.
		n, bytes := 0, 0
		for n < len(w.queue) && n < maxBatchItems {
			b := w.queue[n].wireSize()
			if n > 0 && bytes+b > maxBatchBytes {
				break
			}
			bytes += b
			n++
			if w.queue[n-1].final {
				break
			}
		}
		batch := append(w.batch[:0], w.queue[:n]...)
		clear(w.queue[:n])
		w.queue = w.queue[n:]
		w.mu.Unlock()

		final := batch[len(batch)-1].final
		if final && w.beforeFinal != nil {
			w.beforeFinal()
		}
		err := w.write(batch)
		var size int64
		for i := range batch {
			if batch[i].release != nil {
				batch[i].release(batch[i].chunk)
			}
			size += batch[i].size
		}
		clear(batch)
		w.batch = batch[:0]
		w.mu.Lock()
		w.queued -= size
		if err == nil && final {
			w.complete = true
		}
		w.mu.Unlock()
		select {
		case w.space <- struct{}{}:
		default:
		}
		if err != nil {
			w.fail(classifyWriteErr(err))
			continue // release whatever is queued, then return
		}
		if final {
			closeWrite(w.conn)
			w.conn.Close()
			return nil
		}
	}
}

// A batch the send loop writes at once is at most maxBatchItems items and, beyond its first item,
// maxBatchBytes bytes, so a slow client still gets a deadline per few MiB and buffers come back to the engine
// as they are written.
const (
	maxBatchItems = 64
	maxBatchBytes = 8 << 20
)

// wireSize is about how many bytes the item puts on the wire.
func (it *sendItem) wireSize() int {
	if it.frame != nil {
		return len(it.frame)
	}
	return len(it.chunk.Keys) + len(it.chunk.Values) + 128
}

// write writes a batch of items with one writev (several when it has more than the kernel takes at once), the
// tensor bytes straight from the engine's buffers, within one WriteTimeout.
func (w *Writer) write(batch []sendItem) error {
	// The chunks' headers go into one scratch buffer first (it may move as it grows), then the pieces are
	// sliced out of it.
	scratch := w.scratch[:0]
	for i := range batch {
		it := &batch[i]
		if it.frame != nil {
			continue
		}
		c := &it.chunk
		if w.checksum == ChecksumCRC32C {
			c.CRC32C, c.HasCRC32C = ChunkCRC32C(c.Keys, c.Values), true
		}
		start := len(scratch)
		var err error
		if scratch, it.keysAt, it.valuesAt, err = appendChunkParts(scratch, c); err != nil {
			return err
		}
		it.partsAt, it.partsEnd = start, len(scratch)
	}
	iov := w.iov[:0]
	for i := range batch {
		it := &batch[i]
		if it.frame != nil {
			iov = append(iov, it.frame)
			continue
		}
		iov = append(iov, scratch[it.partsAt:it.keysAt], it.chunk.Keys, scratch[it.keysAt:it.valuesAt], it.chunk.Values)
		if it.valuesAt < it.partsEnd {
			iov = append(iov, scratch[it.valuesAt:it.partsEnd])
		}
	}
	w.scratch = scratch[:0]
	w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
	bufs := net.Buffers(iov)
	_, err := bufs.WriteTo(w.conn)
	clear(iov)
	w.iov = iov[:0]
	return err
}

func classifyWriteErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &TimeoutError{Op: "writing to the client (stalled)", Err: err}
	}
	return &ConnLostError{Op: "writing to the client", Err: err}
}

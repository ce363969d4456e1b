package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// The render stage of a local stream: streamWriter writes the engine's events in the request's dialect as
// they come, batched into one chunk and one flush per batch.

// streamWriter streams a run in its API's encoding. It is the response's body stream: fasthttp calls WriteTo
// on the connection's goroutine after the handler returned (so it must not touch the fiber context), and each
// batch it writes goes out as one chunk, flushed. Writing to the connection directly, rather than through
// SetBodyStreamWriter's pipe (a second goroutine, a copy, and a chunk and a flush every 4 KiB), leaves one
// chunk and one flush per batch.
type streamWriter struct {
	s     *Server
	enc   encoder
	run   *run
	first engine.Event
	ctx   context.Context
	conn  interface{ SetWriteDeadline(time.Time) error }
	done  func()
	// heartbeat is the interval of keep-alive comments on an idle stream.
	heartbeat time.Duration

	buf []byte
	// evs are the events taken from the run; those from next on are not rendered yet. closed: the run had
	// closed when they were taken.
	evs     []engine.Event
	next    int
	closed  bool
	ticker  *time.Ticker // started with the body
	begun   bool         // the first event is rendered
	over    bool         // the last batch is rendered
	pending []byte       // for Read: what fill rendered and Read has not returned yet
	cleanup sync.Once
}

var _ fasthttp.BodyWriterTo = (*streamWriter)(nil)

// SupportsBodyWriteTo tells fasthttp that WriteTo may replace Read: both write the same batches.
func (w *streamWriter) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the stream to dst, a batch per Write: the first event alone, then whatever the run has ready
// each time the last write returns. A failed write means the client is gone, which cancels the generation.
func (w *streamWriter) WriteTo(dst io.Writer) (int64, error) {
	defer w.Close()
	var n int64
	for !w.over {
		w.over = w.fill()
		w.extendDeadline()
		m, err := dst.Write(w.buf)
		w.buf = w.buf[:0]
		n += int64(m)
		if err != nil {
			w.run.cancel()
			return n, err
		}
	}
	return n, nil
}

// Read is WriteTo for a caller that reads the body instead.
func (w *streamWriter) Read(p []byte) (int, error) {
	for len(w.pending) == 0 {
		if w.over {
			return 0, io.EOF
		}
		w.buf = w.buf[:0]
		w.over = w.fill()
		w.extendDeadline()
		w.pending = w.buf
	}
	n := copy(p, w.pending)
	w.pending = w.pending[n:]
	return n, nil
}

// Close ends the stream: fasthttp calls it once the body is written, or instead, when the response could not
// be sent (the client left before its headers). It stops the run and records the request.
func (w *streamWriter) Close() error {
	w.cleanup.Do(func() {
		if w.ticker != nil {
			w.ticker.Stop()
		}
		w.done()
		drain(w.run)
	})
	return nil
}

// fill renders the next batch into w.buf: the stream's start and its first event, or else the events the run
// has ready, waiting for one (or for a heartbeat) when none is, up to 64 KiB. It reports whether the stream is
// over (every choice ended, or it failed).
func (w *streamWriter) fill() bool {
	if !w.begun {
		w.begun = true
		w.ticker = time.NewTicker(w.heartbeat)
		w.buf = w.enc.start(w.buf)
		return w.handle(w.first)
	}
	if w.next == len(w.evs) {
		if w.closed {
			w.end()
			return true
		}
		evs, closed, heartbeat := w.run.take(w.evs, w.ticker.C)
		if heartbeat {
			w.buf = w.enc.heartbeat(w.buf)
			return false
		}
		w.evs, w.next, w.closed = evs, 0, closed
	}
	for ; w.next < len(w.evs) && len(w.buf) < 64<<10; w.next++ {
		if w.handle(w.evs[w.next]) {
			return true
		}
	}
	if w.next == len(w.evs) && w.closed {
		w.end()
		return true
	}
	return false
}

// handle renders one event; it reports whether the stream is over (every choice ended, or one failed).
func (w *streamWriter) handle(ev engine.Event) bool {
	if ev.Final != nil {
		return w.final(ev)
	}
	w.buf = w.enc.event(w.buf, ev)
	return false
}

// extendDeadline gives the next write WriteTimeout: it bounds a stalled client, not a long stream.
func (w *streamWriter) extendDeadline() {
	if w.conn != nil && w.s.cfg.WriteTimeout > 0 {
		_ = w.conn.SetWriteDeadline(time.Now().Add(w.s.cfg.WriteTimeout))
	}
}

// end handles a run that closed without a final event: an engine failure or a timeout.
func (w *streamWriter) end() {
	var apiErr *openai.Error
	switch err := w.run.err; {
	case errors.Is(w.ctx.Err(), context.DeadlineExceeded):
		apiErr = toAPIError(context.DeadlineExceeded)
	case errors.As(err, &apiErr):
	case err != nil:
		apiErr = openai.FromEngine(err)
	default:
		apiErr = openai.Internal("the engine ended the stream without a final event")
	}
	w.buf = w.enc.fail(w.buf, apiErr)
}

// final renders a choice's end; it reports whether the stream is over: every choice ended, or one failed.
func (w *streamWriter) final(ev engine.Event) bool {
	if apiErr := openai.FinalError(ev.Final); apiErr != nil {
		if errors.Is(w.ctx.Err(), context.DeadlineExceeded) {
			apiErr = toAPIError(context.DeadlineExceeded)
		}
		w.buf = w.enc.fail(w.buf, apiErr)
		return true
	}
	var over bool
	w.buf, over = w.enc.final(w.buf, ev.Choice, ev.Final)
	return over
}

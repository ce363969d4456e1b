package pipeline

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// The render stage: a whole answer is rendered at once (sendAnswer); a local stream's writer renders the
// engine's events in the request's dialect as they come, batched into one chunk and one flush per batch. Both
// carry the gateway's phases in a Server-Timing header. What the client got is noted on the request, for its
// observers.

// answerBufs are buffers to render whole answers in: the response copies the answer into its own pooled body
// buffer, so the rendering need not allocate.
var answerBufs = sync.Pool{New: func() any { return new([]byte) }}

// sendAnswer renders a whole answer as the response's body.
func sendAnswer(c *fiber.Ctx, d apicore.Dialect, m apicore.Meta, rs apicore.Results) {
	buf := answerBufs.Get().(*[]byte)
	*buf = d.Answer((*buf)[:0], m, rs)
	c.Response().SetBody(*buf)
	if cap(*buf) <= 64<<10 { // a rare large answer is not kept
		answerBufs.Put(buf)
	}
}

// streamWriter streams a run in its API's encoding. It is the response's body stream: fasthttp calls WriteTo
// on the connection's goroutine after the handler returned (so it must not touch the fiber context), and each
// batch it writes goes out as one chunk, flushed. Writing to the connection directly, rather than through
// SetBodyStreamWriter's pipe (a second goroutine, a copy, and a chunk and a flush every 4 KiB), leaves one
// chunk and one flush per batch.
type streamWriter struct {
	enc   apicore.Encoder
	run   *run
	first engine.Event
	ctx   context.Context
	conn  interface{ SetWriteDeadline(time.Time) error }
	// writeTimeout bounds each write (0: none).
	writeTimeout time.Duration
	// req is the request: the writer notes on it what the client got, and finishes it when the stream ends.
	req  *request
	done func()
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
		// The generation has returned: every final its observers see was seen.
		w.req.p.finished(w.req)
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
		w.buf = w.enc.Start(w.buf)
		return w.handle(w.first)
	}
	if w.next == len(w.evs) {
		if w.closed {
			w.end()
			return true
		}
		evs, closed, heartbeat := w.run.take(w.evs, w.ticker.C)
		if heartbeat {
			w.buf = w.enc.Heartbeat(w.buf)
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
	if ev.Token != nil && w.req.answer.firstByte == 0 {
		w.req.answer.firstByte = time.Since(w.req.arrived)
	}
	w.buf = w.enc.Event(w.buf, ev)
	return false
}

// extendDeadline gives the next write WriteTimeout: it bounds a stalled client, not a long stream.
func (w *streamWriter) extendDeadline() {
	if w.conn != nil && w.writeTimeout > 0 {
		_ = w.conn.SetWriteDeadline(time.Now().Add(w.writeTimeout))
	}
}

// end handles a run that closed without a final event: an engine failure or a timeout.
func (w *streamWriter) end() {
	var apiErr *apicore.Error
	switch err := w.run.err; {
	case errors.Is(w.ctx.Err(), context.DeadlineExceeded):
		apiErr = apicore.ErrorOf(context.DeadlineExceeded)
	case errors.As(err, &apiErr):
	case err != nil:
		apiErr = apicore.FromEngine(err)
	default:
		apiErr = apicore.Internal("the engine ended the stream without a final event")
	}
	w.fail(apiErr)
}

// fail renders an error that ends the stream.
func (w *streamWriter) fail(err *apicore.Error) {
	if w.req.answer.failure == nil {
		w.req.answer.failure = err
	}
	w.buf = w.enc.Fail(w.buf, err)
}

// final renders a choice's end; it reports whether the stream is over: every choice ended, or one failed.
func (w *streamWriter) final(ev engine.Event) bool {
	if apiErr := apicore.FinalError(ev.Final); apiErr != nil {
		if errors.Is(w.ctx.Err(), context.DeadlineExceeded) {
			apiErr = apicore.ErrorOf(context.DeadlineExceeded)
		}
		w.fail(apiErr)
		return true
	}
	a := &w.req.answer
	if a.finals == 0 {
		t := ev.Final.Timings
		a.timings = &t
		a.usage.PromptTokens, a.usage.CachedTokens = ev.Final.Usage.PromptTokens, ev.Final.Usage.CachedTokens
	}
	a.finals++
	a.usage.CompletionTokens += ev.Final.Usage.CompletionTokens
	var over bool
	w.buf, over = w.enc.Final(w.buf, ev.Choice, ev.Final)
	a.complete = over
	return over
}

// Server-Timing (W3C Server Timing): the trace of a request in a header browsers' developer tools and curl -v
// show. Its metric names are the timings object's phases:
//
//	admission  waiting for an admission slot on the gateway that ran the generation
//	route      tokenizing for the router and its decision, on the gateway the client called
//	forward    from sending the hop to the owner's headers (on the gateway that forwarded it)
//	queue      waiting in the engine's queue
//	prefill    prompt processing, local or remote
//	kv_wait    a remote prefill: until its first KV bytes
//	kv_transfer, kv_ingest  a remote prefill: until its last byte; writing the KV into the cache
//	ttft       from arrival to the first token
//	decode     from the first token to the last
//	total      the engine's whole generation
//
// A whole answer carries them all. A stream's headers go out with its first event, before the engine's
// timings exist (HTTP trailers would carry them, but browsers drop them and fasthttp's stream writer cannot
// send them): it carries what is known then, admission, route, forward and first_event (from arrival to the
// engine's first event), and the engine's phases come in the stream's last event's timings.

// appendServerTiming appends one metric, in milliseconds.
func appendServerTiming(dst []byte, name string, d time.Duration) []byte {
	if len(dst) > 0 {
		dst = append(dst, ", "...)
	}
	dst = append(dst, name...)
	dst = append(dst, ";dur="...)
	return appendMillis(dst, d)
}

// appendMillis appends d in milliseconds to the microsecond, without trailing zeros (1.5, 0.02, 40): integer
// arithmetic, several times cheaper than formatting a float.
func appendMillis(dst []byte, d time.Duration) []byte {
	us := d.Microseconds()
	if us < 0 {
		dst, us = append(dst, '-'), -us
	}
	dst = strconv.AppendInt(dst, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return dst
	}
	digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for digits[n-1] == '0' {
		n--
	}
	dst = append(dst, '.')
	return append(dst, digits[:n]...)
}

// gatewayTiming is the gateway's own phases of a generation it runs.
func gatewayTiming(dst []byte, route *apicore.Route) []byte {
	dst = appendServerTiming(dst, "admission", route.Admission)
	if !route.Forwarded {
		dst = appendServerTiming(dst, "route", route.Time)
	}
	return dst
}

// engineTiming appends the engine's phases of a finished generation.
func engineTiming(dst []byte, t engine.Timings) []byte {
	dst = appendServerTiming(dst, "queue", t.Queue)
	dst = appendServerTiming(dst, "prefill", t.Prefill)
	if r := t.Remote; r != nil {
		dst = appendServerTiming(dst, "kv_wait", r.Wait)
		dst = appendServerTiming(dst, "kv_transfer", r.Transfer)
		dst = appendServerTiming(dst, "kv_ingest", r.Ingest)
	}
	dst = appendServerTiming(dst, "ttft", t.FirstToken)
	dst = appendServerTiming(dst, "decode", t.Decode)
	return appendServerTiming(dst, "total", t.Total)
}

// setServerTiming sets the header, after the metrics of a hop the owner sent (theirs first, then this
// gateway's).
func setServerTiming(c *fiber.Ctx, own []byte) {
	if prev := c.Response().Header.Peek(headerServerTiming); len(prev) > 0 {
		own = append(append(append([]byte{}, prev...), ", "...), own...)
	}
	c.Response().Header.SetBytesV(headerServerTiming, own)
}

const headerServerTiming = "Server-Timing"

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/locals"
)

// The gateway reads request bodies itself (fasthttp streams them: Config.StreamRequestBody), so that it can
// bound the body bytes it holds at once. Without that, fasthttp reads every body whole before any handler
// runs, and a burst of large prompts is held in full however many arrive (eight 15 MB prompts take the
// gateway from 24 MB to 511 MB). Bodies up to smallBody are read at once; a larger one first reserves its
// size in a byte budget (Config.MaxBodyBytesInFlight), waiting up to QueueTimeout (429 beyond), and gives
// it back once the engine has taken the request or the request ended.

// smallBody is the size below which a body is read without the budget: what fasthttp reads ahead anyway.
const smallBody = 8 << 10

// bodyReader is the middleware that reads request bodies under the byte budget (Config.BodyLimit,
// MaxBodyBytesInFlight, QueueTimeout).
type bodyReader struct {
	limit        int
	queueTimeout time.Duration
	budget       *byteBudget
	bufs         *bufferPool
}

func newBodyReader(cfg Config) *bodyReader {
	return &bodyReader{limit: cfg.BodyLimit, queueTimeout: cfg.QueueTimeout, budget: newByteBudget(cfg.MaxBodyBytesInFlight),
		bufs: &bufferPool{max: cfg.MaxBodyBytesInFlight}}
}

// read reads the body under the budget, and gives it back when the handler is done (or calls locals.ReleaseBody).
func (b *bodyReader) read(c *fiber.Ctx) error {
	req := c.Request()
	if !req.IsBodyStream() {
		return c.Next()
	}
	n := req.Header.ContentLength() // -1: chunked, size unknown
	if n > b.limit {
		c.Context().SetConnectionClose() // do not read megabytes to throw them away
		return fiber.ErrRequestEntityTooLarge
	}
	weight := int64(n)
	if n < 0 {
		weight = int64(b.limit)
	}
	release := func() {}
	if n < 0 || n > smallBody {
		ctx, cancel := context.WithTimeout(c.Context(), b.queueTimeout)
		err := b.budget.acquire(ctx, weight)
		cancel()
		if err != nil {
			c.Context().SetConnectionClose()
			return apicore.TooManyRequests("the server holds as many request bytes as it may; retry later")
		}
		var once sync.Once
		release = func() { once.Do(func() { b.budget.release(weight) }) }
	}
	defer release()
	var body []byte
	var err error
	if n > smallBody {
		// Large bodies are read into buffers that come back when the request is done with them: a burst of them
		// then costs the budget, not the budget again in garbage waiting for the collector.
		buf := b.bufs.get(n)
		body = buf[:n]
		if k, rerr := io.ReadFull(req.BodyStream(), body); rerr != nil {
			err = fmt.Errorf("after %d of %d bytes: %w", k, n, rerr)
			b.bufs.put(buf)
		} else {
			release = giveBack(b.bufs, buf, release)
		}
	} else {
		body, err = readAllLimit(req.BodyStream(), n, b.limit)
	}
	if errors.Is(err, errBodyTooLarge) {
		c.Context().SetConnectionClose()
		return fiber.ErrRequestEntityTooLarge
	}
	if err != nil {
		c.Context().SetConnectionClose()
		return apicore.BadRequest("", "could not read the request body: %v", err)
	}
	req.SetBodyRaw(body)
	var once sync.Once
	done := func() {
		once.Do(func() {
			// The handler parsed the body into its own strings and the engine has the request: the bytes go
			// back. Nothing may keep a slice of the body past this point (encoding/json copies what it decodes).
			req.SetBodyRaw(nil)
			release()
		})
	}
	locals.SetBodyRelease(c, done)
	defer done()
	return c.Next()
}

// giveBack returns a release that puts a large body's buffer back in the pool and only then gives its bytes
// back to the budget (release), so that the body the budget admits next finds the buffer. The other order let
// the next body allocate a buffer of its own in the gap; the pool then kept one of the two and dropped the
// other for the collector, so a burst of large bodies grew the gateway by a body at random (the
// intermittent failures of TestPromptsOverTheContextAreCheap: +16, +31, +47 or +62 MB for 15.5 MB bodies).
func giveBack(pool *bufferPool, buf []byte, release func()) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			pool.put(buf)
			release()
		})
	}
}

var errBodyTooLarge = errors.New("the request body is too large")

// readAllLimit reads a body of n bytes (n < 0: unknown) of at most limit bytes.
func readAllLimit(r io.Reader, n, limit int) ([]byte, error) {
	if n >= 0 {
		b := make([]byte, n)
		if k, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("after %d of %d bytes: %w", k, n, err)
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, errBodyTooLarge
	}
	return b, nil
}

// bufferPool keeps large body buffers for reuse, at most max bytes of them.
type bufferPool struct {
	mu   sync.Mutex
	max  int64
	size int64
	free [][]byte
}

// get returns a buffer of at least n bytes: the smallest free one that fits, or a new one.
func (p *bufferPool) get(n int) []byte {
	p.mu.Lock()
	best := -1
	for i, b := range p.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.free = append(p.free[:best], p.free[best+1:]...)
		p.size -= int64(cap(b))
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return make([]byte, n)
}

// put gives a buffer back; it is dropped when the pool is full.
func (p *bufferPool) put(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size+int64(cap(b)) > p.max {
		return
	}
	p.free = append(p.free, b[:0])
	p.size += int64(cap(b))
}

// byteBudget is a weighted semaphore: FIFO, and a weight above the capacity is admitted when nothing else
// holds any, so that one body as large as the limit always gets through.
type byteBudget struct {
	mu      sync.Mutex
	cap     int64
	used    int64
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

func newByteBudget(capacity int64) *byteBudget { return &byteBudget{cap: capacity} }

func (b *byteBudget) fits(n int64) bool { return b.used == 0 || b.used+n <= b.cap }

func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if len(b.waiters) == 0 && b.fits(n) {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			b.used -= n
			b.wakeLocked()
		default:
			for i, x := range b.waiters {
				if x == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
			b.wakeLocked() // a large waiter at the head may have kept smaller ones behind it
		}
		return ctx.Err()
	}
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.wakeLocked()
	b.mu.Unlock()
}

func (b *byteBudget) wakeLocked() {
	for len(b.waiters) > 0 && b.fits(b.waiters[0].n) {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.used += w.n
		close(w.ready)
	}
}

// inUse reports the bytes held, for the admin status.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

package kvwire

import (
	"container/list"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// pendingConns are the connections that have not yet sent a complete request, oldest first, with a count per
// client address. The server's mutex guards it.
type pendingConns struct {
	order    *list.List // of *serverConn
	bySource map[string]int
}

type pendingElem = list.Element

func newPendingConns() pendingConns {
	return pendingConns{order: list.New(), bySource: map[string]int{}}
}

// add appends c and returns the connections to close to make room for it: the oldest of its source when
// that source holds perSource already, and the oldest overall when max are pending. Connections that have
// sent nothing at all go first; one that is midway through a large request is closed only when every
// pending connection is.
func (p *pendingConns) add(c *serverConn, max, perSource int) []*serverConn {
	var out []*serverConn
	if p.bySource[c.source] >= perSource {
		if old := p.oldest(c.source); old != nil {
			p.remove(old)
			out = append(out, old)
		}
	}
	if p.order.Len() >= max {
		if old := p.oldest(""); old != nil {
			p.remove(old)
			out = append(out, old)
		}
	}
	c.elem = p.order.PushBack(c)
	p.bySource[c.source]++
	return out
}

// oldest returns the oldest pending connection of source (any source when empty), preferring one that has
// sent nothing.
func (p *pendingConns) oldest(source string) *serverConn {
	var first *serverConn
	for e := p.order.Front(); e != nil; e = e.Next() {
		c := e.Value.(*serverConn)
		if source != "" && c.source != source {
			continue
		}
		if !c.hasStarted() {
			return c
		}
		if first == nil {
			first = c
		}
	}
	return first
}

// remove takes c off the list; it does nothing when c is not on it.
func (p *pendingConns) remove(c *serverConn) {
	if c.elem == nil {
		return
	}
	p.order.Remove(c.elem)
	c.elem = nil
	if p.bySource[c.source]--; p.bySource[c.source] <= 0 {
		delete(p.bySource, c.source)
	}
}

// sourceOf is the client address a per-source limit counts by: the IP without the port.
func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// rateLog logs at a bounded rate: a burst, then one record per interval. Records it drops are counted and the
// next record it lets through says how many, so a flood of rejections is visible without filling the disk.
type rateLog struct {
	log      *slog.Logger
	interval time.Duration
	burst    int

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

func newRateLog(log *slog.Logger, interval time.Duration, burst int) *rateLog {
	return &rateLog{log: log, interval: interval, burst: burst, tokens: float64(burst)}
}

func (r *rateLog) Warn(msg string, args ...any) { r.emit(slog.LevelWarn, msg, args) }
func (r *rateLog) Info(msg string, args ...any) { r.emit(slog.LevelInfo, msg, args) }

func (r *rateLog) emit(level slog.Level, msg string, args []any) {
	if !r.log.Enabled(context.Background(), level) {
		return
	}
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() {
		r.tokens = min(float64(r.burst), r.tokens+float64(now.Sub(r.last))/float64(r.interval))
	}
	r.last = now
	if r.tokens < 1 {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.tokens--
	suppressed := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	r.log.Log(context.Background(), level, msg, args...)
}

// errUnauthBudget is what a request's read or decode gets when the bytes held by unauthenticated requests
// across all connections would pass ServerConfig.MaxUnauthenticatedBytes; the server answers it 503.
var errUnauthBudget = errors.New("kvwire: unauthenticated request memory budget exhausted")

// byteBudget counts the bytes that requests not (yet) authenticated hold, across connections. It never waits:
// a take that would pass the maximum fails, so a flood of large unauthenticated frames is refused instead of
// queued.
type byteBudget struct {
	max  int64
	used atomic.Int64
}

func (b *byteBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// hold is one connection's share of a byteBudget. Its methods are called from the connection's goroutine only.
type hold struct {
	b *byteBudget
	n int64
}

// take reserves n more bytes, or returns errUnauthBudget.
func (h *hold) take(n int) error {
	if !h.b.take(int64(n)) {
		return errUnauthBudget
	}
	h.n += int64(n)
	return nil
}

// give returns n of the reserved bytes.
func (h *hold) give(n int) {
	h.n -= int64(n)
	h.b.used.Add(-int64(n))
}

// release returns everything held.
func (h *hold) release() {
	h.b.used.Add(-h.n)
	h.n = 0
}

// firstRequestBuffer is the first allocation for a request's body; it doubles as bytes arrive.
const firstRequestBuffer = 4 << 10

// readRequestBody reads a request body of n bytes from r into a buffer that grows only as bytes arrive (it
// doubles when full, so it is never more than twice what arrived plus 4 KiB), with every allocation reserved
// in h before it is made.
func readRequestBody(r io.Reader, n int, h *hold) ([]byte, error) {
	var buf []byte
	have := 0
	for have < n {
		if have == len(buf) {
			c := min(n, max(2*len(buf), firstRequestBuffer))
			if err := h.take(c); err != nil {
				return nil, err
			}
			grown := make([]byte, c)
			copy(grown, buf[:have])
			h.give(len(buf))
			buf = grown
		}
		k, err := io.ReadFull(r, buf[have:])
		have += k
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

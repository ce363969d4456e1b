package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/pipeline"
)

// The middleware every request passes before its handler (routes in server.go) that needs no owner of its own:
// request ids, the access log, the framing check, and the keep-alives of a hop. Who may do what is the guard's
// (guard.go); the body budget is the bodyReader's (body.go).

// rejectAmbiguousFraming answers 400 to a request that carries both Content-Length and Transfer-Encoding.
// fasthttp reads such a body as chunked, but a proxy in front may have read it by its length: the difference is
// how requests are smuggled past proxies (RFC 9112 §6.3 allows a server to reject it, and it should). fasthttp
// keeps only the chunked framing, so the raw headers tell whether a Content-Length came too; it closes the
// connection after the answer.
func rejectAmbiguousFraming(c *fiber.Ctx) error {
	h := &c.Request().Header
	if h.ContentLength() != -1 { // not chunked
		return c.Next()
	}
	raw := h.RawHeaders()
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		name, _, ok := bytes.Cut(line, []byte{':'})
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte(fiber.HeaderContentLength)) {
			c.Context().SetConnectionClose()
			return apicore.BadRequest("", "the request has both Content-Length and Transfer-Encoding; send one of them")
		}
	}
	return c.Next()
}

// requestID takes a sane client-supplied request id or makes one, and echoes it in the response.
func requestID(c *fiber.Ctx) error {
	id := c.Get(locals.RequestIDHeader)
	if !validRequestID(id) {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	locals.SetRequestID(c, id)
	c.Set(locals.RequestIDHeader, id)
	return c.Next()
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func requestIDOf(c *fiber.Ctx) string { return locals.RequestID(c) }

// accessLog logs every request once it is answered, and tells finished its status (the request path's
// observers: the dashboard's recent list, the metrics of a request refused before it was served).
func accessLog(log *slog.Logger, finished func(c *fiber.Ctx, status int, err error)) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		status := c.Response().StatusCode()
		var apiErr *apicore.Error
		if errors.As(err, &apiErr) {
			status = apiErr.Status
		} else if fe := (*fiber.Error)(nil); errors.As(err, &fe) {
			status = fe.Code
		}
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelWarn
		}
		if ctx := context.Background(); log.Enabled(ctx, level) { // its arguments cost allocations even when dropped
			log.Log(ctx, level, "request",
				"request_id", requestIDOf(c), "method", c.Method(), "path", c.Path(), "status", status,
				"duration", time.Since(start), "remote", c.IP())
		}
		finished(c, status, err)
		return err
	}
}

// processing is the sign of life a hop gets before its answer's headers: an informational response, which
// HTTP clients skip (RFC 9110 §15.2) and the forwarding gateway counts as the owner being alive.
var processing = []byte("HTTP/1.1 102 Processing\r\n\r\n")

// hopKeepalive keeps a hop that asks for it (forward.HeaderKeepalive) told that this node works on it: until
// the handler has an answer, an informational 102 goes out at the interval asked, so the forwarding gateway
// can give up on an owner that is frozen, asleep or cut off within seconds (forward.Client's idle timeout)
// without cutting a long prefill or a long non-streamed generation. A stream keeps it up with its heartbeat
// (serve shortens it to the interval). fasthttp writes nothing on the connection while the handler runs, so
// the 102s come before the response; the writer stops before the handler returns.
func hopKeepalive(c *fiber.Ctx) error {
	if _, hop := locals.Hop(c); !hop {
		return c.Next()
	}
	every, ok := forward.KeepaliveEvery(c.Get(forward.HeaderKeepalive))
	conn := c.Context().Conn()
	if !ok || conn == nil || !c.Context().Request.Header.IsHTTP11() {
		return c.Next()
	}
	locals.SetKeepalive(c, every)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = conn.SetWriteDeadline(time.Now().Add(every))
				if _, err := conn.Write(processing); err != nil {
					return // the hop's client left: the disconnect watch cancels the work
				}
			}
		}
	}()
	err := c.Next()
	close(stop)
	<-done
	_ = conn.SetWriteDeadline(time.Time{}) // fasthttp sets its own for the response, when it has one
	return err
}

// countUnserved counts a generation request refused before it reached the pipeline (unauthenticated,
// malformed, too large, overlong): its model was not read, so it counts as unknown. A hop refused so counted
// itself already.
func countUnserved(m *metrics.Metrics, c *fiber.Ctx, status int) {
	api := pipeline.APIOf(c.Path())
	if api == "" || c.Method() != fiber.MethodPost || c.Get(forward.HeaderHop) != "" {
		return
	}
	m.Request(api, metrics.ModelUnknown, status, 0)
}

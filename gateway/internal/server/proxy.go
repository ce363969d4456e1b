package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/cluster"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/openai"
)

// maxForwardedBody bounds a non-streamed answer read from an owner (a generation's JSON).
const maxForwardedBody = 256 << 20

// proxy forwards a request to the gateway of the node that serves its decode instance, with the decision
// pinned, and passes the answer through: status and body as they come, a stream chunk by chunk. done is false
// (with no error) when the owner failed before answering (unreachable, or 503 because its engine or instance
// is not there now): nothing was sent to the client, and the caller may try the router's next candidate.
// Admission is the owner's: the request takes no slot here.
func (s *Server) proxy(c *fiber.Ctx, ctx context.Context, watch *disconnectWatcher, g *generation, d *decision,
	attempt int, handedOver *bool) (done bool, err error) {
	requestID := requestIDOf(c)
	snap := s.agent.Snapshot()
	hostPort, tls, ok := cluster.APIEndpoint(snap, s.reg.Node(), d.DecodeNode)
	if !ok {
		s.metrics.HopSent(metrics.HopUnreachable, 0)
		s.log.Warn("forward: no API address for the decode node", "request_id", requestID, "node", d.DecodeNode)
		return false, nil
	}
	header := requestHeader(c)
	if tp := recentOf(c).traceparent(); tp != "" {
		header.Set("Traceparent", tp) // the owner's span joins this one's trace
	}
	// The hop sends the client's body as it is (its proof covers those bytes); the body's buffer goes back to
	// the gateway's pool when the handler returns, so wait until the transport is done with it.
	sent := make(chan struct{})
	start := time.Now()
	resp, err := s.fwd.Send(ctx, forward.Target{HostPort: hostPort, TLS: tls}, forward.Request{
		Method: fiber.MethodPost, Path: c.Path(), Body: c.Body(), RequestID: requestID,
		Route: pinned(s.reg.Node(), d, attempt), Header: header, BodyDone: func() { close(sent) },
	})
	<-sent
	if err != nil {
		if ctx.Err() != nil {
			s.metrics.HopSent(metrics.HopCancelled, 0)
			return true, s.runError(ctx, watch, err)
		}
		s.metrics.HopSent(metrics.HopUnreachable, 0)
		s.log.Warn("forward: the owner did not answer", "request_id", requestID, "node", d.DecodeNode, "address", hostPort, "error", err)
		return false, nil
	}
	if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway {
		detail, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		s.metrics.HopSent(metrics.HopUnavailable, 0)
		s.log.Warn("forward: the owner could not take the request", "request_id", requestID, "node", d.DecodeNode,
			"status", resp.StatusCode, "answer", string(detail))
		return false, nil
	}
	hop := time.Since(start)
	c.Status(resp.StatusCode)
	for _, h := range []string{fiber.HeaderContentType, fiber.HeaderCacheControl, "X-Accel-Buffering"} {
		if v := resp.Header.Get(h); v != "" {
			c.Set(h, v)
		}
	}
	c.Set("X-Duet-Forwarded-To", d.DecodeNode)
	// The trace: the owner's phases, then this gateway's (routing, and the hop until the owner's headers).
	if v := resp.Header.Get(headerServerTiming); v != "" && len(v) <= 1024 {
		c.Set(headerServerTiming, v)
	}
	setServerTiming(c, appendServerTiming(appendServerTiming(make([]byte, 0, 64), "route", g.routeTime), "forward", hop))
	if !g.stream || resp.Header.Get(fiber.HeaderContentType) != g.dialect.streamType() {
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedBody))
		if err != nil {
			if ctx.Err() != nil {
				s.metrics.HopSent(metrics.HopCancelled, 0)
			} else {
				s.metrics.HopSent(metrics.HopBroken, 0)
			}
			if errors.Is(err, forward.ErrIdle) {
				err = s.hopSilent(d.DecodeNode, requestID)
			}
			return true, s.runError(ctx, watch, fmt.Errorf("reading the answer of node %s: %w", d.DecodeNode, err))
		}
		s.metrics.HopSent(metrics.HopAnswered, hop)
		s.log.Debug("forwarded", "request_id", requestID, "node", d.DecodeNode, "status", resp.StatusCode, "first_byte", hop)
		s.recent.forwarded(c, d, body)
		return true, c.Send(body)
	}
	// A stream: the writer owns the watch from here on, and the hop's body.
	*handedOver = true
	conn := c.Context().Conn()
	tap := s.recent.forwardedStream(c, d)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		outcome := metrics.HopCancelled // unless the stream ends or breaks
		defer func() { s.metrics.HopSent(outcome, hop) }()
		defer tap.streamEnded()
		defer resp.Body.Close()
		defer func() { watch.stop() }()
		buf := make([]byte, 32<<10)
		for {
			n, rerr := resp.Body.Read(buf)
			if n > 0 {
				if s.cfg.WriteTimeout > 0 {
					_ = conn.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
				}
				if _, err := w.Write(buf[:n]); err != nil || w.Flush() != nil {
					return // the client left: closing the hop cancels on the owner
				}
				tap.observe(buf[:n])
			}
			if rerr == nil {
				continue
			}
			if errors.Is(rerr, io.EOF) {
				outcome = metrics.HopAnswered
			} else if ctx.Err() == nil {
				outcome = metrics.HopBroken
				// The owner died mid-stream: the client hears an error, not a stream that just stops.
				s.log.Warn("forward: the owner's stream broke", "request_id", requestID, "node", d.DecodeNode, "error", rerr)
				e := openai.Unavailable(fmt.Sprintf("node %s stopped during the request (request id %s)", d.DecodeNode, requestID))
				if errors.Is(rerr, forward.ErrIdle) {
					e = s.hopSilent(d.DecodeNode, requestID)
				}
				tap.failed(e)
				w.Write(g.dialect.encoder(openai.Meta{ID: g.idPrefix + requestID, Model: g.model}, g.request.N).fail(nil, e))
				w.Flush()
			}
			return
		}
	})
	return true, nil
}

// hopSilent is the error of a hop whose owner went silent after its answer began.
func (s *Server) hopSilent(node, requestID string) *openai.Error {
	return openai.Unavailable(fmt.Sprintf("node %s sent nothing for %s (--hop-idle-timeout): it may be frozen, asleep or cut off; the answer is incomplete (request id %s)",
		node, s.fwd.IdleTimeout(), requestID))
}

// requestHeader copies the client's request headers, for a hop.
func requestHeader(c *fiber.Ctx) http.Header {
	header := http.Header{}
	for k, v := range c.Request().Header.All() {
		header.Add(string(k), string(v))
	}
	return header
}

package pipeline

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/locals"
	"github.com/duet-ai/duet/gateway/internal/metrics"
)

// The forward stage: a request placed on another node's instance goes to that node's gateway, with the
// decision pinned, and its answer comes back through as it comes.

// maxForwardedBody bounds a non-streamed answer read from an owner (a generation's JSON).
const maxForwardedBody = 256 << 20

// forward sends a request to the gateway of the node that serves its decode instance, with the decision
// pinned, and passes the answer through: status and body as they come, a stream chunk by chunk. done is false
// (with no error) when the owner failed before answering (unreachable, or 503 because its engine or instance
// is not there now): nothing was sent to the client, and the caller may try the router's next candidate.
// Admission is the owner's: the request takes no slot here.
func (p *Pipeline) forward(c *fiber.Ctx, r *request, attempt int) (done bool, err error) {
	requestID, d, ctx := r.id, &r.decision, r.ctx
	var hostPort string
	var tls, ok bool
	if p.cluster != nil {
		hostPort, tls, ok = p.cluster.APIEndpoint(d.DecodeNode)
	}
	if !ok {
		p.metrics.HopSent(metrics.HopUnreachable, 0)
		p.log.Warn("forward: no API address for the decode node", "request_id", requestID, "node", d.DecodeNode)
		return false, nil
	}
	header := locals.RequestHeader(c)
	if tp := r.observed.traceparent; tp != "" {
		header.Set("Traceparent", tp) // the owner's span joins this one's trace
	}
	// The hop sends the client's body as it is (its proof covers those bytes); the body's buffer goes back to
	// the gateway's pool when the handler returns, so wait until the transport is done with it.
	sent := make(chan struct{})
	start := time.Now()
	resp, err := p.fwd.Send(ctx, forward.Target{HostPort: hostPort, TLS: tls}, forward.Request{
		Method: fiber.MethodPost, Path: c.Path(), Body: c.Body(), RequestID: requestID,
		Route: pinned(r.node, d, attempt), Header: header, BodyDone: func() { close(sent) },
	})
	<-sent
	if err != nil {
		if ctx.Err() != nil {
			p.metrics.HopSent(metrics.HopCancelled, 0)
			return true, runError(r, err)
		}
		p.metrics.HopSent(metrics.HopUnreachable, 0)
		p.log.Warn("forward: the owner did not answer", "request_id", requestID, "node", d.DecodeNode, "address", hostPort, "error", err)
		return false, nil
	}
	if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway {
		detail, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		p.metrics.HopSent(metrics.HopUnavailable, 0)
		p.log.Warn("forward: the owner could not take the request", "request_id", requestID, "node", d.DecodeNode,
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
	setServerTiming(c, appendServerTiming(appendServerTiming(make([]byte, 0, 64), "route", r.routeTime), "forward", hop))
	r.forwarded = true
	if !r.stream || resp.Header.Get(fiber.HeaderContentType) != r.dialect.StreamType() {
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedBody))
		if err != nil {
			if ctx.Err() != nil {
				p.metrics.HopSent(metrics.HopCancelled, 0)
			} else {
				p.metrics.HopSent(metrics.HopBroken, 0)
			}
			if errors.Is(err, forward.ErrIdle) {
				err = p.hopSilent(d.DecodeNode, requestID)
			}
			return true, runError(r, fmt.Errorf("reading the answer of node %s: %w", d.DecodeNode, err))
		}
		p.metrics.HopSent(metrics.HopAnswered, hop)
		p.log.Debug("forwarded", "request_id", requestID, "node", d.DecodeNode, "status", resp.StatusCode, "first_byte", hop)
		if resp.StatusCode < 400 {
			r.answer.owner = ownerFiguresOf(body)
		} else {
			r.answer.err = ownerError(body)
		}
		return true, c.Send(body)
	}
	// A stream: the writer owns the watch from here on, and the hop's body.
	r.handOver()
	conn := c.Context().Conn()
	writeTimeout := p.cfg.WriteTimeout
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		outcome := metrics.HopCancelled // unless the stream ends or breaks
		defer func() { p.metrics.HopSent(outcome, hop) }()
		defer p.finished(r)
		defer resp.Body.Close()
		defer func() { r.watch.stop(); r.cancel() }()
		buf := make([]byte, 32<<10)
		for {
			n, rerr := resp.Body.Read(buf)
			if n > 0 {
				if writeTimeout > 0 {
					_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
				}
				if _, err := w.Write(buf[:n]); err != nil || w.Flush() != nil {
					return // the client left: closing the hop cancels on the owner
				}
				if r.answer.firstByte == 0 {
					r.answer.firstByte = time.Since(r.arrived)
				}
				r.answer.tail = keepTail(r.answer.tail, buf[:n])
			}
			if rerr == nil {
				continue
			}
			if errors.Is(rerr, io.EOF) {
				outcome = metrics.HopAnswered
			} else if ctx.Err() == nil {
				outcome = metrics.HopBroken
				// The owner died mid-stream: the client hears an error, not a stream that just stops.
				p.log.Warn("forward: the owner's stream broke", "request_id", requestID, "node", d.DecodeNode, "error", rerr)
				e := apicore.Unavailable(fmt.Sprintf("node %s stopped during the request (request id %s)", d.DecodeNode, requestID))
				if errors.Is(rerr, forward.ErrIdle) {
					e = p.hopSilent(d.DecodeNode, requestID)
				}
				r.answer.failure = e
				w.Write(r.dialect.Encoder(apicore.Meta{ID: r.idPrefix + requestID, Model: r.model}, r.generate.N).Fail(nil, e))
				w.Flush()
			}
			return
		}
	})
	return true, nil
}

// hopSilent is the error of a hop whose owner went silent after its answer began.
func (p *Pipeline) hopSilent(node, requestID string) *apicore.Error {
	return apicore.Unavailable(fmt.Sprintf("node %s sent nothing for %s (--hop-idle-timeout): it may be frozen, asleep or cut off; the answer is incomplete (request id %s)",
		node, p.fwd.IdleTimeout(), requestID))
}

package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/openai"
)

// The middleware every request passes before its handler (routes in server.go): request ids, the access log,
// API keys, admin keys, and the proof, body and keep-alives of a hop from another gateway.

const requestIDHeader = "X-Request-Id"

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
			return openai.BadRequest("", "the request has both Content-Length and Transfer-Encoding; send one of them")
		}
	}
	return c.Next()
}

// requestID takes a sane client-supplied request id or makes one, and echoes it in the response.
func (s *Server) requestID(c *fiber.Ctx) error {
	id := c.Get(requestIDHeader)
	if !validRequestID(id) {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	c.Locals(requestIDHeader, id)
	c.Set(requestIDHeader, id)
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

func requestIDOf(c *fiber.Ctx) string {
	id, _ := c.Locals(requestIDHeader).(string)
	return id
}

func (s *Server) accessLog(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	status := c.Response().StatusCode()
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		status = apiErr.Status
	} else if fe := (*fiber.Error)(nil); errors.As(err, &fe) {
		status = fe.Code
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	if ctx := context.Background(); s.log.Enabled(ctx, level) { // its arguments cost allocations even when dropped
		s.log.Log(ctx, level, "request",
			"request_id", requestIDOf(c), "method", c.Method(), "path", c.Path(), "status", status,
			"duration", time.Since(start), "remote", c.IP())
	}
	if !finishRequest(c, status, err) && s.metrics != nil {
		countUnserved(s.metrics, c, status)
	}
	return err
}

// auth requires one of the configured API keys, compared in constant time (through their hashes, so key
// lengths do not leak either). An admin key is an API key too. Anthropic's clients send theirs as x-api-key.
func (s *Server) auth(c *fiber.Ctx) error {
	if len(s.keys) == 0 && len(s.adminKeys) == 0 {
		return c.Next()
	}
	token, ok := bearer(c)
	if !ok {
		return openai.Unauthorized("You didn't provide an API key. Provide it in the Authorization header as 'Bearer <key>'.")
	}
	if !matchKey(token, s.keys) && !matchKey(token, s.adminKeys) {
		return openai.Unauthorized("Incorrect API key provided.")
	}
	return c.Next()
}

// stateAuth guards the cluster state: sealed with a secret, behind the API key without one.
func (s *Server) stateAuth(c *fiber.Ctx) error {
	if s.hops != nil {
		return c.Next()
	}
	return s.auth(c)
}

func bearer(c *fiber.Ctx) (string, bool) {
	if token, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer "); ok && strings.TrimSpace(token) != "" {
		return strings.TrimSpace(token), true
	}
	if k := c.Get("X-Api-Key"); k != "" {
		return strings.TrimSpace(k), true
	}
	return "", false
}

func matchKey(token string, keys [][sha256.Size]byte) bool {
	sum := sha256.Sum256([]byte(token))
	match := 0
	for _, k := range keys {
		match |= subtle.ConstantTimeCompare(sum[:], k[:])
	}
	return match == 1
}

// adminOnly guards the writes of the cluster API: with admin keys configured, one of them is required, or a
// hop proved with the cluster secret (the entry gateway checked the client's admin key before it forwarded
// the write to the node it concerns). The hop headers alone count for nothing: without a secret a forwarded
// write carries the client's own key, which is checked here like any.
func (s *Server) adminOnly(c *fiber.Ctx) error {
	if len(s.adminKeys) == 0 || c.Locals(hopProvedKey) == true {
		return c.Next()
	}
	if token, ok := bearer(c); ok && matchKey(token, s.adminKeys) {
		return c.Next()
	}
	return &openai.Error{Status: fiber.StatusForbidden, Type: openai.TypeAuthentication, Code: "admin_key_required",
		Message: "This changes the cluster: it needs an admin key (--admin-key)."}
}

const (
	hopRouteKey   = "duet.hop.route"   // a hop's pinned route (proved with the secret, or a client's in an open cluster)
	hopPendingKey = "duet.hop.pending" // a hop whose proof's head checked out, and whose body is checked once read
	hopProvedKey  = "duet.hop.proved"  // true: the hop carries a valid proof from the cluster secret
)

// pendingHop is a hop whose proof checked out before its body was read: the body must hash to sum.
type pendingHop struct {
	route forward.Route
	sum   [sha256.Size]byte
}

// authOrHop authenticates a request before its body is read (readBody comes after it, so no body holds the
// body budget before its sender is known). A hop from another gateway is let through on the cluster
// credential: the proof's HMAC covers the body's SHA-256, which it carries, so it is checked here, and the
// body's hash once read (verifyHop). Everything else goes through auth. In a cluster without a secret nothing
// tells a hop from a client's request, so a hop is one: it needs the client's API key like any other, its
// route may pin only what a client could choose anyway (an instance of this node, prefill instances the
// owner resolves from its own state: see fromPinned), and it has no admin rights of its own.
func (s *Server) authOrHop(c *fiber.Ctx) error {
	h := c.Get(forward.HeaderHop)
	if h == "" {
		return s.auth(c)
	}
	if n, err := strconv.Atoi(h); err != nil || n < 1 || n > forward.MaxHops {
		s.metrics.HopReceived(metrics.HopRefused)
		return &openai.Error{Status: fiber.StatusLoopDetected, Type: openai.TypeInvalidRequest, Code: "loop_detected",
			Message: fmt.Sprintf("The request has been forwarded %q times; a gateway forwards a request at most once.", h)}
	}
	route, err := forward.DecodeRoute(c.Get(forward.HeaderRoute))
	if err != nil {
		s.metrics.HopReceived(metrics.HopRefused)
		return openai.BadRequest("", "a forwarded request with a bad route: %v", err)
	}
	if s.hops == nil {
		c.Locals(hopRouteKey, route)
		return s.auth(c)
	}
	sum, err := s.hops.VerifyHead(c.Get(forward.HeaderAuth), c.Method(), c.Path(), c.Get(requestIDHeader), c.Get(forward.HeaderRoute))
	if err != nil {
		return s.refuseHop(c, err)
	}
	c.Locals(hopPendingKey, pendingHop{route: route, sum: sum})
	return c.Next()
}

func (s *Server) refuseHop(c *fiber.Ctx, err error) error {
	s.metrics.HopReceived(metrics.HopRefused)
	s.log.Warn("refused a forwarded request", "request_id", requestIDOf(c), "remote", c.IP(), "error", err)
	c.Context().SetConnectionClose() // a body that may follow is not read
	return openai.Unauthorized("The forwarded request's cluster credential is missing or wrong.")
}

// verifyHop checks that a hop's body is the one its proof covers.
func (s *Server) verifyHop(c *fiber.Ctx) error {
	p, ok := c.Locals(hopPendingKey).(pendingHop)
	if !ok {
		return c.Next()
	}
	if err := forward.CheckBody(p.sum, c.Body()); err != nil {
		return s.refuseHop(c, err)
	}
	c.Locals(hopRouteKey, p.route)
	c.Locals(hopProvedKey, true)
	return c.Next()
}

const hopKeepaliveKey = "duet.hop.keepalive" // the interval of a hop's signs of life (time.Duration)

// processing is the sign of life a hop gets before its answer's headers: an informational response, which
// HTTP clients skip (RFC 9110 §15.2) and the forwarding gateway counts as the owner being alive.
var processing = []byte("HTTP/1.1 102 Processing\r\n\r\n")

// hopKeepalive keeps a hop that asks for it (forward.HeaderKeepalive) told that this node works on it: until
// the handler has an answer, an informational 102 goes out at the interval asked, so the forwarding gateway
// can give up on an owner that is frozen, asleep or cut off within seconds (forward.Client's idle timeout)
// without cutting a long prefill or a long non-streamed generation. A stream keeps it up with its heartbeat
// (serve shortens it to the interval). fasthttp writes nothing on the connection while the handler runs, so
// the 102s come before the response; the writer stops before the handler returns.
func (s *Server) hopKeepalive(c *fiber.Ctx) error {
	if c.Locals(hopRouteKey) == nil {
		return c.Next()
	}
	every, ok := forward.KeepaliveEvery(c.Get(forward.HeaderKeepalive))
	conn := c.Context().Conn()
	if !ok || conn == nil || !c.Context().Request.Header.IsHTTP11() {
		return c.Next()
	}
	c.Locals(hopKeepaliveKey, every)
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

// heartbeatFor is the interval of a stream's heartbeat: shorter on a hop that asked for signs of life.
func (s *Server) heartbeatFor(c *fiber.Ctx) time.Duration {
	if every, ok := c.Locals(hopKeepaliveKey).(time.Duration); ok && every < s.cfg.Heartbeat {
		return every
	}
	return s.cfg.Heartbeat
}

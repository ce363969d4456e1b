// Package locals names what the server's middleware leaves on a request, in its fiber locals, for the
// handlers after it: the request's id, a hop's pinned route and the interval of its signs of life, and the
// release of its body's bytes; and a copy of its headers for a hop. The middleware (package server) sets
// them; the request path (package pipeline) and the server's own hops read them. Keeping the keys here lets the two share them without either importing the other's
// internals.
package locals

import (
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/forward"
)

// RequestIDHeader carries a request's id, in the request (a client's, when sane) and in its answer.
const RequestIDHeader = "X-Request-Id"

const (
	hopRouteKey     = "duet.hop.route"     // a hop's pinned route (forward.Route)
	hopKeepaliveKey = "duet.hop.keepalive" // the interval of a hop's signs of life (time.Duration)
	bodyReleaseKey  = "duet.body.release"  // gives the body's bytes back to the budget (func())
)

// SetRequestID records c's request id.
func SetRequestID(c *fiber.Ctx, id string) { c.Locals(RequestIDHeader, id) }

// RequestID is the id the server's middleware gave c's request ("" before it).
func RequestID(c *fiber.Ctx) string {
	id, _ := c.Locals(RequestIDHeader).(string)
	return id
}

// SetHop marks c's request as a hop from another gateway, with the route that gateway pinned (proved with
// the cluster secret, or a client's in an open cluster).
func SetHop(c *fiber.Ctx, route forward.Route) { c.Locals(hopRouteKey, route) }

// Hop is the route a hop's gateway pinned; ok false: the request is not a hop.
func Hop(c *fiber.Ctx) (route forward.Route, ok bool) {
	route, ok = c.Locals(hopRouteKey).(forward.Route)
	return route, ok
}

// SetKeepalive records the interval at which a hop asked for signs of life.
func SetKeepalive(c *fiber.Ctx, every time.Duration) { c.Locals(hopKeepaliveKey, every) }

// Heartbeat is the interval of a stream's keep-alives for c's request: heartbeat, or shorter on a hop that
// asked for signs of life more often.
func Heartbeat(c *fiber.Ctx, heartbeat time.Duration) time.Duration {
	if every, ok := c.Locals(hopKeepaliveKey).(time.Duration); ok && every < heartbeat {
		return every
	}
	return heartbeat
}

// SetBodyRelease records how c's body's bytes go back to the budget they were read under.
func SetBodyRelease(c *fiber.Ctx, release func()) { c.Locals(bodyReleaseKey, release) }

// ReleaseBody gives c's body's bytes back to their budget, once nothing reads the body any more (the engine
// has the request); the server releases it anyway when the handler returns.
func ReleaseBody(c *fiber.Ctx) {
	if f, ok := c.Locals(bodyReleaseKey).(func()); ok {
		f()
	}
}

// RequestHeader copies the client's request headers, for a hop: the copy outlives the handler, whose
// header buffers fasthttp reuses.
func RequestHeader(c *fiber.Ctx) http.Header {
	header := http.Header{}
	for k, v := range c.Request().Header.All() {
		header.Add(string(k), string(v))
	}
	return header
}

package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/forward"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// What the gateway observes of a request beyond the recent ring: its series in the metrics (package metrics)
// and its trace, the timings of its phases in the Server-Timing header.

// arrival is when the request's headers were read: the start of every duration the gateway reports.
func arrival(c *fiber.Ctx) time.Time { return c.Context().Time() }

// apiOf names the client API of a generation path, for the metrics' api label ("" for other paths).
func apiOf(path string) string {
	switch path {
	case "/v1/chat/completions":
		return metrics.APIChat
	case "/v1/completions":
		return metrics.APICompletions
	case "/v1/responses":
		return metrics.APIResponses
	case "/v1/messages":
		return metrics.APIAnthropic
	case "/api/chat", "/api/generate":
		return metrics.APIOllama
	}
	return ""
}

// countUnserved counts a generation request refused before it reached serve (unauthenticated, malformed, too
// large, overlong): its model was not read, so it counts as unknown. A hop refused so counted itself already.
func (s *Server) countUnserved(c *fiber.Ctx, status int) {
	api := apiOf(c.Path())
	if api == "" || c.Method() != fiber.MethodPost || c.Get(forward.HeaderHop) != "" {
		return
	}
	s.metrics.Request(api, metrics.ModelUnknown, status, 0)
}

// admit takes an admission slot, counting the outcome and the wait.
func (s *Server) admit(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	err := s.limiter.acquire(ctx)
	wait := time.Since(start)
	if s.metrics != nil {
		outcome := metrics.Admitted
		var apiErr *openai.Error
		switch {
		case err == nil:
		case errors.As(err, &apiErr) && apiErr.Status == fiber.StatusTooManyRequests:
			outcome = metrics.Rejected
		default:
			outcome = metrics.Cancelled
		}
		s.metrics.Admission(wait, outcome)
	}
	return wait, err
}

// observed wraps an engine's event callback to feed a generation's series: each token's arrival (choice 0)
// and every choice's final. Without metrics it is emit itself.
func observed(obs *metrics.Generation, emit func(engine.Event) error) func(engine.Event) error {
	if obs == nil {
		return emit
	}
	return func(ev engine.Event) error {
		switch {
		case ev.Token != nil && ev.Choice == 0:
			obs.Token(time.Now())
		case ev.Final != nil:
			obs.Final(ev.Choice, ev.Final)
		}
		return emit(ev)
	}
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
func gatewayTiming(dst []byte, route *openai.Route) []byte {
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

// Instances are this node's loaded instances and the generations the gateway runs on each, for the metrics.
func (s *Server) Instances() []metrics.Instance {
	all := s.reg.All()
	out := make([]metrics.Instance, 0, len(all))
	for _, in := range all {
		out = append(out, metrics.Instance{ID: in.Desc.InstanceID, Model: in.Desc.ModelID, InFlight: in.InFlight()})
	}
	return out
}

// Admission is the admission limiter's occupancy and bounds, for the metrics.
func (s *Server) Admission() metrics.AdmissionState {
	return metrics.AdmissionState{InFlight: s.limiter.inFlight(), Queued: int(s.limiter.queued.Load()),
		MaxInFlight: s.cfg.MaxInFlight, MaxQueue: s.cfg.MaxQueue}
}

package server

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/attribute"

	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/gateway/internal/tracing"
	"github.com/duet-ai/duet/sdk/engine"
)

// The recent requests: a bounded ring of the last generations this gateway served (those that entered here,
// whether it ran them or forwarded them, and those other gateways forwarded to it), each with its route and
// timings, for the dashboard (GET /admin/v1/requests). A request is recorded once, when it is over: when its
// handler returns, or when its stream ends.

// recentCapacity is how many requests the ring keeps. A record is bounded (strings are cut, a timings object
// larger than maxRecentTimings is dropped), so the ring holds at most a few megabytes.
const recentCapacity = 512

const (
	maxRecentString  = 256
	maxRecentError   = 512
	maxRecentTimings = 4 << 10
	// recentTail is how much of a forwarded stream's end is kept to find the owner's timings and usage in.
	recentTail = 16 << 10
)

// recentRequest is one request as GET /admin/v1/requests shows it.
type recentRequest struct {
	// Seq numbers the records of this gateway in the order they were recorded; since=<seq> asks for later ones.
	Seq       uint64 `json:"seq"`
	RequestID string `json:"request_id"`
	Path      string `json:"path"`
	Model     string `json:"model"`
	Stream    bool   `json:"stream"`
	Status    int    `json:"status"`
	Error     string `json:"error,omitempty"`
	// Node is the gateway that recorded it; Hop says another gateway forwarded it here.
	Node  string    `json:"node"`
	Hop   bool      `json:"hop"`
	Start time.Time `json:"start"`
	// DurationMS is how long the request took as this gateway saw it, to its last byte; FirstByteMS, for a
	// stream, until its first token (or first forwarded chunk) went out.
	DurationMS  float64 `json:"duration_ms"`
	FirstByteMS float64 `json:"first_byte_ms,omitempty"`
	// Route is where it ran as this gateway knows it; Timings is the answer's own timings object (as clients
	// get it, route included): for a forwarded request, the owner's.
	Route   recentRoute     `json:"route"`
	Timings json.RawMessage `json:"timings,omitempty"`
	Usage   *recentUsage    `json:"usage,omitempty"`
}

type recentRoute struct {
	EntryNode       string `json:"entry_node"`
	DecodeNode      string `json:"decode_node,omitempty"`
	DecodeInstance  string `json:"decode_instance,omitempty"`
	PrefillNode     string `json:"prefill_node,omitempty"`
	PrefillInstance string `json:"prefill_instance,omitempty"`
	PrefillAddress  string `json:"prefill_address,omitempty"`
	Forwarded       bool   `json:"forwarded"`
	// RoutingMS is what tokenizing for the router and routing took here (a forwarded answer's own timings
	// carry its owner's, which did not route it).
	RoutingMS float64 `json:"routing_ms"`
	Reason    string  `json:"reason,omitempty"`
}

type recentUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens"`
}

// recentRequests is the ring. Its zero value is ready to use.
type recentRequests struct {
	mu   sync.Mutex
	buf  []recentRequest
	next int // where the next record goes once buf is full
	seq  uint64
}

func (r *recentRequests) add(rec recentRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec.Seq = r.seq
	if len(r.buf) < recentCapacity {
		r.buf = append(r.buf, rec)
		return
	}
	r.buf[r.next] = rec
	r.next = (r.next + 1) % recentCapacity
}

// since returns the records after seq (0: all) that started at or after t (zero: any), oldest first, and the
// last seq recorded.
func (r *recentRequests) since(seq uint64, t time.Time) ([]recentRequest, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]recentRequest, 0, len(r.buf))
	for i := range r.buf {
		rec := r.buf[(r.next+i)%len(r.buf)]
		if rec.Seq > seq && !rec.Start.Before(t) {
			out = append(out, rec)
		}
	}
	return out, r.seq
}

const recentKey = "duet.recent"

// recentEntry is a request being recorded. Its methods are safe on a nil entry, so the hooks in the request
// path need no checks.
type recentEntry struct {
	ring  *recentRequests
	rec   recentRequest
	route *openai.Route // serve fills it in as it decides
	g     *generation   // for its routing time
	n     int           // choices

	// For the metrics: the series the request counts in (api, model label), and the gateway's metrics.
	m          *metrics.Metrics
	api, model string
	// span is the request's trace span (nil: no OTLP endpoint); timings the engine's, when it ran here.
	span    *tracing.Request
	timings *engine.Timings

	// streaming: a stream writer records the request when it ends, not the handler.
	streaming atomic.Bool

	mu        sync.Mutex // the fields below are written by the stream's goroutine
	reason    string
	forwarded *recentRoute
	finals    int
	failure   *openai.Error
	firstByte time.Duration
	tail      []byte
	done      bool
}

// open starts recording a generation that serve runs.
func (r *recentRequests) open(c *fiber.Ctx, g *generation, route *openai.Route, m *metrics.Metrics, tr *tracing.Tracer) *recentEntry {
	// fiber's strings point into buffers it reuses for the next request: the record keeps copies.
	e := &recentEntry{ring: r, route: route, g: g, n: max(g.request.N, 1), rec: recentRequest{
		RequestID: cut(requestIDOf(c), maxRecentString), Path: cut(c.Path(), maxRecentString), Model: cut(g.model, maxRecentString),
		Stream: g.stream, Node: route.EntryNode, Hop: c.Locals(hopRouteKey) != nil, Start: arrival(c),
	}}
	if m != nil {
		e.m, e.api, e.model = m, apiOf(c.Path()), m.Model(g.model)
	}
	if tr != nil {
		e.span = tr.Start(func(k string) string { return c.Get(k) }, "duet.request", e.rec.Start, attribute.String("duet.request_id", e.rec.RequestID),
			attribute.String("url.path", e.rec.Path), attribute.String("duet.node", route.EntryNode),
			attribute.Bool("duet.hop", e.rec.Hop), attribute.Bool("duet.stream", g.stream))
	}
	c.Locals(recentKey, e)
	return e
}

func recentOf(c *fiber.Ctx) *recentEntry {
	e, _ := c.Locals(recentKey).(*recentEntry)
	return e
}

// decided notes the router's reason.
func (e *recentEntry) decided(d *decision) {
	if e == nil || d == nil {
		return
	}
	e.mu.Lock()
	e.reason = cut(d.Reason, maxRecentError)
	e.mu.Unlock()
}

// answered notes a whole (non-streamed) answer's timings and usage.
func (e *recentEntry) answered(rs openai.Results) {
	if e == nil || len(rs) == 0 || rs[0].Final == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.setTimings(rs[0].Final.Timings)
	u := rs.Usage()
	e.rec.Usage = &recentUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens}
}

// setTimings renders the timings as the answer carries them. Call with mu held.
func (e *recentEntry) setTimings(t engine.Timings) {
	e.timings = &t
	if b := openai.AppendTimings(nil, t, e.route); len(b) <= maxRecentTimings {
		e.rec.Timings = b
	}
}

// finish records a request when its handler returns (accessLog calls it for every request), unless a
// stream's writer records it. It reports whether the request is a generation's (recorded now or later).
func (r *recentRequests) finish(c *fiber.Ctx, status int, err error) bool {
	e := recentOf(c)
	if e == nil {
		return false
	}
	if e.streaming.Load() {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rec.Status = status
	if err != nil && status >= 400 {
		e.rec.Error = cut(toAPIError(err).Message, maxRecentError)
	}
	e.record()
	return true
}

// record adds the request to the ring, once. Call with mu held.
func (e *recentEntry) record() {
	if e.done {
		return
	}
	e.done = true
	e.rec.DurationMS = msOf(time.Since(e.rec.Start))
	if e.firstByte > 0 {
		e.rec.FirstByteMS = msOf(e.firstByte)
	}
	if f := e.forwarded; f != nil {
		e.rec.Route = *f
	} else if rt := e.route; rt != nil {
		e.rec.Route = recentRoute{EntryNode: rt.EntryNode, DecodeNode: rt.DecodeNode, DecodeInstance: rt.DecodeInstance,
			PrefillNode: rt.PrefillNode, PrefillInstance: rt.PrefillInstance, PrefillAddress: rt.PrefillAddress, Forwarded: rt.Forwarded}
	}
	e.rec.Route.Reason = e.reason
	var routeTime time.Duration
	if e.g != nil {
		routeTime = e.g.routeTime
		e.rec.Route.RoutingMS = msOf(routeTime)
	}
	e.g = nil // the record outlives the request; the generation must not
	e.ring.add(e.rec)
	if e.span != nil {
		p := tracing.Phases{Status: e.rec.Status, Error: e.rec.Error, Route: routeTime, Forwarded: e.forwarded != nil,
			Attrs: []attribute.KeyValue{attribute.String("duet.model", e.rec.Model),
				attribute.String("duet.decode_node", e.rec.Route.DecodeNode), attribute.String("duet.decode_instance", e.rec.Route.DecodeInstance)}}
		if e.route != nil {
			p.Admission = e.route.Admission
		}
		if e.forwarded == nil {
			p.Engine = e.timings
		}
		e.span.End(time.Now(), p)
	}
	if e.m == nil {
		return
	}
	switch {
	case !e.rec.Hop:
		e.m.Request(e.api, e.model, e.rec.Status, time.Since(e.rec.Start))
	case e.rec.Status < 400:
		e.m.HopReceived(metrics.HopOK)
	default:
		e.m.HopReceived(metrics.HopError)
	}
}

// encoder wraps a local stream's encoder to watch its tokens, finals and failure; the stream's writer records
// the request when it ends (streamEnded).
func (e *recentEntry) encoder(enc encoder) encoder {
	if e == nil {
		return enc
	}
	e.streaming.Store(true)
	return &recordingEncoder{encoder: enc, e: e}
}

type recordingEncoder struct {
	encoder
	e *recentEntry
	// sawToken: the first token's time is noted; the encoder's one goroutine reads it, so later tokens cost
	// no lock.
	sawToken bool
}

func (r *recordingEncoder) event(dst []byte, ev engine.Event) []byte {
	if ev.Token != nil && !r.sawToken {
		r.sawToken = true
		r.e.mu.Lock()
		if r.e.firstByte == 0 {
			r.e.firstByte = time.Since(r.e.rec.Start)
		}
		r.e.mu.Unlock()
	}
	return r.encoder.event(dst, ev)
}

func (r *recordingEncoder) final(dst []byte, choice int, f *engine.Final) ([]byte, bool) {
	e := r.e
	e.mu.Lock()
	if e.finals == 0 {
		e.setTimings(f.Timings)
		e.rec.Usage = &recentUsage{PromptTokens: f.Usage.PromptTokens, CachedTokens: f.Usage.CachedTokens}
	}
	e.finals++
	e.rec.Usage.CompletionTokens += f.Usage.CompletionTokens
	e.mu.Unlock()
	return r.encoder.final(dst, choice, f)
}

func (r *recordingEncoder) fail(dst []byte, err *openai.Error) []byte {
	r.e.mu.Lock()
	if r.e.failure == nil {
		r.e.failure = err
	}
	r.e.mu.Unlock()
	return r.encoder.fail(dst, err)
}

// streamEnded records a stream when its writer is done: complete, failed, or cut off by the client.
func (e *recentEntry) streamEnded() {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.failure != nil:
		e.rec.Status, e.rec.Error = e.failure.Status, cut(e.failure.Message, maxRecentError)
	case e.forwarded != nil:
		e.fromTail()
	case e.finals >= e.n:
		e.rec.Status = fiber.StatusOK
	default:
		e.rec.Status, e.rec.Error = 499, "the stream ended before the answer did (the client left)"
	}
	e.record()
}

// cut copies at most n bytes of s (not splitting a UTF-8 sequence).
func cut(s string, n int) string {
	if len(s) > n {
		for n > 0 && s[n]&0xC0 == 0x80 {
			n--
		}
		s = s[:n]
	}
	return strings.Clone(s)
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// traceparent is the request's span as a W3C traceparent header, for a hop ("" without tracing).
func (e *recentEntry) traceparent() string {
	if e == nil {
		return ""
	}
	return e.span.Traceparent()
}

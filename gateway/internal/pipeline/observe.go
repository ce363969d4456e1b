package pipeline

import (
	"time"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/attribute"

	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/gateway/internal/tracing"
	"github.com/duet-ai/duet/sdk/engine"
)

// What watches a request: the dashboard's recent list (recent.go), the metrics and the trace (here), the
// speed samples and the estimate-error book (observe_speed.go). Each is an observer, registered once with
// the pipeline, which tells it of every request's lifecycle; none owns the request or its state.

// An observer watches requests. Its methods are called in order for a request, never at once: decided
// from the handler, token and final from the goroutine that runs the generation, finished once, when the
// request is over (from the handler, or from a stream's writer once the generation has returned).
type observer interface {
	// decided: the request is placed: r.local is this node's instance, or nil when it goes to another node's
	// gateway. A request forwarded again after its owner failed is decided again.
	decided(r *request)
	// firstToken: the first token of choice 0 came from the engine at at.
	firstToken(r *request, at time.Time)
	// token: a later token of choice 0 came at at (only to an observer registered for every token).
	token(r *request, at time.Time)
	// final: a choice ended.
	final(r *request, choice int, f *engine.Final)
	// finished: the request is over; r.answer says what the client got.
	finished(r *request)
}

var (
	_ observer = (*recentObserver)(nil)
	_ observer = metricsObserver{}
	_ observer = traceObserver{}
	_ observer = speedObserver{}
)

// nopObserver is an observer that watches nothing, for observers to embed.
type nopObserver struct{}

func (nopObserver) decided(*request)                   {}
func (nopObserver) firstToken(*request, time.Time)     {}
func (nopObserver) token(*request, time.Time)          {}
func (nopObserver) final(*request, int, *engine.Final) {}
func (nopObserver) finished(*request)                  {}

// observed is what observers keep of a request between their calls; each field is one observer's.
type observed struct {
	span        *tracing.Request    // traceObserver
	traceparent string              // traceObserver: the span, for a hop
	generation  *metrics.Generation // metricsObserver
	learned     bool                // speedObserver: a final fed the book
	firstToken  time.Time           // the pipeline: choice 0's first token came
}

// observe registers an observer; everyToken: it is told of every token, not only the first.
func (p *Pipeline) observe(o observer, everyToken bool) {
	p.observers = append(p.observers, o)
	if everyToken {
		p.perToken = append(p.perToken, o)
	}
}

func (p *Pipeline) decided(r *request) {
	for _, o := range p.observers {
		o.decided(r)
	}
}

// event tells the observers of an engine event; the generation's goroutine calls it for each.
func (p *Pipeline) event(r *request, ev *engine.Event) {
	switch {
	case ev.Token != nil && ev.Choice == 0:
		if r.observed.firstToken.IsZero() {
			now := r.now()
			r.observed.firstToken = now
			for _, o := range p.observers {
				o.firstToken(r, now)
			}
		} else if len(p.perToken) > 0 {
			now := r.now()
			for _, o := range p.perToken {
				o.token(r, now)
			}
		}
	case ev.Final != nil:
		for _, o := range p.observers {
			o.final(r, ev.Choice, ev.Final)
		}
	}
}

// now is the time, read as the time since the request arrived: one read of the monotonic clock, where
// time.Now reads the wall clock too (about 30 ns against 70 to 100 on this project's VMs, per token).
func (r *request) now() time.Time {
	if r.arrived.IsZero() {
		return time.Now()
	}
	return r.arrived.Add(time.Since(r.arrived))
}

// finished ends a request, once: a stream's outcome is settled from what its writer saw, and every observer
// is told.
func (p *Pipeline) finished(r *request) {
	if r.finished {
		return
	}
	r.finished = true
	if r.streaming {
		r.settleStream()
	}
	for _, o := range p.observers {
		o.finished(r)
	}
}

// metricsObserver feeds a request's series: its tokens and finals when it runs here, its status when it is
// over (or, on the owner of a hop, the hop's outcome).
type metricsObserver struct {
	m *metrics.Metrics
}

func (o metricsObserver) decided(r *request) {
	if r.local != nil && r.observed.generation == nil {
		r.observed.generation = o.m.StartGeneration(r.api, o.m.Model(r.model), r.arrived)
	}
}

func (o metricsObserver) firstToken(r *request, at time.Time) { r.observed.generation.Token(at) }
func (o metricsObserver) token(r *request, at time.Time)      { r.observed.generation.Token(at) }

func (o metricsObserver) final(r *request, choice int, f *engine.Final) {
	r.observed.generation.Final(choice, f)
}

func (o metricsObserver) finished(r *request) {
	switch status := r.answer.status; {
	case !r.hopped:
		o.m.Request(r.api, o.m.Model(r.model), status, time.Since(r.arrived))
	case status < 400:
		o.m.HopReceived(metrics.HopOK)
	default:
		o.m.HopReceived(metrics.HopError)
	}
}

// traceObserver gives each request a span (started once it is placed, or when it ends unplaced) with a child
// per phase.
type traceObserver struct {
	nopObserver
	t *tracing.Tracer
}

// decided starts the span, while the handler runs (its parent comes from the request's headers), so that a
// hop carries its traceparent.
func (o traceObserver) decided(r *request) { o.start(r) }

func (o traceObserver) start(r *request) {
	if r.observed.span != nil {
		return
	}
	header := func(string) string { return "" }
	if c := r.c; c != nil {
		header = func(k string) string { return c.Get(k) }
	}
	r.observed.span = o.t.Start(header, "duet.request", r.arrived, attribute.String("duet.request_id", r.id),
		attribute.String("url.path", r.path), attribute.String("duet.node", r.node),
		attribute.Bool("duet.hop", r.hopped), attribute.Bool("duet.stream", r.stream))
	r.observed.traceparent = r.observed.span.Traceparent()
}

func (o traceObserver) finished(r *request) {
	o.start(r)
	where := r.placement()
	p := tracing.Phases{Status: r.answer.status, Error: cut(r.answer.err, maxRecentError), Route: r.routeTime, Forwarded: r.forwarded,
		Attrs: []attribute.KeyValue{attribute.String("duet.model", r.model),
			attribute.String("duet.decode_node", where.DecodeNode), attribute.String("duet.decode_instance", where.DecodeInstance)}}
	p.Admission = r.route.Admission
	if !r.forwarded {
		p.Engine = r.timings()
	}
	r.observed.span.End(time.Now(), p)
}

// arrival is when the request's headers were read: the start of every duration the gateway reports.
func arrival(c *fiber.Ctx) time.Time { return c.Context().Time() }

// APIOf names the client API of a generation path, for the metrics' api label ("" for other paths).
func APIOf(path string) string {
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

// Package tracing exports the trace of each request over OTLP/HTTP, when an endpoint is configured: a span for
// the request on each gateway it passed (the entry's and the owner's join one trace through the hop's W3C
// traceparent header, or a client's), with a child span per phase, the same phases and figures as the
// answer's timings and Server-Timing header. The phases are laid out from the durations the gateway and the
// engine measured, so their starts are reconstructed (routing from the arrival, the engine's phases back from
// the generation's end), not observed.
//
// Without an endpoint there is no Tracer: its methods do nothing on nil, and a request costs nothing more.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/duet-ai/duet/sdk/engine"
)

// Tracer starts and exports requests' spans. A nil *Tracer traces nothing.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// Config says where spans go and what produced them.
type Config struct {
	// Endpoint is the collector's OTLP/HTTP base URL (http://host:4318, to which /v1/traces is added when it
	// has no path). Empty: the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, and
	// with neither, no tracing. The exporter reads the other OTEL_EXPORTER_OTLP_* variables (headers, timeout,
	// TLS) and the batch processor OTEL_BSP_* as the OpenTelemetry specification says.
	Endpoint string
	// Node and Version describe this gateway (service.instance.id, service.version).
	Node, Version string
}

// Enabled says whether c (with the environment) configures an endpoint.
func (c Config) Enabled() bool {
	return c.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// New starts an exporter, or returns nil when no endpoint is configured.
func New(c Config) (*Tracer, error) {
	if !c.Enabled() {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("OTLP endpoint %q: want an http or https URL such as http://collector:4318", c.Endpoint)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	// The exporter connects lazily: a collector that is down costs dropped spans, not a failed start.
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "duet"),
		attribute.String("service.version", c.Version),
		attribute.String("service.instance.id", c.Node),
	)
	// The batcher's queue is bounded (OTEL_BSP_MAX_QUEUE_SIZE, 2048 by default): past it spans are dropped,
	// never held without bound.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{tp: tp, tracer: tp.Tracer("github.com/duet-ai/duet/gateway"), prop: propagation.TraceContext{}}, nil
}

// Shutdown exports what is queued, within ctx's deadline.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Request is a request's span on this gateway, from its arrival until End.
type Request struct {
	t     *Tracer
	ctx   context.Context
	span  trace.Span
	start time.Time
}

// Start opens a request's span at its arrival, as a child of the traceparent that header finds (the entry
// gateway's, on a hop; a client's), if any. header reads a request header.
func (t *Tracer) Start(header func(string) string, name string, arrived time.Time, attrs ...attribute.KeyValue) *Request {
	if t == nil {
		return nil
	}
	ctx := t.prop.Extract(context.Background(), headerCarrier(header))
	ctx, span := t.tracer.Start(ctx, name, trace.WithTimestamp(arrived), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrs...))
	return &Request{t: t, ctx: ctx, span: span, start: arrived}
}

// Traceparent is the W3C traceparent header of the span, for a hop ("" on nil).
func (r *Request) Traceparent() string {
	if r == nil {
		return ""
	}
	c := propagation.MapCarrier{}
	r.t.prop.Inject(r.ctx, c)
	return c["traceparent"]
}

// Phases are what the gateway knows of a request when it ends.
type Phases struct {
	Status int
	Error  string
	// Route is what routing took here (zero on the owner of a hop); Admission the wait for a slot.
	Route, Admission time.Duration
	// Forwarded: the engine's phases are the owner's spans; this gateway's is the hop, after routing.
	Forwarded bool
	// Engine are the generation's timings, when it ran here; nil otherwise.
	Engine *engine.Timings
	Attrs  []attribute.KeyValue
}

// End closes the span at end with a child span per phase.
func (r *Request) End(end time.Time, p Phases) {
	if r == nil {
		return
	}
	child := func(name string, from, to time.Time, attrs ...attribute.KeyValue) {
		if to.Before(from) {
			to = from
		}
		_, s := r.t.tracer.Start(r.ctx, name, trace.WithTimestamp(from), trace.WithAttributes(attrs...))
		s.End(trace.WithTimestamp(to))
	}
	if p.Route > 0 {
		child("route", r.start, r.start.Add(p.Route))
	}
	if p.Forwarded {
		child("forward", r.start.Add(p.Route), end)
	}
	if t := p.Engine; t != nil {
		// The generation ended about when the request did; its phases are laid out back from there.
		begin := end.Add(-t.Total)
		if begin.Before(r.start) {
			begin = r.start
		}
		if p.Admission > 0 {
			child("admission", begin.Add(-p.Admission), begin)
		}
		prefillAt := begin.Add(t.Queue)
		child("queue", begin, prefillAt)
		var attrs []attribute.KeyValue
		if t.PrefillSource != "" {
			attrs = append(attrs, attribute.String("duet.prefill_source", t.PrefillSource))
		}
		child("prefill", prefillAt, prefillAt.Add(t.Prefill), attrs...)
		if rp := t.Remote; rp != nil {
			kv := []attribute.KeyValue{attribute.String("duet.prefill_instance", rp.InstanceID),
				attribute.Int64("duet.kv_bytes", rp.Bytes), attribute.Int("duet.kv_tokens", rp.Tokens),
				attribute.Int("duet.attempts", rp.Attempts)}
			if rp.FallbackReason != "" {
				kv = append(kv, attribute.String("duet.fallback_reason", clip(rp.FallbackReason, 512)))
			}
			child("kv_wait", prefillAt, prefillAt.Add(rp.Wait), kv...)
			child("kv_transfer", prefillAt, prefillAt.Add(rp.Transfer))
			if rp.Ingest > 0 {
				child("kv_ingest", prefillAt.Add(t.Prefill-rp.Ingest), prefillAt.Add(t.Prefill))
			}
		}
		first := begin.Add(t.FirstToken)
		child("first_token", begin, first)
		child("decode", first, first.Add(t.Decode))
	}
	r.span.SetAttributes(append(p.Attrs, attribute.Int("http.response.status_code", p.Status))...)
	if p.Status >= 500 || p.Status == 499 {
		r.span.SetStatus(codes.Error, clip(p.Error, 512))
	}
	r.span.End(trace.WithTimestamp(end))
}

// headerCarrier reads a request's headers for the propagator (extraction only).
type headerCarrier func(string) string

func (h headerCarrier) Get(key string) string { return h(key) }
func (h headerCarrier) Set(string, string)    {}
func (h headerCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }

func clip(s string, n int) string {
	if len(s) > n {
		for n > 0 && s[n]&0xC0 == 0x80 {
			n--
		}
		return s[:n]
	}
	return s
}

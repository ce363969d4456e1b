package tracing

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/duet-ai/duet/sdk/engine"
)

// collector is a fake OTLP/HTTP collector: it decodes each export request's protobuf and keeps its spans.
type collector struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		c.resource = map[string]string{}
		for _, kv := range rs.Resource.GetAttributes() {
			c.resource[kv.Key] = kv.Value.GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func TestDisabledWithoutEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := New(Config{})
	if tr != nil || err != nil {
		t.Fatalf("no endpoint: %v, %v", tr, err)
	}
	// Every method is safe on nil.
	r := tr.Start(func(string) string { return "" }, "x", time.Now())
	if r.Traceparent() != "" {
		t.Error("a traceparent without a tracer")
	}
	r.End(time.Now(), Phases{})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"collector:4318", "ftp://x", "http://"} {
		if _, err := New(Config{Endpoint: bad}); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
}

// TestSpansReachTheCollector traces a request through two gateways as the server does: the entry's span, its
// traceparent on the hop, the owner's span under it with the engine's phases, and checks what a collector
// receives.
func TestSpansReachTheCollector(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	tr, err := New(Config{Endpoint: srv.URL, Node: "n1", Version: "test"})
	if err != nil || tr == nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	entry := tr.Start(func(string) string { return "" }, "duet.request", t0)
	tp := entry.Traceparent()
	if len(tp) != 55 {
		t.Fatalf("traceparent %q", tp)
	}
	owner := tr.Start(func(k string) string {
		if k == "traceparent" {
			return tp
		}
		return ""
	}, "duet.request", t0.Add(2*time.Millisecond))
	timings := &engine.Timings{Queue: time.Millisecond, Prefill: 40 * time.Millisecond, FirstToken: 42 * time.Millisecond,
		Decode: 10 * time.Millisecond, Total: 52 * time.Millisecond, PrefillSource: engine.PrefillRemote,
		Remote: &engine.RemotePrefill{InstanceID: "p", Bytes: 1 << 20, Wait: 5 * time.Millisecond, Transfer: 38 * time.Millisecond, Ingest: time.Millisecond, Attempts: 1}}
	owner.End(t0.Add(60*time.Millisecond), Phases{Status: 200, Admission: time.Microsecond, Engine: timings})
	entry.End(t0.Add(61*time.Millisecond), Phases{Status: 200, Route: time.Millisecond, Forwarded: true})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	if col.resource["service.name"] != "duet" || col.resource["service.instance.id"] != "n1" {
		t.Errorf("resource %v", col.resource)
	}
	byName := map[string][]*tracepb.Span{}
	for _, s := range col.spans {
		byName[s.Name] = append(byName[s.Name], s)
		if hex.EncodeToString(s.TraceId) != tp[3:35] {
			t.Errorf("span %s is in trace %x, not the request's", s.Name, s.TraceId)
		}
	}
	roots := byName["duet.request"]
	if len(roots) != 2 {
		t.Fatalf("%d request spans", len(roots))
	}
	var entrySpan, ownerSpan *tracepb.Span
	for _, s := range roots {
		if len(s.ParentSpanId) == 0 {
			entrySpan = s
		} else {
			ownerSpan = s
		}
	}
	if entrySpan == nil || ownerSpan == nil || string(ownerSpan.ParentSpanId) != string(entrySpan.SpanId) {
		t.Fatalf("the owner's span is not the entry's child: %v %v", entrySpan, ownerSpan)
	}
	for name, parent := range map[string]*tracepb.Span{"route": entrySpan, "forward": entrySpan, "admission": ownerSpan,
		"queue": ownerSpan, "prefill": ownerSpan, "kv_wait": ownerSpan, "kv_transfer": ownerSpan, "kv_ingest": ownerSpan,
		"first_token": ownerSpan, "decode": ownerSpan} {
		ss := byName[name]
		if len(ss) != 1 || string(ss[0].ParentSpanId) != string(parent.SpanId) {
			t.Errorf("phase %s: %d spans, or not under its request's span", name, len(ss))
			continue
		}
		if ss[0].EndTimeUnixNano < ss[0].StartTimeUnixNano {
			t.Errorf("phase %s ends before it starts", name)
		}
	}
	if s := byName["kv_transfer"]; len(s) == 1 {
		if d := time.Duration(s[0].EndTimeUnixNano - s[0].StartTimeUnixNano); d != 38*time.Millisecond {
			t.Errorf("kv_transfer lasts %v, want the timings' 38ms", d)
		}
	}
}

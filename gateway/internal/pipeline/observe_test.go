package pipeline

import (
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/metrics"
	"github.com/duet-ai/duet/sdk/engine"
)

func TestAPIOf(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/v1/chat/completions": metrics.APIChat, "/v1/completions": metrics.APICompletions,
		"/v1/responses": metrics.APIResponses, "/v1/messages": metrics.APIAnthropic,
		"/api/chat": metrics.APIOllama, "/api/generate": metrics.APIOllama,
		"/v1/models": "", "/v1/messages/count_tokens": "", "/": "", "/v1/chat/completions/x": "",
	} {
		if got := APIOf(path); got != want {
			t.Errorf("APIOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestServerTiming: the header's phases in the order and units (milliseconds, W3C dur) docs/metrics.md shows.
func TestServerTiming(t *testing.T) {
	t.Parallel()
	route := &apicore.Route{Time: 1500 * time.Microsecond, Admission: 20 * time.Microsecond}
	tm := engine.Timings{Queue: time.Millisecond, Prefill: 40 * time.Millisecond, FirstToken: 41 * time.Millisecond,
		Decode: 9 * time.Millisecond, Total: 50 * time.Millisecond,
		Remote: &engine.RemotePrefill{Wait: 2 * time.Millisecond, Transfer: 38 * time.Millisecond, Ingest: 250 * time.Microsecond}}
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"local", engineTiming(gatewayTiming(nil, route), tm),
			"admission;dur=0.02, route;dur=1.5, queue;dur=1, prefill;dur=40, kv_wait;dur=2, kv_transfer;dur=38, kv_ingest;dur=0.25, ttft;dur=41, decode;dur=9, total;dur=50"},
		{"owner of a hop", gatewayTiming(nil, &apicore.Route{Forwarded: true, Admission: time.Millisecond}), "admission;dur=1"},
		{"stream", appendServerTiming(gatewayTiming(nil, route), "first_event", 3*time.Millisecond),
			"admission;dur=0.02, route;dur=1.5, first_event;dur=3"},
	} {
		if string(tc.got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}

func TestAppendMillis(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{0: "0", time.Microsecond: "0.001", 1500 * time.Microsecond: "1.5",
		40 * time.Millisecond: "40", 2634 * time.Microsecond: "2.634", 123456789 * time.Microsecond: "123456.789",
		-1500 * time.Microsecond: "-1.5", 999: "0"} {
		if got := string(appendMillis(nil, d)); got != want {
			t.Errorf("appendMillis(%v) = %s, want %s", d, got, want)
		}
	}
}

// BenchmarkServerTiming is what the trace header costs a whole answer.
func BenchmarkServerTiming(b *testing.B) {
	route := &apicore.Route{Time: 1500 * time.Microsecond, Admission: 20 * time.Microsecond}
	tm := engine.Timings{Queue: time.Millisecond, Prefill: 40 * time.Millisecond, FirstToken: 41 * time.Millisecond,
		Decode: 9 * time.Millisecond, Total: 50 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		_ = engineTiming(gatewayTiming(make([]byte, 0, 256), route), tm)
	}
}

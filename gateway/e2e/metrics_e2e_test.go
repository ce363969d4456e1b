package e2e

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// samples is a scrape of /metrics in Prometheus' text format: each sample's value by its name and labels, as
// the exposition prints them (client_golang sorts labels by name).
type samples map[string]float64

// scrapeMetrics reads GET url (a gateway's /metrics, or its --metrics-listen one).
func scrapeMetrics(t *testing.T, url string) samples {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("GET %s: Content-Type %q, want Prometheus' text format", url, ct)
	}
	out := samples{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("GET %s: a line that is not a sample: %q", url, line)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// delta says how a sample moved between two scrapes.
func delta(before, after samples, key string) float64 { return after[key] - before[key] }

// tracedChat sends a chat completion (streamed or not) with a request id and returns the status, the
// Server-Timing header and, for a whole answer, its timings and usage.
func tracedChat(t *testing.T, g *gateway, requestID, prompt string, maxTokens int, stream bool) (int, string, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "embedded", "temperature": 0, "max_tokens": maxTokens, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", requestID)
	resp, err := g.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if got := resp.Header.Get("X-Request-Id"); got != requestID {
		t.Errorf("X-Request-Id %q, want %q", got, requestID)
	}
	var out map[string]any
	if !stream {
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%d %s: %v", resp.StatusCode, data, err)
		}
	} else if !strings.Contains(string(data), "data: [DONE]") {
		t.Errorf("the stream did not end with [DONE]:\n%s", data)
	}
	return resp.StatusCode, resp.Header.Get("Server-Timing"), out
}

// TestMetrics scrapes two gateways' /metrics after real requests: a remote prefill that fails (node 1's
// instance advertises a KV address where nothing listens) and falls back, a request node 2 forwards to node 1
// with node 2's instance as its prefill (linked), a stream through the same hop, and a restart of node 1's
// engine plugin; each series moved as it should, on the node that should count it. Node 1 serves /metrics on
// --metrics-listen too, without a key. The answers carry their trace in Server-Timing, under the request id
// the client gave, which node 1's log names too; both export their spans of it, in one trace, to a fake OTLP
// collector.
func TestMetrics(t *testing.T) {
	port := clusterPort(t)
	secret := writeSecret(t, "the two nodes that count share this secret")
	metricsAddr, dead := freeAddr(t), freeAddr(t) // dead: nothing listens there once freeAddr returns
	col := &otlpCollector{}
	collector := httptest.NewServer(col)
	defer collector.Close()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: the nodes export their spans at once
	n1 := startNode(t, "127.0.0.1", port, secret, "", "--metrics-listen", metricsAddr, "--otlp-endpoint", collector.URL,
		"--engine-opt", "remote_prefill_threshold=64,kv_frame_timeout=20s,kv_advertise="+dead)
	n2 := startNode(t, "127.0.0.2", port, secret, "127.0.0.1", "--log-level", "debug", // its KV exports
		"--otlp-endpoint", collector.URL)
	id1, id2 := n1.nodeID(t), n2.nodeID(t)
	waitFor(t, 20*time.Second, "both nodes to see two ready instances", func() bool {
		return len(n1.readyOn(t)) == 2 && len(n2.readyOn(t)) == 2
	})
	ready := n1.readyOn(t)
	i1, i2 := ready[id1], ready[id2]
	m1, m2 := "http://"+metricsAddr+"/metrics", n2.url+"/metrics"
	before1, before2 := scrapeMetrics(t, m1), scrapeMetrics(t, m2)
	if api := scrapeMetrics(t, n1.url+"/metrics"); api[`duet_build_info{node="`+id1+`",version="dev"}`] != 1 {
		t.Errorf("node 1's API port: no duet_build_info for %s", id1)
	}

	// A long prompt on node 2 decodes there (the router prefers the node a request entered) and is offered
	// node 1's instance for its prefill, whose KV address refuses: node 2's engine prefills locally.
	st, timing, fb := tracedChat(t, n2.gateway, "metrics-fallback", longPrompt, 8, false)
	fbTimings, _ := fb["timings"].(map[string]any)
	remote, _ := fbTimings["remote_prefill"].(map[string]any)
	if st != 200 || fbTimings["prefill_source"] != "local" || remote == nil || remote["fallback_reason"] == nil {
		t.Fatalf("the fallback: status %d, timings %v", st, fbTimings)
	}
	for _, phase := range []string{"admission;dur=", "route;dur=", "queue;dur=", "prefill;dur=", "kv_wait;dur=", "ttft;dur=", "decode;dur=", "total;dur="} {
		if !strings.Contains(timing, phase) {
			t.Errorf("the fallback's Server-Timing %q has no %s", timing, phase)
		}
	}

	// Node 2's instance prefills for node 1's: node 2 forwards a long prompt to node 1, whose engine fetches
	// its KV from node 2.
	linkPD(t, n2, i2.ID, i1.ID, n1, n2)
	other := strings.Repeat("The harbour master logged every ship that came in before the storm. ", 20)
	st, timing, fw := tracedChat(t, n2.gateway, "metrics-forwarded", other, 8, false)
	fwTimings, _ := fw["timings"].(map[string]any)
	route, _ := fwTimings["route"].(map[string]any)
	if st != 200 || fwTimings["prefill_source"] != "remote" || route["forwarded"] != true || route["decode_node"] != id1 {
		t.Fatalf("the forwarded remote prefill: status %d, timings %v", st, fwTimings)
	}
	if _, ok := route["admission_ms"].(float64); !ok {
		t.Errorf("the route has no admission_ms: %v", route)
	}
	// The owner's phases, then the entry's own: its routing and the hop.
	for _, phase := range []string{"kv_transfer;dur=", "kv_ingest;dur=", "ttft;dur=", "route;dur=", "forward;dur="} {
		if !strings.Contains(timing, phase) {
			t.Errorf("the forwarded answer's Server-Timing %q has no %s", timing, phase)
		}
	}
	t.Logf("a forwarded remote prefill's Server-Timing: %s", timing)
	if strings.Index(timing, "forward;") < strings.Index(timing, "total;") {
		t.Errorf("Server-Timing %q: the entry's phases should follow the owner's", timing)
	}

	// A stream through the same hop: its header says what is known before the first byte.
	st, timing, _ = tracedChat(t, n2.gateway, "metrics-stream", "Hello there, lighthouse keeper", 12, true)
	if st != 200 || !strings.Contains(timing, "first_event;dur=") || !strings.Contains(timing, "forward;dur=") || strings.Contains(timing, "ttft") {
		t.Errorf("the stream: status %d, Server-Timing %q; want first_event and forward, and no engine phases", st, timing)
	}

	after1, after2 := scrapeMetrics(t, m1), scrapeMetrics(t, m2)
	const chat = `{api="chat",model="embedded"`
	for _, c := range []struct {
		what string
		s    [2]samples
		key  string
		want float64 // the delta; -1: more than zero
	}{
		// Node 2 took the three requests, ran the first and forwarded the others.
		{"node 2's requests", [2]samples{before2, after2}, `duet_requests_total` + chat + `,status="200"}`, 3},
		{"node 2's durations", [2]samples{before2, after2}, `duet_request_duration_seconds_count` + chat + `}`, 3},
		{"node 2's routing decisions", [2]samples{before2, after2}, `duet_router_decisions_total{outcome="routed"}`, 3},
		{"node 2's decision latencies", [2]samples{before2, after2}, `duet_router_decision_duration_seconds_count`, 3},
		{"node 2's hops sent", [2]samples{before2, after2}, `duet_forward_hops_total{direction="sent",outcome="answered"}`, 2},
		{"node 2's hop latencies", [2]samples{before2, after2}, `duet_forward_duration_seconds_count`, 2},
		{"node 2's generations", [2]samples{before2, after2}, `duet_time_to_first_token_seconds_count` + chat + `}`, 1},
		{"node 2's admissions", [2]samples{before2, after2}, `duet_admission_total{outcome="admitted"}`, 1},
		{"node 2's remote attempts", [2]samples{before2, after2}, `duet_remote_prefill_attempts_total{model="embedded"}`, 1},
		{"node 2's fallbacks", [2]samples{before2, after2}, `duet_remote_prefill_fallbacks_total{model="embedded",reason="unreachable"}`, 1},
		{"node 2's remote successes", [2]samples{before2, after2}, `duet_remote_prefill_successes_total{model="embedded"}`, 0},
		{"node 2's local prefills", [2]samples{before2, after2}, `duet_prefills_total{model="embedded",source="local"}`, 1},
		// Node 1 took two hops and ran them; it routed nothing and counts no request of its own.
		{"node 1's requests", [2]samples{before1, after1}, `duet_requests_total` + chat + `,status="200"}`, 0},
		{"node 1's routing decisions", [2]samples{before1, after1}, `duet_router_decisions_total{outcome="routed"}`, 0},
		{"node 1's hops received", [2]samples{before1, after1}, `duet_forward_hops_total{direction="received",outcome="ok"}`, 2},
		{"node 1's admissions", [2]samples{before1, after1}, `duet_admission_total{outcome="admitted"}`, 2},
		{"node 1's admission waits", [2]samples{before1, after1}, `duet_admission_wait_duration_seconds_count`, 2},
		{"node 1's first tokens", [2]samples{before1, after1}, `duet_time_to_first_token_seconds_count` + chat + `}`, 2},
		{"node 1's inter-token latencies", [2]samples{before1, after1}, `duet_inter_token_latency_seconds_count{model="embedded"}`, -1},
		{"node 1's prompt tokens", [2]samples{before1, after1}, `duet_prompt_tokens_total{model="embedded"}`, -1},
		{"node 1's generated tokens", [2]samples{before1, after1}, `duet_generation_tokens_total{model="embedded"}`, -1},
		{"node 1's remote attempts", [2]samples{before1, after1}, `duet_remote_prefill_attempts_total{model="embedded"}`, 1},
		{"node 1's remote successes", [2]samples{before1, after1}, `duet_remote_prefill_successes_total{model="embedded"}`, 1},
		{"node 1's remote prefills", [2]samples{before1, after1}, `duet_prefills_total{model="embedded",source="remote"}`, 1},
		{"node 1's local prefills", [2]samples{before1, after1}, `duet_prefills_total{model="embedded",source="local"}`, 1},
		{"node 1's fallbacks", [2]samples{before1, after1}, `duet_remote_prefill_fallbacks_total{model="embedded",reason="unreachable"}`, 0},
		{"node 1's KV transfers", [2]samples{before1, after1}, `duet_kv_transfer_duration_seconds_count{model="embedded"}`, 1},
		{"node 1's KV throughput", [2]samples{before1, after1}, `duet_kv_transfer_throughput_bytes_per_second_count{model="embedded"}`, 1},
	} {
		got := delta(c.s[0], c.s[1], c.key)
		if c.want == -1 && got <= 0 || c.want != -1 && got != c.want {
			t.Errorf("%s: %s moved by %v, want %v", c.what, c.key, got, c.want)
		}
	}
	if bytes, answer := delta(before1, after1, `duet_kv_received_bytes_total{model="embedded"}`), fwTimings["remote_prefill"].(map[string]any)["bytes"]; bytes <= 0 || bytes != answer {
		t.Errorf("node 1 counts %v KV bytes, the answer says %v", bytes, answer)
	}
	for _, c := range []struct {
		s   samples
		key string
	}{
		{after1, `duet_cluster_members{status="alive"}`},
		{after2, `duet_cluster_members{status="alive"}`},
		{after1, `duet_cluster_instances{status="ready"}`},
	} {
		if c.s[c.key] != 2 {
			t.Errorf("%s = %v, want 2", c.key, c.s[c.key])
		}
	}
	for _, key := range []string{`duet_engine_stats_up`, `duet_engine_queue_depth{instance="` + i1.ID + `"}`,
		`duet_instance_in_flight{instance="` + i1.ID + `",model="embedded"}`, `duet_admission_max_in_flight`,
		`duet_plugin_up{plugin="engine mlx-engine"}`, `duet_engine_kv_cache_capacity_bytes{instance="` + i1.ID + `"}`} {
		if _, ok := after1[key]; !ok {
			t.Errorf("node 1 has no %s", key)
		}
	}
	if after1[`duet_engine_stats_up`] != 1 || after1[`duet_plugin_up{plugin="engine mlx-engine"}`] != 1 {
		t.Errorf("node 1's engine is not up in its metrics")
	}
	// The request id followed the hop into node 1's log, and the KV request into node 2's engine's.
	if log := n1.stderr.String(); !strings.Contains(log, "request_id=metrics-forwarded") {
		t.Errorf("node 1's log does not name the forwarded request's id")
	}
	waitFor(t, 5*time.Second, "node 2's engine to log the KV export under the request's id", func() bool {
		return regexp.MustCompile(`KV export done:[^\n]* request_id=metrics-forwarded[ \n]`).MatchString(n2.stderr.String())
	})

	// Both nodes exported the forwarded request's spans, in one trace: node 1's under node 2's (through the
	// hop's traceparent), with the engine's phases under node 1's.
	var entry, owner *otlpSpan
	waitFor(t, 10*time.Second, "both nodes' spans of the forwarded request at the collector", func() bool {
		entry, owner = col.request("metrics-forwarded", id2), col.request("metrics-forwarded", id1)
		return entry != nil && owner != nil
	})
	if owner.traceID != entry.traceID || owner.parent != entry.spanID {
		t.Errorf("node 1's span (trace %s, parent %s) is not under node 2's (trace %s, span %s)", owner.traceID, owner.parent, entry.traceID, entry.spanID)
	}
	phases := col.children(owner.spanID)
	for _, name := range []string{"admission", "queue", "prefill", "kv_wait", "kv_transfer", "kv_ingest", "first_token", "decode"} {
		if phases[name] == nil {
			t.Errorf("node 1's span has no %s phase (it has %v)", name, phases)
		}
	}
	if ph := col.children(entry.spanID); ph["route"] == nil || ph["forward"] == nil {
		t.Errorf("node 2's span lacks route or forward: %v", ph)
	}
	if kv := phases["kv_transfer"]; kv != nil {
		want := fwTimings["remote_prefill"].(map[string]any)["transfer_ms"].(float64)
		if got := float64(kv.end-kv.start) / 1e6; got < want-0.01 || got > want+0.01 {
			t.Errorf("the kv_transfer span lasts %.3f ms, the answer's timings say %.3f", got, want)
		}
	}

	// Node 1's engine plugin dies and is restarted: counted once, and up again.
	pid := enginePID(t, n1.gateway)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "node 1's engine plugin back, in its metrics", func() bool {
		s := scrapeMetrics(t, m1)
		return s[`duet_plugin_restarts_total{plugin="engine mlx-engine"}`] == 1 && s[`duet_plugin_up{plugin="engine mlx-engine"}`] == 1
	})
	if s := scrapeMetrics(t, m2); s[`duet_plugin_restarts_total{plugin="engine mlx-engine"}`] != 0 {
		t.Errorf("node 2 counts a restart of its engine: %v", s[`duet_plugin_restarts_total{plugin="engine mlx-engine"}`])
	}
}

// TestMetricsAccess: on the API port /metrics takes an API key like every read (Prometheus sends one as its
// scrape_config's authorization); --metrics-listen serves /metrics alone, without one; --no-metrics serves
// none. A request refused before its body was read counts with model "unknown", not the client's string.
func TestMetricsAccess(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	g := startGateway(t, "--api-key", "k1", "--metrics-listen", addr)
	get := func(url, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get(g.url+"/metrics", ""); st != 401 || !strings.Contains(body, `"error"`) {
		t.Errorf("/metrics without a key: %d %s", st, body)
	}
	if st, body := get(g.url+"/metrics", "k1"); st != 200 || !strings.Contains(body, "duet_build_info") {
		t.Errorf("/metrics with the key: %d", st)
	}
	if st, _ := get(g.url+"/metrics", "wrong"); st != 401 {
		t.Errorf("/metrics with a wrong key: %d", st)
	}
	if st, _ := get("http://"+addr+"/v1/models", ""); st != 404 {
		t.Errorf("--metrics-listen serves the API: %d", st)
	}
	// A chat without a key, for a model the client invents: counted, but not under its name.
	req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions", strings.NewReader(`{"model":"made-up-by-a-client","messages":[]}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("a chat without a key: %v %v", resp, err)
	}
	s := scrapeMetrics(t, "http://"+addr+"/metrics")
	if s[`duet_requests_total{api="chat",model="unknown",status="401"}`] != 1 {
		t.Errorf("the refused chat is not counted as unknown 401")
	}
	for k := range s {
		if strings.Contains(k, "made-up-by-a-client") {
			t.Errorf("a client's model name labels %s", k)
		}
	}

	bare := startGateway(t, "--no-metrics")
	if st, _ := get(bare.url+"/metrics", ""); st != 404 {
		t.Errorf("/metrics with --no-metrics: %d", st)
	}
}

// otlpCollector is a fake OTLP/HTTP collector: it decodes each export request (protobuf) and keeps its spans
// with the node (service.instance.id) that sent them.
type otlpCollector struct {
	mu    sync.Mutex
	spans []*otlpSpan
}

type otlpSpan struct {
	name, node, traceID, spanID, parent string
	start, end                          uint64
	attrs                               map[string]string
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var req coltracepb.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		var node string
		for _, kv := range rs.Resource.GetAttributes() {
			if kv.Key == "service.instance.id" {
				node = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := &otlpSpan{name: s.Name, node: node, traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
					parent: hex.EncodeToString(s.ParentSpanId), start: s.StartTimeUnixNano, end: s.EndTimeUnixNano, attrs: map[string]string{}}
				for _, kv := range s.Attributes {
					sp.attrs[kv.Key] = kv.Value.GetStringValue()
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// request is node's span of the request with that id, or nil.
func (c *otlpCollector) request(id, node string) *otlpSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if s.name == "duet.request" && s.node == node && s.attrs["duet.request_id"] == id {
			return s
		}
	}
	return nil
}

// children are the spans under span, by name.
func (c *otlpCollector) children(span string) map[string]*otlpSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]*otlpSpan{}
	for _, s := range c.spans {
		if s.parent == span {
			out[s.name] = s
		}
	}
	return out
}

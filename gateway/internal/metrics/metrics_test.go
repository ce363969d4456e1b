package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-ai/duet/sdk/engine"
)

func testMetrics(t *testing.T, src Sources) *Metrics {
	t.Helper()
	if src.KnownModel == nil {
		src.KnownModel = func(m string) bool { return m == "m" || strings.HasPrefix(m, "served-") }
	}
	return New(src)
}

// TestLint runs Prometheus' own linter over every series, so a new one is held to the same conventions (base
// units, _total on counters, help text).
func TestLint(t *testing.T) {
	m := testMetrics(t, Sources{
		EngineStats: func(context.Context) (engine.Stats, error) {
			return engine.Stats{Instances: []engine.InstanceStats{{InstanceID: "i1"}}, Metrics: map[string]float64{"x_bytes": 1}}, nil
		},
		Instances: func() []Instance { return []Instance{{ID: "i1", Model: "m"}} },
		Admission: func() AdmissionState { return AdmissionState{MaxInFlight: 4} },
		Cluster:   func() (map[string]int, map[string]int) { return map[string]int{"alive": 2}, map[string]int{"ready": 2} },
		Plugins:   func() []Plugin { return []Plugin{{Name: "engine e", Running: true}} },
	})
	g := m.StartGeneration(APIChat, m.Model("m"), time.Now())
	g.Token(time.Now())
	g.Token(time.Now())
	g.Final(0, &engine.Final{Timings: engine.Timings{PrefillSource: engine.PrefillRemote,
		Remote: &engine.RemotePrefill{Attempts: 1, Bytes: 100, Transfer: time.Millisecond}}})
	m.Request(APIChat, m.Model("m"), 200, time.Second)
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "go_") || strings.HasPrefix(p.Metric, "process_") {
			continue
		}
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestNil: a server built without metrics calls every method on a nil *Metrics.
func TestNil(t *testing.T) {
	var m *Metrics
	m.Request(APIChat, m.Model("m"), 200, time.Second)
	g := m.StartGeneration(APIChat, "m", time.Now())
	g.Token(time.Now())
	g.Final(0, &engine.Final{})
	m.RouterDecision(time.Millisecond, Routed)
	m.Admission(0, Admitted)
	m.HopSent(HopAnswered, time.Millisecond)
	m.HopReceived(HopOK)
	m.EstimateError("remote", "total", 0.1)
}

// TestEstimateError: estimate errors go into a histogram per placement and phase; other label values are
// dropped, so the series stay a fixed set.
func TestEstimateError(t *testing.T) {
	m := testMetrics(t, Sources{})
	m.EstimateError("remote", "total", 0.2)
	m.EstimateError("remote", "total", -0.3)
	m.EstimateError("local", "first_token", 0.01)
	m.EstimateError("elsewhere", "total", 1)
	m.EstimateError("local", "decode", 1)
	if n := testutil.CollectAndCount(m.estimateError); n != 4 {
		t.Errorf("%d estimate error series, want 4 (2 placements × 2 phases)", n)
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "duet_pd_estimate_error_ratio" {
			continue
		}
		for _, s := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["placement"] == "remote" && labels["phase"] == "total" {
				found = true
				if h := s.GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() > -0.0999 || h.GetSampleSum() < -0.1001 {
					t.Errorf("remote total: %d samples summing to %v, want 2 summing to −0.1", h.GetSampleCount(), h.GetSampleSum())
				}
			}
		}
	}
	if !found {
		t.Error("no remote total series")
	}
}

// TestModelLabel: a client's model name is a label value only when the cluster serves it, and at most
// MaxModels of them.
func TestModelLabel(t *testing.T) {
	m := testMetrics(t, Sources{})
	for _, tc := range []struct{ in, want string }{
		{"m", "m"}, {"", ModelUnknown}, {"not-served", ModelUnknown}, {strings.Repeat("x", 1000), ModelUnknown},
	} {
		if got := m.Model(tc.in); got != tc.want {
			t.Errorf("Model(%.20q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for i := range MaxModels + 10 {
		m.Model(fmt.Sprintf("served-%d", i))
	}
	if got := m.Model("served-0"); got != ModelUnknown && got != "served-0" {
		t.Errorf("served-0 = %q", got)
	}
	if got := m.Model(fmt.Sprintf("served-%d", MaxModels+5)); got != ModelOther {
		t.Errorf("a model past MaxModels = %q, want %q", got, ModelOther)
	}
	if got := m.Model("m"); got != "m" {
		t.Errorf("m = %q after the bound", got) // the first one keeps its label
	}
}

// TestGeneration: tokens give one time to first token and an inter-token latency per later token; the finals
// count tokens, prefills, remote attempts, bytes and fallbacks.
func TestGeneration(t *testing.T) {
	m := testMetrics(t, Sources{})
	t0 := time.Now()
	g := m.StartGeneration(APIChat, "m", t0)
	for i := range 4 {
		g.Token(t0.Add(time.Duration(i+1) * 10 * time.Millisecond))
	}
	g.Final(0, &engine.Final{Usage: engine.Usage{PromptTokens: 100, CompletionTokens: 4, CachedTokens: 10},
		Timings: engine.Timings{PrefillSource: engine.PrefillRemote,
			Remote: &engine.RemotePrefill{Attempts: 2, Bytes: 1 << 20, Transfer: 10 * time.Millisecond}}})
	g.Final(1, &engine.Final{Usage: engine.Usage{PromptTokens: 100, CompletionTokens: 3}})
	g2 := m.StartGeneration(APICompletions, "m", t0)
	g2.Final(0, &engine.Final{Usage: engine.Usage{PromptTokens: 50}, Timings: engine.Timings{PrefillSource: engine.PrefillLocal,
		Remote: &engine.RemotePrefill{Attempts: 1, FallbackReason: "kvwire: connection lost: dialing 127.0.0.1:1: connect: connection refused"}}})

	for name, c := range map[string]struct{ got, want float64 }{
		"prompt":    {testutil.ToFloat64(m.promptTokens.WithLabelValues("m")), 150},
		"cached":    {testutil.ToFloat64(m.cachedTokens.WithLabelValues("m")), 10},
		"generated": {testutil.ToFloat64(m.genTokens.WithLabelValues("m")), 7},
		"attempts":  {testutil.ToFloat64(m.remoteAttempts.WithLabelValues("m")), 3},
		"successes": {testutil.ToFloat64(m.remoteSuccesses.WithLabelValues("m")), 1},
		"kv bytes":  {testutil.ToFloat64(m.kvBytes.WithLabelValues("m")), 1 << 20},
		"remote":    {testutil.ToFloat64(m.prefills.WithLabelValues("m", "remote")), 1},
		"local":     {testutil.ToFloat64(m.prefills.WithLabelValues("m", "local")), 1},
		"fallback":  {testutil.ToFloat64(m.remoteFallbacks.WithLabelValues("m", ReasonUnreachable)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.itl); n != 1 {
		t.Errorf("%d itl series", n)
	}
	out := scrape(t, m)
	for _, want := range []string{
		`duet_time_to_first_token_seconds_count{api="chat",model="m"} 1`,
		`duet_time_to_first_token_seconds_bucket{api="chat",model="m",le="0.01"} 1`,
		`duet_inter_token_latency_seconds_count{model="m"} 3`,
		`duet_kv_transfer_throughput_bytes_per_second_count{model="m"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no %s in\n%s", want, grep(out, "duet_"))
		}
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func grep(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestStatsPolledAtBoundedRate: however many scrapers, concurrent or not, the engine's Stats is called at most
// once per StatsEvery; a failing engine reads as duet_engine_stats_up 0, not a failed scrape.
func TestStatsPolledAtBoundedRate(t *testing.T) {
	var mu sync.Mutex
	fail := false
	m := testMetrics(t, Sources{
		StatsEvery: time.Hour,
		EngineStats: func(context.Context) (engine.Stats, error) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return engine.Stats{}, errors.New("down")
			}
			return engine.Stats{Instances: []engine.InstanceStats{{InstanceID: "i1", Queued: 3, InFlight: 2,
				PrefixCache: engine.PrefixCacheStats{Hits: 5}}, {InstanceID: "someone-elses"}}}, nil
		},
		Instances: func() []Instance { return []Instance{{ID: "i1", Model: "m", InFlight: 2}} },
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				scrape(t, m)
			}
		})
	}
	wg.Wait()
	if n := m.StatsCalls(); n != 1 {
		t.Errorf("Stats called %d times by 40 scrapes within StatsEvery, want 1", n)
	}
	out := scrape(t, m)
	for _, want := range []string{`duet_engine_queue_depth{instance="i1"} 3`, `duet_engine_in_flight{instance="i1"} 2`,
		`duet_instance_in_flight{instance="i1",model="m"} 2`, `duet_prefix_cache_hits_total{instance="i1"} 5`, `duet_engine_stats_up 1`} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("no %s in\n%s", want, grep(out, "duet_"))
		}
	}
	if strings.Contains(out, "someone-elses") {
		t.Error("an instance that is not this node's labels a series")
	}

	m2 := testMetrics(t, Sources{StatsEvery: time.Millisecond, EngineStats: func(context.Context) (engine.Stats, error) {
		return engine.Stats{}, errors.New("down")
	}})
	if out := scrape(t, m2); !strings.Contains(out, "duet_engine_stats_up 0\n") {
		t.Errorf("a failing engine: %s", grep(out, "duet_engine"))
	}
}

// TestEngineMetricsBounded: an engine's own figures are at most maxEngineMetrics series.
func TestEngineMetricsBounded(t *testing.T) {
	figures := map[string]float64{}
	for i := range 1000 {
		figures[fmt.Sprintf("f%04d", i)] = float64(i)
	}
	m := testMetrics(t, Sources{EngineStats: func(context.Context) (engine.Stats, error) {
		return engine.Stats{Metrics: figures}, nil
	}})
	if n := strings.Count(scrape(t, m), "\nduet_engine_metric{"); n != maxEngineMetrics {
		t.Errorf("%d engine figures exported, want %d", n, maxEngineMetrics)
	}
}

func TestFallbackClass(t *testing.T) {
	for _, tc := range []struct{ reason, want string }{
		{"kvwire: connection lost: dialing 10.0.0.1:7000: dial tcp 10.0.0.1:7000: connect: connection refused", ReasonUnreachable},
		{"kvwire: timeout: waiting for a frame: read tcp: i/o timeout", ReasonTimeout},
		{"kvwire: connection lost: reading a frame: EOF", ReasonConnLost},
		{"kvwire: remote error 503: busy", ReasonBusy},
		{"kvwire: remote error 400: bad request", ReasonRejected},
		{"kvwire: protocol error: frame of 5 GB", ReasonProtocol},
		{"the peer serves model a, not b", ReasonIncompatible},
		{"context canceled", ReasonCancelled},
		{"something new", ReasonOther},
		{"", ReasonOther},
		// every endpoint's error, one per line: the last decides
		{"kvwire: remote error 503: busy\nkvwire: connection lost: dialing x: connect: connection refused", ReasonUnreachable},
	} {
		if got := FallbackClass(tc.reason); got != tc.want {
			t.Errorf("FallbackClass(%q) = %q, want %q", tc.reason, got, tc.want)
		}
	}
}

// BenchmarkRequest is what the metrics cost one generation of two tokens on the request path: its model label,
// routing decision, admission, tokens, final and the request's count. (The gateway's own added latency is
// about a millisecond: see BenchmarkGatewayOverhead in gateway/e2e.)
func BenchmarkRequest(b *testing.B) {
	m := New(Sources{KnownModel: func(string) bool { return true }})
	final := &engine.Final{Usage: engine.Usage{PromptTokens: 10, CompletionTokens: 2},
		Timings: engine.Timings{PrefillSource: engine.PrefillLocal}}
	b.ReportAllocs()
	for b.Loop() {
		model := m.Model("m")
		m.RouterDecision(3*time.Microsecond, Routed)
		m.Admission(time.Microsecond, Admitted)
		g := m.StartGeneration(APIChat, model, time.Now())
		g.Token(time.Now())
		g.Token(time.Now())
		g.Final(0, final)
		m.Request(APIChat, model, 200, time.Millisecond)
	}
}

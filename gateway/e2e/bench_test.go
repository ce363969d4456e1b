package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/duet-ai/duet/bench"
	"github.com/duet-ai/duet/sdk/engine"
)

// The benchmarks measure what the gateway adds on top of the engine plugin, with the echo engine so that the
// model costs nothing: each iteration calls the plugin directly (gRPC, as the gateway does) and then through
// the gateway (HTTP + JSON + routing + gRPC), and reports percentiles of both and of the difference.
//
//	go test ./gateway/e2e -run '^$' -bench . -benchtime 2000x

// directEngine starts the built-in echo engine as a plugin subprocess, as the gateway would.
func directEngine(b *testing.B) (engine.Engine, string) {
	b.Helper()
	cfg := engine.ClientConfig()
	cfg.Cmd = exec.Command(duetBin, "plugin", "engine", "echo")
	cfg.AutoMTLS = true
	cfg.Logger = hclog.NewNullLogger()
	e, pc, err := engine.Connect(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pc.Kill)
	d, err := e.Load(context.Background(), engine.LoadRequest{Model: "echo"})
	if err != nil {
		b.Fatal(err)
	}
	return e, d.InstanceID
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// BenchmarkGatewayOverhead: "short" prompts are estimated for the router from their bytes; "long" ones (2 KB,
// past --tokenize-min-bytes) are tokenized by the engine for the router first, which is what the exact prompt
// length and the prefix hashes cost.
func BenchmarkGatewayOverhead(b *testing.B) {
	// Two gateways: the default, which counts every request in its metrics and traces it (Server-Timing,
	// timings), and one started with --no-metrics; each iteration asks the plugin directly and then both, so
	// that drift of a busy machine falls on all three alike.
	g := startGateway(b)
	bare := startGateway(b, "--no-metrics")
	e, instance := directEngine(b)
	for _, c := range []struct{ name, prompt string }{
		{"short", "hello world"},
		{"long-tokenized", strings.Repeat("hello world ", 180)},
	} {
		b.Run(c.name, func(b *testing.B) { gatewayOverhead(b, g, bare, e, instance, c.prompt) })
	}
}

func gatewayOverhead(b *testing.B, g, bare *gateway, e engine.Engine, instance, prompt string) {
	ctx := context.Background()
	body := []byte(fmt.Sprintf(`{"model":"echo","temperature":0,"max_tokens":1,"messages":[{"role":"user","content":%q}]}`, prompt))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	req := engine.GenerateRequest{InstanceID: instance, Messages: []engine.Message{{Role: "user", Content: prompt}}, Sampling: engine.Sampling{MaxTokens: 1}}
	direct := func() {
		if err := e.Generate(ctx, req, func(engine.Event) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	via := func(g *gateway) {
		resp, err := client.Post(g.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	for range 200 { // warm up connections and caches
		direct()
		via(g)
		via(bare)
	}
	var ds, gs, ns, diffs []time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		direct()
		t1 := time.Now()
		// Alternate which gateway goes first, so neither always follows the plugin call.
		first, second := g, bare
		if i%2 == 1 {
			first, second = bare, g
		}
		via(first)
		t2 := time.Now()
		via(second)
		t3 := time.Now()
		ds = append(ds, t1.Sub(t0))
		if i%2 == 0 {
			gs, ns = append(gs, t2.Sub(t1)), append(ns, t3.Sub(t2))
		} else {
			ns, gs = append(ns, t2.Sub(t1)), append(gs, t3.Sub(t2))
		}
		diffs = append(diffs, gs[len(gs)-1]-ns[len(ns)-1])
	}
	b.StopTimer()
	b.ReportMetric(us(percentile(ds, 0.5)), "direct-p50-µs")
	b.ReportMetric(us(percentile(ds, 0.99)), "direct-p99-µs")
	b.ReportMetric(us(percentile(gs, 0.5)), "gateway-p50-µs")
	b.ReportMetric(us(percentile(gs, 0.99)), "gateway-p99-µs")
	added, addedBare := percentile(gs, 0.5)-percentile(ds, 0.5), percentile(ns, 0.5)-percentile(ds, 0.5)
	b.ReportMetric(us(added), "added-p50-µs")
	b.ReportMetric(us(percentile(gs, 0.99)-percentile(ds, 0.99)), "added-p99-µs")
	b.ReportMetric(us(addedBare), "nometrics-added-p50-µs")
	b.ReportMetric(us(percentile(ns, 0.99)-percentile(ds, 0.99)), "nometrics-added-p99-µs")
	// What the metrics and the trace add, as a share of what the gateway adds without them.
	b.ReportMetric(100*float64(added-addedBare)/float64(addedBare), "metrics-cost-p50-%")
	b.ReportMetric(us(percentile(diffs, 0.5)), "metrics-paired-p50-µs") // the median of each iteration's difference
	b.ReportMetric(0, "ns/op")
}

// BenchmarkStreamThroughput streams many tokens per request, directly from the plugin and through the
// gateway's SSE, and reports tokens per second for both.
func BenchmarkStreamThroughput(b *testing.B) {
	const tokens = 200_000
	g := startGateway(b)
	e, instance := directEngine(b)
	ctx := context.Background()
	req := engine.GenerateRequest{InstanceID: instance, Prompt: strings.Repeat("word ", 50), Sampling: engine.Sampling{MaxTokens: tokens}}
	var directDur, gatewayDur time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		n, err := bench.GeneratedTokens(ctx, e, req)
		if err != nil || n != tokens {
			b.Fatalf("direct: %d tokens, %v", n, err)
		}
		directDur += time.Since(t0)

		t1 := time.Now()
		body := fmt.Sprintf(`{"model":"echo","temperature":0,"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"prompt":%q}`, tokens, req.Prompt)
		resp, err := http.Post(g.url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		got, err := bench.StreamedTokens(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		if got != tokens {
			b.Fatalf("gateway: usage says %d tokens", got)
		}
		gatewayDur += time.Since(t1)
	}
	b.StopTimer()
	b.ReportMetric(float64(tokens*b.N)/directDur.Seconds(), "direct-tok/s")
	b.ReportMetric(float64(tokens*b.N)/gatewayDur.Seconds(), "gateway-tok/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkForwardOverhead measures what a hop adds: two gateways in one cluster on 127.0.0.1 and .2, the
// second serving the model; each iteration asks the second directly and then through the first, which
// forwards (authenticated, decision pinned), and reports the percentiles of both and of the difference.
func BenchmarkForwardOverhead(b *testing.B) {
	port := clusterPort(b)
	secret := filepath.Join(b.TempDir(), "secret")
	os.WriteFile(secret, []byte("a benchmark's cluster secret, long enough\n"), 0o600)
	owner := startDuetWith(b, duetOptions{listen: "127.0.0.2:" + port}, "--engine", "echo", "--model", "echo",
		"--cluster-secret-file", secret)
	entry := startDuetWith(b, duetOptions{listen: "127.0.0.1:" + port}, "--engine", "echo", "--model", "other",
		"--cluster-secret-file", secret, "--join", "127.0.0.2")
	body := []byte(`{"model":"echo","temperature":0,"max_tokens":1,"messages":[{"role":"user","content":"hello world"}]}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	ask := func(g *gateway) http.Header {
		resp, err := client.Post(g.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header
	}
	deadline := time.Now().Add(20 * time.Second)
	for ask(entry).Get("X-Duet-Forwarded-To") == "" {
		if time.Now().After(deadline) {
			b.Fatal("the entry gateway never forwarded")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 200 {
		ask(owner)
		ask(entry)
	}
	var ds, fs []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		ask(owner)
		t1 := time.Now()
		ask(entry)
		t2 := time.Now()
		ds = append(ds, t1.Sub(t0))
		fs = append(fs, t2.Sub(t1))
	}
	b.StopTimer()
	b.ReportMetric(us(percentile(ds, 0.5)), "direct-p50-µs")
	b.ReportMetric(us(percentile(ds, 0.99)), "direct-p99-µs")
	b.ReportMetric(us(percentile(fs, 0.5)), "forwarded-p50-µs")
	b.ReportMetric(us(percentile(fs, 0.99)), "forwarded-p99-µs")
	b.ReportMetric(us(percentile(fs, 0.5)-percentile(ds, 0.5)), "added-p50-µs")
	b.ReportMetric(0, "ns/op")
}

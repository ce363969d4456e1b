package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/sdk/engine"
)

// `duet bench gateway` measures what the gateway adds on top of its engine plugin, as gateway/e2e/bench_test.go
// does, with the echo engine so that the model costs nothing: each iteration calls the plugin directly (gRPC,
// as the gateway does) and then through a gateway (HTTP, JSON, admission, routing, gRPC), and the report gives
// the percentiles of both and of the difference; then a long stream's tokens per second both ways (SSE).

// GatewayOptions are `duet bench gateway`'s flags.
type GatewayOptions struct {
	Requests     int    `json:"requests"`
	Warmup       int    `json:"warmup"`
	StreamTokens int    `json:"stream_tokens"`
	Streams      int    `json:"streams"`
	Out          string `json:"-"`
	SVG          string `json:"-"`
	Quiet        bool   `json:"-"`
	Exe          string `json:"-"`
}

const gatewayUsage = `Measure the gateway's added latency and streaming throughput: a duet gateway on loopback with the echo
engine, against the same engine plugin called directly over its gRPC contract, as go test -bench
GatewayOverhead and StreamThroughput do. Requests alternate direct and through the gateway, so both see the
same machine.

Example:
  duet bench gateway --requests 2000 --stream-tokens 200000 --out gateway.json`

// ParseGateway reads `duet bench gateway`'s flags.
func ParseGateway(args []string, stderr io.Writer) (GatewayOptions, error) {
	var o GatewayOptions
	fs := newFlagSet("gateway", gatewayUsage, stderr)
	fs.IntVar(&o.Requests, "requests", 2000, "measured requests per case, each direct and through the gateway")
	fs.IntVar(&o.Warmup, "warmup", 200, "warm-up requests per case (connections, caches), not measured")
	fs.IntVar(&o.StreamTokens, "stream-tokens", 200000, "tokens per stream in the throughput test (0: skip it)")
	fs.IntVar(&o.Streams, "streams", 3, "streams each way in the throughput test")
	fs.StringVar(&o.Out, "out", "", "write the results as JSON to this file")
	fs.StringVar(&o.SVG, "svg", "", "write a chart as SVG to this file")
	fs.BoolVar(&o.Quiet, "quiet", false, "no progress output")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	var errs []error
	if o.Requests < 1 {
		errs = append(errs, fmt.Errorf("--requests %d: must be at least 1", o.Requests))
	}
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--warmup %d: must not be negative", o.Warmup))
	}
	if o.StreamTokens < 0 || (o.StreamTokens > 0 && o.Streams < 1) {
		errs = append(errs, errors.New("--stream-tokens must not be negative, and --streams must be at least 1 when it is not 0"))
	}
	return o, errors.Join(errs...)
}

// GatewayReport is `duet bench gateway`'s JSON.
type GatewayReport struct {
	Bench     string          `json:"bench"` // "gateway"
	Version   string          `json:"duet_version"`
	StartedAt time.Time       `json:"started_at"`
	Options   GatewayOptions  `json:"options"`
	Latency   []GatewayCase   `json:"latency"`
	Stream    *GatewayStreams `json:"stream,omitempty"`
}

// GatewayCase is one request shape: percentiles in microseconds of a direct call, of the same request through
// the gateway, and their difference at p50 and p99.
type GatewayCase struct {
	Case        string      `json:"case"`
	PromptBytes int         `json:"prompt_bytes"`
	DirectUs    Percentiles `json:"direct_us"`
	GatewayUs   Percentiles `json:"gateway_us"`
	AddedP50Us  float64     `json:"added_p50_us"`
	AddedP99Us  float64     `json:"added_p99_us"`
}

// GatewayStreams is the throughput test: tokens per second of long streams, direct and through the gateway.
type GatewayStreams struct {
	Tokens         int     `json:"tokens"`
	Streams        int     `json:"streams"`
	DirectTokPerS  float64 `json:"direct_tokens_per_s"`
	GatewayTokPerS float64 `json:"gateway_tokens_per_s"`
	Ratio          float64 `json:"gateway_over_direct"`
}

// gatewayCases are the request shapes: a short prompt (estimated for the router from its bytes) and a 2 KB
// one, past --tokenize-min-bytes, which the gateway has the engine tokenize for the router first.
var gatewayCases = []struct{ name, prompt string }{
	{"short", "hello world"},
	{"long-tokenized", strings.Repeat("hello world ", 180)},
}

// RunGateway runs `duet bench gateway`.
func RunGateway(ctx context.Context, o GatewayOptions, version string, stdout, stderr io.Writer) error {
	exe, err := executable(o.Exe)
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "duet-bench-gateway-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	streams := 0
	if o.StreamTokens > 0 {
		streams = o.Streams
	}
	prog := newProgress(stderr, len(gatewayCases)*((o.Requests+o.Warmup+99)/100)+2*streams, o.Quiet)
	defer prog.finish()
	prog.logf("starting a duet gateway with the echo engine on 127.0.0.1, and the echo engine plugin alone")
	g, err := startNode(ctx, exe, root, nodeSpec{Name: "gateway", Host: "127.0.0.1", CPU: -1, Args: []string{"--engine", "echo", "--model", "echo"}}, pinning{}, "")
	if err != nil {
		return err
	}
	defer g.stop()
	a := newAPI("", "")
	if _, err := oneReady(ctx, a, g.URL, "", time.Minute); err != nil {
		return err
	}
	cfg := engine.ClientConfig()
	cfg.Cmd = exec.Command(exe, "plugin", "engine", "echo")
	cfg.AutoMTLS = true
	cfg.Logger = hclog.NewNullLogger()
	e, pc, err := engine.Connect(cfg)
	if err != nil {
		return fmt.Errorf("starting the echo engine plugin: %w", err)
	}
	defer pc.Kill()
	d, err := e.Load(ctx, engine.LoadRequest{Model: "echo"})
	if err != nil {
		return err
	}

	rep := &GatewayReport{Bench: "gateway", Version: version, StartedAt: time.Now().UTC(), Options: o}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, c := range gatewayCases {
		gc, err := overhead(ctx, prog, e, d.InstanceID, client, g.URL, c.name, c.prompt, o)
		if err != nil {
			return err
		}
		rep.Latency = append(rep.Latency, gc)
	}
	if o.StreamTokens > 0 {
		st, err := streamThroughput(ctx, prog, e, d.InstanceID, g.URL, o)
		if err != nil {
			return err
		}
		rep.Stream = st
	}
	prog.finish()
	rep.Table().Render(stdout)
	return writeFiles(rep, o.Out, o.SVG)
}

func overhead(ctx context.Context, prog *progress, e engine.Engine, instance string, client *http.Client, base, name, prompt string, o GatewayOptions) (GatewayCase, error) {
	body := []byte(fmt.Sprintf(`{"model":"echo","temperature":0,"max_tokens":1,"messages":[{"role":"user","content":%q}]}`, prompt))
	req := engine.GenerateRequest{InstanceID: instance, Messages: []engine.Message{{Role: "user", Content: prompt}}, Sampling: engine.Sampling{MaxTokens: 1}}
	direct := func() error { return e.Generate(ctx, req, func(engine.Event) error { return nil }) }
	viaGateway := func() error {
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("the gateway answered %d", resp.StatusCode)
		}
		return nil
	}
	var ds, gs []time.Duration
	for i := range o.Warmup + o.Requests {
		if i%100 == 0 {
			if i > 0 {
				prog.advance()
			}
			prog.step("%s: request %d of %d (%d warm-up)", name, i, o.Warmup+o.Requests, o.Warmup)
		}
		t0 := time.Now()
		if err := direct(); err != nil {
			return GatewayCase{}, fmt.Errorf("direct call: %w", err)
		}
		t1 := time.Now()
		if err := viaGateway(); err != nil {
			return GatewayCase{}, err
		}
		t2 := time.Now()
		if i >= o.Warmup {
			ds, gs = append(ds, t1.Sub(t0)), append(gs, t2.Sub(t1))
		}
		if err := ctx.Err(); err != nil {
			return GatewayCase{}, err
		}
	}
	prog.advance()
	us := func(ds []time.Duration) Percentiles {
		p := SummarizeDurations(ds)
		return Percentiles{N: p.N, Mean: round(p.Mean*1000, 4), P50: round(p.P50*1000, 4), P90: round(p.P90*1000, 4), P99: round(p.P99*1000, 4), Max: round(p.Max*1000, 4)}
	}
	gc := GatewayCase{Case: name, PromptBytes: len(prompt), DirectUs: us(ds), GatewayUs: us(gs)}
	gc.AddedP50Us, gc.AddedP99Us = round(gc.GatewayUs.P50-gc.DirectUs.P50, 4), round(gc.GatewayUs.P99-gc.DirectUs.P99, 4)
	return gc, nil
}

func streamThroughput(ctx context.Context, prog *progress, e engine.Engine, instance, base string, o GatewayOptions) (*GatewayStreams, error) {
	prompt := strings.Repeat("word ", 50)
	req := engine.GenerateRequest{InstanceID: instance, Prompt: prompt, Sampling: engine.Sampling{MaxTokens: o.StreamTokens}}
	var direct, gateway time.Duration
	for i := range o.Streams {
		prog.step("stream %d/%d of %d tokens, direct", i+1, o.Streams, o.StreamTokens)
		t0 := time.Now()
		n, err := GeneratedTokens(ctx, e, req)
		if err != nil || n != o.StreamTokens {
			return nil, fmt.Errorf("direct stream: %d tokens of %d, %v", n, o.StreamTokens, err)
		}
		direct += time.Since(t0)
		prog.advance()

		prog.step("stream %d/%d of %d tokens, through the gateway", i+1, o.Streams, o.StreamTokens)
		t1 := time.Now()
		got, err := countStream(ctx, base, prompt, o.StreamTokens)
		if err != nil {
			return nil, err
		}
		if got != o.StreamTokens {
			return nil, fmt.Errorf("gateway stream: usage says %d tokens of %d", got, o.StreamTokens)
		}
		gateway += time.Since(t1)
		prog.advance()
	}
	tokens := float64(o.StreamTokens * o.Streams)
	st := &GatewayStreams{Tokens: o.StreamTokens, Streams: o.Streams,
		DirectTokPerS: round(tokens/direct.Seconds(), 5), GatewayTokPerS: round(tokens/gateway.Seconds(), 5)}
	st.Ratio = round(st.GatewayTokPerS/st.DirectTokPerS, 4)
	return st, nil
}

// GeneratedTokens generates req on the engine plugin directly and counts the tokens it streams.
func GeneratedTokens(ctx context.Context, e engine.Engine, req engine.GenerateRequest) (int, error) {
	n := 0
	err := e.Generate(ctx, req, func(ev engine.Event) error {
		if ev.Token != nil {
			n++
		}
		return nil
	})
	return n, err
}

// countStream streams a completion through the gateway and returns the usage's token count, reading the
// stream as a fast client does: lines scanned, only the usage chunk decoded.
func countStream(ctx context.Context, base, prompt string, tokens int) (int, error) {
	body := fmt.Sprintf(`{"model":"echo","temperature":0,"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"prompt":%q}`, tokens, prompt)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("gateway stream: %w", client.ReadError(resp))
	}
	return StreamedTokens(resp.Body)
}

// StreamedTokens is the completion_tokens of the usage chunk of an OpenAI completion stream (SSE), read as a
// fast client reads it: lines scanned, only the usage chunk decoded; 0 when the stream has none.
func StreamedTokens(r io.Reader) (int, error) {
	got := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Contains(line, []byte(`"usage":{`)) {
			var ch struct {
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			_ = json.Unmarshal(bytes.TrimPrefix(line, []byte("data: ")), &ch)
			got = ch.Usage.CompletionTokens
		}
	}
	return got, sc.Err()
}

// Table is the report as text.
func (rep *GatewayReport) Table() Table {
	t := Table{
		Title:  fmt.Sprintf("gateway: %d requests per case (max_tokens 1, echo engine), direct gRPC call vs through the gateway", rep.Options.Requests),
		Header: []string{"case", "direct p50", "direct p99", "gateway p50", "gateway p99", "added p50", "added p99"},
	}
	for _, c := range rep.Latency {
		t.Rows = append(t.Rows, []string{fmt.Sprintf("%s (%d B)", c.Case, c.PromptBytes), fmtUs(c.DirectUs.P50), fmtUs(c.DirectUs.P99),
			fmtUs(c.GatewayUs.P50), fmtUs(c.GatewayUs.P99), fmtUs(c.AddedP50Us), fmtUs(c.AddedP99Us)})
	}
	if s := rep.Stream; s != nil {
		t.Footer = append(t.Footer, fmt.Sprintf("  streaming %d × %d tokens: direct %.0f tok/s, through the gateway (SSE) %.0f tok/s (%.2f×)",
			s.Streams, s.Tokens, s.DirectTokPerS, s.GatewayTokPerS, s.Ratio))
	}
	return t
}

// Chart draws the latencies and the throughput.
func (rep *GatewayReport) Chart() Chart {
	c := Chart{Title: "duet bench gateway", Subtitle: []string{fmt.Sprintf("echo engine; %d requests per case, direct gRPC call vs through the gateway", rep.Options.Requests)}}
	lat := Panel{Title: "Latency of a one-token request", Unit: "µs", Series: []string{"direct p50", "gateway p50", "direct p99", "gateway p99"}}
	for _, gc := range rep.Latency {
		lat.Groups = append(lat.Groups, gc.Case)
		lat.Values = append(lat.Values, []float64{gc.DirectUs.P50, gc.GatewayUs.P50, gc.DirectUs.P99, gc.GatewayUs.P99})
	}
	c.Panels = append(c.Panels, lat)
	if s := rep.Stream; s != nil {
		c.Panels = append(c.Panels, Panel{Title: fmt.Sprintf("Streaming throughput, %d-token streams", s.Tokens), Unit: "tokens/s",
			Series: []string{"direct", "gateway"}, Groups: []string{"stream"}, Values: [][]float64{{s.DirectTokPerS, s.GatewayTokPerS}}})
	}
	return c
}

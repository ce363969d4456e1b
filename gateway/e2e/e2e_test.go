package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/sdk/engine"
	"github.com/duet-ai/duet/sdk/enginetest"
)

// The end-to-end tests run the real duet binary, built once in TestMain, with real plugin subprocesses: the
// built-in echo engine and round-robin router, or this test binary itself as an external engine plugin
// (faultyEngine), and drive it with the official OpenAI Go client, and its own API with gateway/client.

var duetBin string

func TestMain(m *testing.M) {
	enginetest.ServePluginIfRequested(func() engine.Engine { return newFaultyEngine() })
	dir, err := os.MkdirTemp("", "duet-e2e-")
	if err != nil {
		panic(err)
	}
	duetBin = filepath.Join(dir, "duet")
	build := exec.Command("go", "build", "-o", duetBin, "github.com/duet-ai/duet/gateway")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building duet:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type gateway struct {
	url    string
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}  // closed when duet has exited
	http   *http.Client   // trusts the gateway's certificate when it serves TLS
	api    *client.Client // the gateway's own API, without a key
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startGateway runs duet with args and waits until /healthz answers 200.
func startGateway(t testing.TB, args ...string) *gateway {
	t.Helper()
	return startDuet(t, append([]string{"--engine", "echo", "--model", "echo"}, args...)...)
}

// startDuet runs duet with exactly args (and a free --listen address).
func startDuet(t testing.TB, args ...string) *gateway {
	t.Helper()
	return startDuetCmd(t, nil, args...)
}

// startDuetCmd is startDuet with a chance to adjust the command before it starts.
func startDuetCmd(t testing.TB, setup func(*exec.Cmd), args ...string) *gateway {
	t.Helper()
	return startDuetWith(t, duetOptions{setup: setup}, args...)
}

// duetOptions adjust how a test starts duet.
type duetOptions struct {
	setup  func(*exec.Cmd)
	listen string       // default: a free port on 127.0.0.1
	client *http.Client // default: http.DefaultClient; set it (and https) for a gateway that serves TLS
	https  bool
	// prefix runs duet under another command, e.g. ip netns exec <ns>.
	prefix []string
}

func startDuetWith(t testing.TB, o duetOptions, args ...string) *gateway {
	t.Helper()
	addr := o.listen
	if addr == "" {
		addr = freeAddr(t)
	}
	base := []string{"--listen", addr}
	if !slices.Contains(args, "--data-dir") {
		base = append(base, "--data-dir", t.TempDir()) // one node id, keyring and serf snapshot per gateway
	}
	argv := append(append(append([]string(nil), o.prefix...), duetBin), append(base, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "DUET_ENGINETEST_PLUGIN=1", "DUET_CLUSTER_TIMINGS=local")
	if o.setup != nil {
		o.setup(cmd)
	}
	scheme := "http"
	if o.https {
		scheme = "https"
	}
	if o.client == nil {
		o.client = http.DefaultClient
	}
	g := &gateway{url: scheme + "://" + addr, cmd: cmd, stderr: &syncBuffer{}, http: o.client}
	g.api = client.New(g.url, client.WithHTTPClient(g.http))
	cmd.Stderr = g.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	g.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("duet did not stop within 15s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("duet stderr:\n%s", g.stderr.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("duet exited during start:\n%s", g.stderr.String())
		default:
		}
		if _, err := g.api.Health(context.Background()); err == nil {
			return g
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("duet did not become healthy:\n%s", g.stderr.String())
	return nil
}

// startFaulty runs duet with this test binary as its engine plugin.
func startFaulty(t testing.TB, args ...string) *gateway {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startGateway(t, append([]string{"--engine", exe}, args...)...)
}

func (g *gateway) client(opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(g.url + "/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithRequestTimeout(30 * time.Second), option.WithHTTPClient(g.http),
	}, opts...)...)
}

// as is a client of the gateway's own API that sends key (as its API and its admin key).
func (g *gateway) as(key string) *client.Client {
	return client.New(g.url, client.WithHTTPClient(g.http), client.WithAPIKey(key))
}

// status reads GET /admin/v1/status with the key k1.
func (g *gateway) status(t testing.TB) client.Status {
	t.Helper()
	st, err := g.as("k1").Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// state reads GET /state (no key).
func (g *gateway) state(t testing.TB) client.State {
	t.Helper()
	st, err := g.api.State(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// router reads GET /admin/v1/router (no key).
func (g *gateway) router(t testing.TB) client.Router {
	t.Helper()
	r, err := g.api.Router(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func chatParams(model, content string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:       model,
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be nice"), openai.UserMessage(content)},
		Temperature: openai.Float(0),
	}
}

func TestModels(t *testing.T) {
	g := startGateway(t)
	c := g.client()
	ctx := context.Background()
	page, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "echo" || page.Data[0].Object != "model" {
		t.Errorf("models: %+v", page.Data)
	}
	m, err := c.Models.Get(ctx, "echo")
	if err != nil || m.ID != "echo" {
		t.Errorf("get echo: %v %+v", err, m)
	}
	_, err = c.Models.Get(ctx, "gpt-9")
	wantAPIError(t, err, 404, "model_not_found", "model")
}

func TestChat(t *testing.T) {
	g := startGateway(t)
	c := g.client()
	ctx := context.Background()

	t.Run("NonStreaming", func(t *testing.T) {
		resp, err := c.Chat.Completions.New(ctx, chatParams("echo", "the quick brown fox"))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "the quick brown fox" {
			t.Errorf("choices: %+v", resp.Choices)
		}
		if resp.Choices[0].FinishReason != "stop" || resp.Object != "chat.completion" || resp.Model != "echo" {
			t.Errorf("response: %+v", resp)
		}
		if resp.Usage.CompletionTokens != 4 || resp.Usage.PromptTokens == 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+4 {
			t.Errorf("usage: %+v", resp.Usage)
		}
	})

	t.Run("Streaming", func(t *testing.T) {
		p := chatParams("echo", "one two three four five")
		p.MaxTokens = openai.Int(7)
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.Chat.Completions.NewStreaming(ctx, p)
		var text strings.Builder
		var finish string
		var usage openai.CompletionUsage
		chunks := 0
		for stream.Next() {
			ch := stream.Current()
			chunks++
			if len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
				if ch.Choices[0].FinishReason != "" {
					finish = ch.Choices[0].FinishReason
				}
			}
			if ch.Usage.TotalTokens > 0 {
				usage = ch.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := text.String(); got != "one two three four five one two " {
			t.Errorf("text %q", got)
		}
		if finish != "length" || usage.CompletionTokens != 7 || chunks < 8 {
			t.Errorf("finish %q usage %+v chunks %d", finish, usage, chunks)
		}
	})

	t.Run("StopAndLogprobs", func(t *testing.T) {
		p := chatParams("echo", "alpha beta gamma delta")
		p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"mma d"}}
		p.Logprobs = openai.Bool(true)
		p.TopLogprobs = openai.Int(2)
		resp, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.Message.Content != "alpha beta ga" || ch.FinishReason != "stop" {
			t.Errorf("content %q finish %q", ch.Message.Content, ch.FinishReason)
		}
		if len(ch.Logprobs.Content) != 4 || len(ch.Logprobs.Content[0].TopLogprobs) != 2 {
			t.Errorf("logprobs: %+v", ch.Logprobs)
		}
	})

	t.Run("RequestID", func(t *testing.T) {
		var hdr http.Header
		_, err := c.Chat.Completions.New(ctx, chatParams("echo", "hi"), option.WithHeader("X-Request-Id", "my-req-42"),
			option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
				resp, err := next(r)
				if resp != nil {
					hdr = resp.Header
				}
				return resp, err
			}))
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Get("X-Request-Id") != "my-req-42" {
			t.Errorf("X-Request-Id %q", hdr.Get("X-Request-Id"))
		}
	})
}

func TestCompletions(t *testing.T) {
	g := startGateway(t)
	c := g.client()
	ctx := context.Background()
	resp, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model: "echo", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("red green blue")},
		Temperature: openai.Float(0), MaxTokens: openai.Int(4), Logprobs: openai.Int(1),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Text != "red green blue red " || resp.Choices[0].FinishReason != "length" || resp.Object != "text_completion" {
		t.Errorf("completion: %+v", resp.Choices[0])
	}
	if len(resp.Choices[0].Logprobs.Tokens) != 4 {
		t.Errorf("logprobs: %+v", resp.Choices[0].Logprobs)
	}

	// A prompt as token ids: tokenize through the engine's words, then echo them back.
	stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model: "echo", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x y z")},
		Temperature: openai.Float(0), MaxTokens: openai.Int(3),
	})
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Text)
		}
	}
	if err := stream.Err(); err != nil || text.String() != "x y z" {
		t.Errorf("streamed completion %q, err %v", text.String(), err)
	}
}

func wantAPIError(t *testing.T, err error, status int, code, param string) {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("got %v, want an API error with status %d", err, status)
	}
	if apiErr.StatusCode != status || (code != "" && apiErr.Code != code) || apiErr.Param != param {
		t.Errorf("got status %d code %q param %q (%s), want %d %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Param, apiErr.Message, status, code, param)
	}
	if apiErr.Message == "" || apiErr.Type == "" {
		t.Errorf("error envelope lacks message or type: %+v", apiErr)
	}
}

func TestErrors(t *testing.T) {
	g := startFaulty(t, "--api-key", "k1,k2", "--body-limit", "4096", "--max-inflight", "1", "--max-queue", "0")
	c := g.client(option.WithAPIKey("k2"))
	ctx := context.Background()

	t.Run("400", func(t *testing.T) {
		p := chatParams("echo", "hi")
		p.Temperature = openai.Float(3)
		_, err := c.Chat.Completions.New(ctx, p)
		wantAPIError(t, err, 400, "", "temperature")
		p = chatParams("echo", "hi")
		p.N = openai.Int(129)
		_, err = c.Chat.Completions.New(ctx, p)
		wantAPIError(t, err, 400, "", "n")
		// Wrong types, sent raw.
		err = rawPost(g, "/v1/chat/completions", "k1", `{"model":"echo","messages":[{"role":"user","content":"hi"}],"max_tokens":"ten"}`)
		wantAPIError(t, err, 400, "", "max_tokens")
	})
	t.Run("401", func(t *testing.T) {
		wrong := g.client(option.WithAPIKey("wrong"))
		_, err := wrong.Chat.Completions.New(ctx, chatParams("echo", "hi"))
		wantAPIError(t, err, 401, "invalid_api_key", "")
		err = rawPost(g, "/v1/chat/completions", "", `{}`)
		wantAPIError(t, err, 401, "invalid_api_key", "")
	})
	t.Run("404", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, chatParams("gpt-9", "hi"))
		wantAPIError(t, err, 404, "model_not_found", "model")
	})
	t.Run("413", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, chatParams("echo", strings.Repeat("long ", 2000)))
		wantAPIError(t, err, 413, "request_too_large", "")
	})
	t.Run("429", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, chatParams("echo", "fail:busy"))
		wantAPIError(t, err, 429, "rate_limit_exceeded", "")
		// Admission control: one slot, no queue. Hold the slot with a slow stream.
		p := chatParams("echo", "slow and steady")
		p.MaxTokens = openai.Int(1000)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream := c.Chat.Completions.NewStreaming(sctx, p)
		if !stream.Next() {
			t.Fatalf("slow stream: %v", stream.Err())
		}
		_, err = c.Chat.Completions.New(ctx, chatParams("echo", "hi"))
		wantAPIError(t, err, 429, "rate_limit_exceeded", "")
		cancel()
		waitFor(t, 5*time.Second, "the slot to free up", func() bool { return g.status(t).InFlight == 0 })
	})
	t.Run("500", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, chatParams("echo", "fail:internal"))
		wantAPIError(t, err, 500, "internal_error", "")
	})
	t.Run("503", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, chatParams("echo", "fail:unavailable"))
		wantAPIError(t, err, 503, "service_unavailable", "")
	})
	t.Run("MidStream", func(t *testing.T) {
		p := chatParams("echo", "fail:midstream a b c d e")
		p.MaxTokens = openai.Int(10)
		stream := c.Chat.Completions.NewStreaming(ctx, p)
		n := 0
		for stream.Next() {
			n++
		}
		if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "mid-stream") {
			t.Errorf("stream ended with %v after %d chunks, want the engine's error", err, n)
		}
	})
	t.Run("Healthz needs no key", func(t *testing.T) {
		if h, err := g.api.Health(t.Context()); err != nil {
			t.Errorf("healthz: %+v %v", h, err)
		}
	})
}

func rawPost(g *gateway, path, key, body string) error {
	req, _ := http.NewRequest("POST", g.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 {
		return nil
	}
	var env struct {
		Error *openai.Error `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil || env.Error == nil {
		return fmt.Errorf("status %d with a body that is no error envelope: %s", resp.StatusCode, data)
	}
	env.Error.StatusCode = resp.StatusCode
	return env.Error
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func enginePID(t testing.TB, g *gateway) int {
	t.Helper()
	for _, p := range g.status(t).Plugins {
		if strings.HasPrefix(p.Name, "engine") && p.State == "running" {
			return p.PID
		}
	}
	return 0
}

// TestEngineKilledMidStream SIGKILLs the engine plugin while it streams: the client must see an error within a
// second, the plugin must come back, and the next request must succeed.
func TestEngineKilledMidStream(t *testing.T) {
	g := startFaulty(t)
	c := g.client()
	ctx := context.Background()
	pid := enginePID(t, g)
	if pid == 0 {
		t.Fatal("no engine pid")
	}
	p := chatParams("echo", "slow words keep coming")
	p.MaxTokens = openai.Int(10000)
	stream := c.Chat.Completions.NewStreaming(ctx, p)
	for i := 0; i < 3; i++ {
		if !stream.Next() {
			t.Fatalf("stream ended early: %v", stream.Err())
		}
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for stream.Next() {
	}
	ended := time.Since(killed)
	if err := stream.Err(); err == nil {
		t.Errorf("the stream ended without an error after the engine was killed")
	} else {
		t.Logf("stream ended %v after SIGKILL with: %v", ended, err)
		if strings.Contains(err.Error(), os.TempDir()) || strings.Contains(err.Error(), "plugin") && strings.Contains(err.Error(), "/") {
			t.Errorf("the client's error names a path: %v", err)
		}
	}
	if ended > time.Second {
		t.Errorf("the stream took %v to end after SIGKILL, want under 1s", ended)
	}
	// The cluster hears of it at once: the instance is unavailable until the engine is back, then ready.
	id := g.instances(t)[0].ID
	if st := g.statusOf(t, id); st != "unavailable" && enginePID(t, g) == 0 {
		t.Errorf("instance %s is %q while its engine is down, want unavailable", id, st)
	}
	waitFor(t, 15*time.Second, "the engine plugin to restart", func() bool {
		newPID := enginePID(t, g)
		return newPID != 0 && newPID != pid
	})
	waitFor(t, 5*time.Second, "the instance ready again", func() bool { return g.statusOf(t, id) == "ready" })
	resp, err := c.Chat.Completions.New(ctx, chatParams("echo", "back again"))
	if err != nil || resp.Choices[0].Message.Content != "back again" {
		t.Fatalf("after restart: %v %+v", err, resp)
	}
}

// TestEnginePanicReadsWell checks that a plugin panic reaches the client as a plain 503 with the request id,
// and the gateway's log as the panic itself: the plugin's stderr names temporary paths and carries unrelated
// records, which are not for clients.
func TestEnginePanicReadsWell(t *testing.T) {
	g := startFaulty(t)
	c := g.client()
	_, err := c.Chat.Completions.New(context.Background(), chatParams("echo", "panic now please"),
		option.WithHeader("X-Request-Id", "panic-request-1"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
		t.Fatalf("got %v, want a 503", err)
	}
	if !strings.Contains(apiErr.Message, "panic-request-1") {
		t.Errorf("the message does not give the request id: %s", apiErr.Message)
	}
	for _, leak := range []string{"boom", "panic:", os.TempDir(), "goroutine", "plugin stderr"} {
		if strings.Contains(apiErr.Message, leak) {
			t.Errorf("the client's message contains %q: %s", leak, apiErr.Message)
		}
	}
	waitFor(t, 5*time.Second, "the panic in the gateway's log", func() bool {
		return strings.Contains(g.stderr.String(), "boom: the test asked for it") && strings.Contains(g.stderr.String(), "panic-request-1")
	})
}

// TestClientDisconnectCancels closes the client's connection mid-generation, streaming and not: the engine
// must see the generation cancelled promptly.
func TestClientDisconnectCancels(t *testing.T) {
	g := startFaulty(t)
	c := g.client()
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", streaming), func(t *testing.T) {
			before := g.status(t).EngineStats.Metrics["cancelled"]
			ctx, cancel := context.WithCancel(context.Background())
			p := chatParams("echo", "slow but sure")
			p.MaxTokens = openai.Int(100000)
			if streaming {
				stream := c.Chat.Completions.NewStreaming(ctx, p)
				if !stream.Next() {
					t.Fatalf("stream: %v", stream.Err())
				}
				cancel()
				stream.Close()
			} else {
				go func() { time.Sleep(200 * time.Millisecond); cancel() }()
				_, _ = c.Chat.Completions.New(ctx, p)
			}
			gone := time.Now()
			waitFor(t, 2*time.Second, "the engine to cancel the generation", func() bool {
				st := g.status(t)
				return st.InFlight == 0 && st.EngineStats.Metrics["cancelled"] > before
			})
			t.Logf("cancelled in the engine %v after the client left", time.Since(gone))
		})
	}
}

// TestDefaultModel runs duet as the README says, with no flags: the MLX engine serving the embedded model.
func TestDefaultModel(t *testing.T) {
	g := startDuet(t)
	c := g.client()
	ctx := context.Background()
	page, err := c.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "embedded" {
		t.Fatalf("models: %v %+v", err, page)
	}
	p := chatParams("embedded", "Tell me about the sea.")
	p.MaxTokens = openai.Int(40)
	resp, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	text := resp.Choices[0].Message.Content
	if text == "" || !utf8.ValidString(text) || resp.Usage.CompletionTokens == 0 {
		t.Fatalf("reply %q, usage %+v", text, resp.Usage)
	}
	t.Logf("the embedded model says: %q (%s)", text, resp.Choices[0].FinishReason)

	// Streaming gives the same text for the same greedy request.
	stream := c.Chat.Completions.NewStreaming(ctx, p)
	var b strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			b.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || b.String() != text {
		t.Errorf("streamed %q (err %v), want %q", b.String(), err, text)
	}

	// The engine plugin's own records reach the gateway's log at their level, parsed, not as raw JSON.
	if log := g.stderr.String(); !regexp.MustCompile(`\[INFO\] +engine mlx-engine[^:]*: model loaded: `).MatchString(log) {
		t.Errorf("the engine's \"model loaded\" record is not in the gateway's log at INFO:\n%s", log)
	}
}

// TestDisaggregatedPrefill runs two gateways on the embedded model: one whose engine serves KV, and one that
// sends long prompts there (--prefill). The disaggregated answer equals the local one, token for token.
func TestDisaggregatedPrefill(t *testing.T) {
	kvAddr := freeAddr(t)
	prefill := startDuet(t, "--engine-opt", "kv_listen="+kvAddr)
	decode := startDuet(t, "--prefill", kvAddr, "--engine-opt", "remote_prefill_threshold=32")
	prompt := strings.Repeat("The lighthouse keeper counted the waves that broke on the rocks below. ", 12)
	body := fmt.Sprintf(`{"model":"embedded","temperature":0,"max_tokens":24,"messages":[{"role":"user","content":%q}]}`, prompt)
	local, lt := chatText(t, prefill, body, nil)
	remote, rt := chatText(t, decode, body, nil)
	if lt["prefill_source"] != "local" || rt["prefill_source"] != "remote" {
		t.Fatalf("prefill sources: %v and %v; want local and remote (remote: %v)", lt["prefill_source"], rt["prefill_source"], rt["remote_prefill"])
	}
	if local != remote {
		t.Errorf("disaggregated answer differs:\n local %q\nremote %q", local, remote)
	}
	t.Logf("remote prefill: %v", rt["remote_prefill"])
}

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/duet-ai/duet/gateway/client"
	"github.com/duet-ai/duet/internal/testnode"
)

// The Ollama API end to end: the npm ollama client (as Open WebUI and other apps use it) against a real
// gateway on Ollama's second listener, its errors in Ollama's shape, the hop between two gateways, and P/D.

// ollamaPost posts a body to an Ollama endpoint and returns the status, Content-Type and body.
func ollamaPost(t *testing.T, base, path, body string, header ...string) (int, string, []byte) {
	t.Helper()
	return ollamaCall(t, http.MethodPost, base+path, body, header...)
}

func ollamaCall(t *testing.T, method, url, body string, header ...string) (int, string, []byte) {
	t.Helper()
	resp, data := send(t, method, url, body, headerPairs(header...))
	return resp.StatusCode, resp.Header.Get("Content-Type"), data
}

// ollamaLines decodes an NDJSON stream.
func ollamaLines(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var o map[string]any
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("line %q of the stream is not JSON: %v", sc.Text(), err)
		}
		out = append(out, o)
	}
	return out
}

// TestOllamaNodeClient: the npm ollama client, pointed at --ollama-listen as an app finds Ollama, runs every
// call an app makes; the greedy answers equal the OpenAI API's for the same messages.
func TestOllamaNodeClient(t *testing.T) {
	testnode.Module(t, "ollama")
	ollamaAddr := freeAddr(t)
	g := startGateway(t, "--ollama-listen", ollamaAddr)
	script, err := filepath.Abs("testdata/ollama_client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	out := testnode.Run(t, script, nil, "http://"+ollamaAddr)
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("script output %s: %v", out, err)
	}
	want := map[string]string{
		"version":           `"0.0.0-duet"`,
		"list":              `[{"name":"echo:latest","model":"echo:latest","family":"echo","digest":64}]`,
		"show":              `{"capabilities":["completion","tools","thinking"],"context":1048576,"parameters":"num_ctx 1048576"}`,
		"ps":                `[{"name":"echo:latest","context_length":1048576,"expires":true}]`,
		"chat":              `{"content":"Why is the sea salty?","role":"assistant","done":true,"done_reason":"stop","counted":true,"timed":true}`,
		"chatStream":        `{"text":"Why is the sea salty?","chunks":6,"done":true,"done_reason":"stop","eval_count":5}`,
		"chatLength":        `{"content":"Why is ","done_reason":"length"}`,
		"generate":          `{"response":"The sky is blue","done_reason":"stop"}`,
		"generateStream":    `{"text":"The sky is blue","chunks":5,"done":true,"done_reason":"stop","eval_count":4}`,
		"generateRaw":       `"raw words"`,
		"toolCalls":         `[{"index":0,"name":"get_weather","arguments":{"city":"Lima"}}]`,
		"toolAnswer":        `"sunny in Lima"`,
		"streamedToolCalls": `[{"index":0,"name":"get_weather","arguments":{"city":"Lima"}}]`,
		"formatJSON":        `{"echo":"hi"}`,
		"formatSchema":      `{"city":"forecast","days":0}`,
		"thinking":          `{"thinking":"about: think","content":"think"}`,
		"thinkingStream":    `{"text":"about: think","chunks":4,"done":true,"done_reason":"stop","eval_count":3}`,
		"load":              `"load"`,
		"missing":           `{"name":"ResponseError","status":404,"error":"model 'llama3:8b' not found"}`,
		"badOption":         `{"status":400,"error":"option \"temperature\" must be a number, got \"hot\""}`,
	}
	for k, w := range want {
		if string(got[k]) != w {
			t.Errorf("%s: got %s, want %s", k, got[k], w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the script reported %s, which the test does not check", k)
		}
	}

	// The same greedy messages through the OpenAI API: the same text.
	p := chatParams("echo", "Why is the sea salty?")
	p.Temperature = openai.Float(0)
	c := g.client()
	resp, err := c.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	var chat struct{ Content string }
	_ = json.Unmarshal(got["chat"], &chat)
	if resp.Choices[0].Message.Content != chat.Content {
		t.Errorf("OpenAI's answer %q, Ollama's %q", resp.Choices[0].Message.Content, chat.Content)
	}
}

// TestOllamaListener: --ollama-listen serves the same app as --listen (either API on either port), its
// address is logged, and it closes when duet shuts down.
func TestOllamaListener(t *testing.T) {
	ollamaAddr := freeAddr(t)
	g := startGateway(t, "--ollama-listen", ollamaAddr)
	second := "http://" + ollamaAddr
	for _, u := range []string{g.url + "/api/tags", second + "/api/tags", second + "/v1/models", second + "/healthz"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte("echo")) && !strings.HasSuffix(u, "/healthz") {
			t.Errorf("GET %s: %d %s", u, resp.StatusCode, body)
		}
	}
	if log := g.stderr.String(); !strings.Contains(log, "serving the Ollama API") || !strings.Contains(log, second+"/api") {
		t.Errorf("the Ollama listener's address is not in the log:\n%s", log)
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("duet did not stop")
	}
	if c, err := net.DialTimeout("tcp", ollamaAddr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after duet stopped", ollamaAddr)
	}

	// A listener that cannot be had stops duet at start, saying which.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	out, err := runDuet(t, "--engine", "echo", "--model", "echo", "--listen", freeAddr(t), "--data-dir", t.TempDir(),
		"--ollama-listen", taken.Addr().String())
	if err == nil || !strings.Contains(out, "--ollama-listen") {
		t.Errorf("duet with a taken --ollama-listen: %v\n%s", err, out)
	}
}

// runDuet runs duet to completion (for a start that must fail) and returns its output.
func runDuet(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, duetBin, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestOllamaErrors: every refusal under /api, from the gateway (auth, limits, routing), the parser and the
// engine, is Ollama's {"error": message} with a status a client can act on; one that happens mid-stream is
// the stream's last line.
func TestOllamaErrors(t *testing.T) {
	g := startFaulty(t, "--api-key", "k1", "--body-limit", "4096")
	key := []string{"Authorization", "Bearer k1"}
	chat := func(content, extra string) string {
		return fmt.Sprintf(`{"model":"echo:latest","options":{"temperature":0},"messages":[{"role":"user","content":%q}]%s}`, content, extra)
	}
	tools := `,"tools":[{"type":"function","function":{"name":"get weather","parameters":{"type":"object"}}}]`
	cases := []struct {
		name, path, body string
		header           []string
		status           int
		says             string
	}{
		{"no API key", "/api/chat", chat("hi", ""), nil, 401, "API key"},
		{"a wrong API key", "GET /api/tags", "", []string{"Authorization", "Bearer nope"}, 401, "Incorrect API key"},
		{"no body", "/api/chat", "", key, 400, "missing request body"},
		{"not JSON", "/api/generate", `{"model":`, key, 400, "not valid JSON"},
		{"too large", "/api/chat", chat(strings.Repeat("x", 5000), ""), key, 413, "too large"},
		{"no model", "/api/chat", `{"messages":[{"role":"user","content":"hi"}]}`, key, 400, "model is required"},
		{"an unknown model", "/api/chat", `{"model":"llama3:8b","messages":[{"role":"user","content":"hi"}]}`, key, 404, "model 'llama3:8b' not found"},
		{"an unknown model to generate", "/api/generate", `{"model":"llama3","prompt":"hi"}`, key, 404, "model 'llama3' not found"},
		{"an unknown model to show", "/api/show", `{"model":"llama3"}`, key, 404, "model 'llama3' not found"},
		{"an unknown model to load", "/api/chat", `{"model":"llama3"}`, key, 404, "not found"},
		{"a bad option", "/api/chat", `{"model":"echo","messages":[{"role":"user","content":"hi"}],"options":{"top_p":7}}`, key, 400, "options.top_p"},
		{"num_ctx beyond the context", "/api/chat", `{"model":"echo","messages":[{"role":"user","content":"hi"}],"options":{"num_ctx":99999999}}`, key, 400, "num_ctx"},
		{"images", "/api/generate", `{"model":"echo","prompt":"what is it?","images":["iVBORw0KGgo="]}`, key, 400, "images are not supported"},
		{"a bad tool", "/api/chat", chat("hi", tools+`,"stream":false`), key, 400, "get weather"},
		{"the engine is busy", "/api/chat", chat("fail:busy", ""), key, 429, "busy"},
		{"the engine fails before answering", "/api/chat", chat("fail:internal", `,"stream":false`), key, 500, "the test engine failed"},
		{"the engine fails, not streamed", "/api/chat", chat("fail:midstream now please", `,"stream":false`), key, 500, "mid-stream"},
		{"pull", "/api/pull", `{"model":"llama3"}`, key, 404, "does not manage models"},
		{"embeddings", "/api/embed", `{"model":"x","input":"hi"}`, key, 404, "embeddings"},
		{"an unknown endpoint", "/api/nothing", `{}`, key, 404, "Unknown request URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method, path, ok := strings.Cut(c.path, " ")
			if !ok {
				method, path = http.MethodPost, c.path
			}
			status, ctype, body := ollamaCall(t, method, g.url+path, c.body, c.header...)
			var e map[string]any
			if err := json.Unmarshal(body, &e); err != nil || len(e) != 1 {
				t.Fatalf("%d %q: not Ollama's error object: %s", status, ctype, body)
			}
			msg, _ := e["error"].(string)
			if status != c.status || !strings.Contains(msg, c.says) || !strings.HasPrefix(ctype, "application/json") {
				t.Errorf("%d %q %s; want %d saying %q", status, ctype, body, c.status, c.says)
			}
		})
	}

	// A failure after the stream started ends it with an error line, as Ollama ends its streams.
	status, ctype, body := ollamaPost(t, g.url, "/api/chat", chat("fail:midstream now please", ""), key...)
	lines := ollamaLines(t, body)
	if status != 200 || ctype != "application/x-ndjson" || len(lines) < 2 {
		t.Fatalf("%d %q %s", status, ctype, body)
	}
	last := lines[len(lines)-1]
	if msg, _ := last["error"].(string); len(last) != 1 || !strings.Contains(msg, "mid-stream") {
		t.Errorf("the stream's last line %v", last)
	}
	if lines[0]["done"] != false || lines[0]["message"] == nil {
		t.Errorf("the stream's first line %v", lines[0])
	}
}

// TestOllamaForwarded: a request for a model another node serves is forwarded there and its answer passed
// back, a stream line by line, as for the OpenAI API.
func TestOllamaForwarded(t *testing.T) {
	port := clusterPort(t)
	secret := writeSecret(t, "the Ollama API crosses the hop")
	// Gossip on ports of their own: another test's cluster may hold the default one.
	ownerGossip, entryGossip := freeAddr(t), freeAddr(t)
	_, entryGossipPort, _ := net.SplitHostPort(entryGossip)
	owner := startNode(t, "127.0.0.1", port, secret, "", "--engine", "echo", "--model", "echo", "--cluster-bind", ownerGossip)
	entry := startNode(t, "127.0.0.2", port, secret, ownerGossip, "--engine", "echo", "--model", "other",
		"--cluster-bind", net.JoinHostPort("127.0.0.2", entryGossipPort))
	waitFor(t, 20*time.Second, "the entry node to see both instances ready", func() bool { return len(entry.readyOn(t)) == 2 })

	var tags struct {
		Models []struct{ Name string } `json:"models"`
	}
	if _, err := entry.api.Call(t.Context(), client.APIKey, "GET", "/api/tags", nil, &tags); err != nil {
		t.Fatal(err)
	}
	if len(tags.Models) != 2 || tags.Models[0].Name != "echo:latest" || tags.Models[1].Name != "other:latest" {
		t.Errorf("the entry node lists %+v; want both nodes' models", tags.Models)
	}
	body := `{"model":"echo:latest","messages":[{"role":"user","content":"across the hop"}],"options":{"temperature":0}%s}`
	status, ctype, resp := ollamaPost(t, entry.url, "/api/chat", fmt.Sprintf(body, `,"stream":false`))
	var whole struct {
		Model   string `json:"model"`
		Message struct{ Content string }
		Timings struct {
			Route struct {
				Forwarded  bool   `json:"forwarded"`
				DecodeNode string `json:"decode_node"`
			} `json:"route"`
		} `json:"timings"`
	}
	if err := json.Unmarshal(resp, &whole); err != nil || status != 200 || !strings.HasPrefix(ctype, "application/json") {
		t.Fatalf("%d %q %s", status, ctype, resp)
	}
	if whole.Model != "echo:latest" || whole.Message.Content != "across the hop" || !whole.Timings.Route.Forwarded || whole.Timings.Route.DecodeNode != owner.nodeID(t) {
		t.Errorf("forwarded answer %s", resp)
	}
	status, ctype, resp = ollamaPost(t, entry.url, "/api/chat", fmt.Sprintf(body, ""))
	lines := ollamaLines(t, resp)
	if status != 200 || ctype != "application/x-ndjson" || len(lines) < 2 || lines[len(lines)-1]["done"] != true {
		t.Fatalf("forwarded stream: %d %q %s", status, ctype, resp)
	}
	var text strings.Builder
	for _, l := range lines {
		m, _ := l["message"].(map[string]any)
		s, _ := m["content"].(string)
		text.WriteString(s)
	}
	if text.String() != "across the hop" {
		t.Errorf("forwarded stream says %q", text.String())
	}
}

// TestOllamaDisaggregatedPrefill: /api/chat on a gateway that sends long prompts to another engine's KV
// (mirroring TestDisaggregatedPrefill) prefills remotely and answers the tokens the OpenAI API answers on a
// single node, streamed or not.
func TestOllamaDisaggregatedPrefill(t *testing.T) {
	kvAddr := freeAddr(t)
	prefill := startDuet(t, "--engine-opt", "kv_listen="+kvAddr)
	decode := startDuet(t, "--prefill", kvAddr, "--engine-opt", "remote_prefill_threshold=32")
	// local is the single node's greedy answer through the OpenAI API, and its token count.
	local := func(prompt string) (string, int) {
		status, _, resp := ollamaPost(t, prefill.url, "/v1/chat/completions",
			fmt.Sprintf(`{"model":"embedded","temperature":0,"max_tokens":24,"messages":[{"role":"user","content":%q}]}`, prompt))
		var out struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(resp, &out); err != nil || status != 200 || len(out.Choices) != 1 {
			t.Fatalf("local answer: %d %s", status, resp)
		}
		return out.Choices[0].Message.Content, out.Usage.CompletionTokens
	}
	ask := func(prompt, extra string) (int, string, []byte) {
		return ollamaPost(t, decode.url, "/api/chat", fmt.Sprintf(
			`{"model":"embedded:latest","options":{"temperature":0,"num_predict":24},"messages":[{"role":"user","content":%q}]%s}`, prompt, extra))
	}

	// Not streamed. (Each request has a prompt of its own: a repeated one would come from the decode
	// engine's prefix cache.)
	prompt := strings.Repeat("The lighthouse keeper counted the waves that broke on the rocks below. ", 12)
	want, tokens := local(prompt)
	status, _, resp := ask(prompt, `,"stream":false`)
	var whole struct {
		Message   struct{ Content string }
		EvalCount int `json:"eval_count"`
		Prompt    int `json:"prompt_eval_count"`
		Timings   struct {
			PrefillSource string         `json:"prefill_source"`
			Remote        map[string]any `json:"remote_prefill"`
		} `json:"timings"`
	}
	if err := json.Unmarshal(resp, &whole); err != nil || status != 200 {
		t.Fatalf("ollama answer: %d %s", status, resp)
	}
	if whole.Timings.PrefillSource != "remote" {
		t.Fatalf("prefill source %q, want remote (%v)", whole.Timings.PrefillSource, whole.Timings.Remote)
	}
	if whole.Message.Content != want || whole.EvalCount != tokens || whole.Prompt == 0 {
		t.Errorf("disaggregated Ollama answer %q (%d tokens of %d prompt tokens)\nwant %q (%d tokens)", whole.Message.Content,
			whole.EvalCount, whole.Prompt, want, tokens)
	}
	t.Logf("remote prefill: %v", whole.Timings.Remote)

	// A prompt that cannot fit the context is refused before the body is parsed (so before its bad option
	// is seen), under the name Ollama gives the model, as through the OpenAI API.
	huge := strings.Repeat("the sea is wide and the night is long ", 1<<15)
	for _, c := range []struct{ path, body string }{
		{"/api/chat", fmt.Sprintf(`{"model":"embedded:latest","messages":[{"role":"user","content":%q}],"options":{"top_p":"x"}}`, huge)},
		{"/api/generate", fmt.Sprintf(`{"model":"embedded:latest","prompt":%q,"options":{"top_p":"x"}}`, huge)},
		{"/v1/chat/completions", fmt.Sprintf(`{"model":"embedded","messages":[{"role":"user","content":%q}]}`, huge)},
	} {
		status, _, resp := ollamaPost(t, decode.url, c.path, c.body)
		if status != 400 || !bytes.Contains(resp, []byte("maximum context length")) {
			t.Errorf("%s with %d bytes: %d %s", c.path, len(huge), status, resp)
		}
	}

	// Streamed.
	prompt = strings.Repeat("The ferry crossed the strait twice a day, whatever the weather. ", 12)
	want, tokens = local(prompt)
	status, ctype, resp := ask(prompt, "")
	lines := ollamaLines(t, resp)
	if status != 200 || ctype != "application/x-ndjson" || len(lines) < 2 {
		t.Fatalf("stream: %d %q %s", status, ctype, resp)
	}
	var text strings.Builder
	for _, l := range lines {
		m, _ := l["message"].(map[string]any)
		s, _ := m["content"].(string)
		text.WriteString(s)
	}
	last := lines[len(lines)-1]
	timings, _ := last["timings"].(map[string]any)
	if text.String() != want || last["done"] != true || last["eval_count"] != float64(tokens) || timings["prefill_source"] != "remote" {
		t.Errorf("streamed %q (last %v), want %q in %d tokens, prefilled remotely", text.String(), last, want, tokens)
	}
}

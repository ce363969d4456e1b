package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/duet-ai/duet/internal/testnode"
)

// The Anthropic Messages API end to end: the official Go and npm clients against a real gateway serving the
// echo engine. The echo engine answers with max_tokens tokens (it repeats its reply to fill them), so these
// tests ask for exactly as many tokens as the reply has and expect stop_reason max_tokens; a stop sequence
// or a tool call ends a turn otherwise.

func (g *gateway) anthropic(opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(g.url), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithRequestTimeout(30 * time.Second), option.WithHTTPClient(g.http),
	}, opts...)...)
}

var anthropicWeather = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "get_weather",
	Description: anthropic.String("The weather in a city"),
	InputSchema: anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}},
		Required:   []string{"city"},
	},
}}

func userText(s string) anthropic.MessageParam {
	return anthropic.NewUserMessage(anthropic.NewTextBlock(s))
}

// streamMessage runs a streamed request and accumulates it, as the SDK's documentation does; it returns the
// message and the names of the events in order.
func streamMessage(t *testing.T, c anthropic.Client, p anthropic.MessageNewParams) (anthropic.Message, []string) {
	t.Helper()
	stream := c.Messages.NewStreaming(context.Background(), p)
	var msg anthropic.Message
	var names []string
	for stream.Next() {
		ev := stream.Current()
		names = append(names, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("accumulate %s: %v", ev.Type, err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return msg, names
}

// sameMessage compares what a client reads from a streamed and a whole answer: blocks, stop and usage.
func sameMessage(t *testing.T, streamed, whole *anthropic.Message) {
	t.Helper()
	type view struct {
		Content               []map[string]any
		StopReason            string
		StopSequence          string
		Input, Output, Cached int64
	}
	of := func(m *anthropic.Message) view {
		v := view{StopReason: string(m.StopReason), StopSequence: m.StopSequence, Input: m.Usage.InputTokens,
			Output: m.Usage.OutputTokens, Cached: m.Usage.CacheReadInputTokens}
		for _, b := range m.Content {
			var block map[string]any
			if err := json.Unmarshal([]byte(b.RawJSON()), &block); err != nil {
				t.Fatalf("block %s: %v", b.RawJSON(), err)
			}
			v.Content = append(v.Content, block)
		}
		return v
	}
	if s, w := of(streamed), of(whole); !reflect.DeepEqual(s, w) {
		t.Errorf("the stream accumulates to %+v\nthe whole answer is %+v", s, w)
	}
}

// TestAnthropicMessagesGo: Messages.New, NewStreaming with the accumulator, CountTokens, stop sequences and
// the event sequence, through anthropic-sdk-go.
func TestAnthropicMessagesGo(t *testing.T) {
	g := startGateway(t)
	c := g.anthropic()
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model: "echo", MaxTokens: 2, Temperature: anthropic.Float(0),
		System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages: []anthropic.MessageParam{userText("Hello there")},
		Metadata: anthropic.MetadataParam{UserID: anthropic.String("u-1")},
	}
	msg, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg.ID, "msg_") || msg.Role != "assistant" || msg.Type != "message" || msg.Model != "echo" {
		t.Errorf("message %s", msg.RawJSON())
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != "Hello there" {
		t.Errorf("content %s", msg.RawJSON())
	}
	if msg.StopReason != anthropic.StopReasonMaxTokens || msg.Usage.InputTokens <= 0 || msg.Usage.OutputTokens != 2 {
		t.Errorf("stop %q usage %+v", msg.StopReason, msg.Usage)
	}

	streamed, names := streamMessage(t, c, params)
	sameMessage(t, &streamed, msg)
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if !reflect.DeepEqual(names, want) { // the SDK swallows ping
		t.Errorf("events %v, want %v", names, want)
	}

	// count_tokens counts the prompt the generation saw.
	count, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: "echo", Messages: params.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System},
	})
	if err != nil {
		t.Fatal(err)
	}
	if count.InputTokens != msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens {
		t.Errorf("count_tokens says %d, the generation's usage %+v", count.InputTokens, msg.Usage)
	}

	// A stop sequence ends the turn (end_turn: the engine does not say which stop matched).
	params.MaxTokens = 10
	params.Messages = []anthropic.MessageParam{userText("Hello there friend of mine")}
	params.StopSequences = []string{"friend"}
	msg, err = c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != "Hello there " || msg.StopReason != anthropic.StopReasonEndTurn || msg.StopSequence != "" {
		t.Errorf("stopped: %s", msg.RawJSON())
	}
	streamed, _ = streamMessage(t, c, params)
	sameMessage(t, &streamed, msg)
}

// TestAnthropicToolsAndThinkingGo: a tool round trip (tool_use, then tool_result, then the answer), streamed
// and not, with the SDK's own ToParam for the assistant turn; thinking blocks, sent back with their
// signature on the next turn.
func TestAnthropicToolsAndThinkingGo(t *testing.T) {
	g := startGateway(t)
	c := g.anthropic()
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model: "echo", MaxTokens: 64, Temperature: anthropic.Float(0),
		Tools:    []anthropic.ToolUnionParam{anthropicWeather},
		Messages: []anthropic.MessageParam{userText(`call: get_weather {"city":"Paris"}`)},
	}
	msg, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != anthropic.StopReasonToolUse || len(msg.Content) != 1 {
		t.Fatalf("tool call: %s", msg.RawJSON())
	}
	call := msg.Content[0]
	if call.Type != "tool_use" || call.Name != "get_weather" || string(call.Input) != `{"city":"Paris"}` || call.ID == "" {
		t.Errorf("tool_use block %s", call.RawJSON())
	}
	streamed, _ := streamMessage(t, c, params)
	if len(streamed.Content) != 1 || string(streamed.Content[0].Input) != `{"city":"Paris"}` || streamed.StopReason != anthropic.StopReasonToolUse {
		t.Errorf("streamed tool call: %s", streamed.RawJSON())
	}

	// The round trip: the assistant's turn as the SDK makes it, and the tool's result.
	params.MaxTokens = 3
	params.Messages = append(params.Messages, msg.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "18C and sunny", false)))
	answer, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(answer.Content) != 1 || answer.Content[0].Text != "18C and sunny" {
		t.Errorf("the answer after the tool: %s", answer.RawJSON())
	}
	streamed, _ = streamMessage(t, c, params)
	sameMessage(t, &streamed, answer)

	// Forced: tool_choice tool calls it with the message as arguments.
	params.MaxTokens = 64
	params.Messages = []anthropic.MessageParam{userText(`{"city":"Oslo"}`)}
	params.ToolChoice = anthropic.ToolChoiceParamOfTool("get_weather")
	forced, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if forced.StopReason != anthropic.StopReasonToolUse || string(forced.Content[0].Input) != `{"city":"Oslo"}` {
		t.Errorf("forced call: %s", forced.RawJSON())
	}

	// Thinking: a thinking block with a signature before the text, streamed the same; sent back, it is
	// accepted.
	think := anthropic.MessageNewParams{
		Model: "echo", MaxTokens: 5, Temperature: anthropic.Float(0),
		Thinking: anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{}},
		Messages: []anthropic.MessageParam{userText("Hello there")},
	}
	thought, err := c.Messages.New(ctx, think)
	if err != nil {
		t.Fatal(err)
	}
	if len(thought.Content) != 2 || thought.Content[0].Type != "thinking" || thought.Content[0].Thinking != "about: Hello there" ||
		thought.Content[0].Signature == "" || thought.Content[1].Text != "Hello there" {
		t.Fatalf("thinking: %s", thought.RawJSON())
	}
	streamed, names := streamMessage(t, c, think)
	sameMessage(t, &streamed, thought)
	if !strings.Contains(strings.Join(names, " "), "content_block_delta content_block_stop content_block_start") {
		t.Errorf("events %v", names)
	}
	think.Messages = append(think.Messages, thought.ToParam(), userText("And again"))
	again, err := c.Messages.New(ctx, think)
	if err != nil || again.Content[len(again.Content)-1].Text != "And again" {
		t.Fatalf("a turn after thinking: %v %v", err, again)
	}

	// thinking enabled with its budget: the same blocks (the budget bounds nothing in an engine).
	think.Messages = think.Messages[:1]
	think.Thinking = anthropic.ThinkingConfigParamOfEnabled(1024)
	think.MaxTokens = 1025
	budgeted, err := c.Messages.New(ctx, think)
	if err != nil {
		t.Fatal(err)
	}
	if budgeted.Content[0].Thinking != "about: Hello there" || !strings.HasPrefix(budgeted.Content[1].Text, "Hello there") {
		t.Errorf("thinking with a budget: %.300s", budgeted.RawJSON())
	}
}

// anthropicError posts a raw body and returns the status and the error envelope.
func anthropicError(t *testing.T, g *gateway, path, key, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", g.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := g.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var env struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil || env.Type != "error" || env.Error.Type == "" || env.Error.Message == "" {
		t.Fatalf("%s: status %d with a body that is no Anthropic error: %s", path, resp.StatusCode, data)
	}
	return resp.StatusCode, env.Error.Type, env.Error.Message
}

// wantAnthropicError checks an SDK error's status and Anthropic type.
func wantAnthropicError(t *testing.T, err error, status int, typ string) {
	t.Helper()
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("got %v, want an API error %d %s", err, status, typ)
	}
	if apiErr.StatusCode != status || string(apiErr.Type()) != typ {
		t.Errorf("got %d %s (%s), want %d %s", apiErr.StatusCode, apiErr.Type(), apiErr.RawJSON(), status, typ)
	}
}

// TestAnthropicErrors: every refusal in Anthropic's envelope with its status and type, through the SDK where
// it can send the request, raw where it cannot; a failure mid-stream is an error event.
func TestAnthropicErrors(t *testing.T) {
	g := startFaulty(t, "--api-key", "k1", "--body-limit", "4096")
	c := g.anthropic(option.WithAPIKey("k1"))
	ctx := context.Background()
	ask := func(model, text string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 4, Messages: []anthropic.MessageParam{userText(text)}}
	}
	raw := []struct {
		name, path, key, body string
		status                int
		typ, want             string
	}{
		{"no max_tokens", "/v1/messages", "k1", `{"model":"echo","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "max_tokens: Field required"},
		{"an image", "/v1/messages", "k1", `{"model":"echo","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}`, 400, "invalid_request_error", "image content is not supported"},
		{"temperature 1.5", "/v1/messages", "k1", `{"model":"echo","max_tokens":4,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "between 0 and 1"},
		{"not JSON", "/v1/messages", "k1", `{"model":`, 400, "invalid_request_error", "not valid JSON"},
		{"no key", "/v1/messages", "", `{}`, 401, "authentication_error", "API key"},
		{"a wrong key", "/v1/messages/count_tokens", "nope", `{}`, 401, "authentication_error", "Incorrect API key"},
		{"an unknown path", "/v1/messages/batches", "k1", `{}`, 404, "not_found_error", "Unknown request URL"},
		{"too large", "/v1/messages", "k1", `{"model":"echo","max_tokens":4,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "request_too_large", "too large"},
		{"count_tokens of an unknown model", "/v1/messages/count_tokens", "k1", `{"model":"claude-9","messages":[{"role":"user","content":"hi"}]}`, 404, "not_found_error", "claude-9"},
		{"count_tokens with a bad body", "/v1/messages/count_tokens", "k1", `{"model":"echo","messages":[{"role":"assistant","content":"hi"}]}`, 400, "invalid_request_error", "prefilled assistant turn"},
	}
	for _, c := range raw {
		status, typ, msg := anthropicError(t, g, c.path, c.key, c.body)
		if status != c.status || typ != c.typ || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %s %q; want %d %s saying %q", c.name, status, typ, msg, c.status, c.typ, c.want)
		}
	}

	_, err := c.Messages.New(ctx, ask("claude-9", "hi"))
	wantAnthropicError(t, err, 404, "not_found_error")
	_, err = c.Messages.New(ctx, ask("echo", "fail:busy"))
	wantAnthropicError(t, err, 429, "rate_limit_error")
	_, err = c.Messages.New(ctx, ask("echo", "fail:internal"))
	wantAnthropicError(t, err, 500, "api_error")
	_, err = c.Messages.New(ctx, ask("echo", "fail:unavailable"))
	wantAnthropicError(t, err, 503, "overloaded_error")
	wrong := g.anthropic(option.WithAPIKey("wrong"))
	_, err = wrong.Messages.New(ctx, ask("echo", "hi"))
	wantAnthropicError(t, err, 401, "authentication_error")

	// Mid-stream: the text so far, then an error event the SDK raises.
	p := ask("echo", "fail:midstream a b c d e")
	p.MaxTokens = 10
	stream := c.Messages.NewStreaming(ctx, p)
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	wantAnthropicError(t, stream.Err(), 200, "api_error")
	if err := stream.Err(); !strings.Contains(err.Error(), "mid-stream") || len(msg.Content) != 1 || msg.Content[0].Text == "" {
		t.Errorf("mid-stream: %v after %s", err, msg.RawJSON())
	}
}

// TestAnthropicNodeClient: the npm client (@anthropic-ai/sdk) against the gateway: messages.create,
// messages.stream with finalMessage(), a tool round trip both ways, thinking, countTokens and an error.
func TestAnthropicNodeClient(t *testing.T) {
	testnode.Module(t, "@anthropic-ai/sdk")
	g := startGateway(t)
	script, err := filepath.Abs("testdata/anthropic_messages.mjs")
	if err != nil {
		t.Fatal(err)
	}
	out := testnode.Run(t, script, nil, g.url)
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("script output %s: %v", out, err)
	}
	want := map[string]string{
		"created":          `{"text":"Hello there","stop_reason":"max_tokens","output_tokens":2}`,
		"streamed":         `{"text":"Hello there","stop_reason":"max_tokens","output_tokens":2}`,
		"streamedText":     `"Hello there"`,
		"toolUse":          `{"name":"get_weather","input":{"city":"Lima"},"stop_reason":"tool_use"}`,
		"streamedToolUse":  `{"name":"get_weather","input":{"city":"Lima"},"stop_reason":"tool_use"}`,
		"toolAnswer":       `"sunny in Lima"`,
		"streamedAnswer":   `"sunny in Lima"`,
		"thinking":         `{"thinking":"about: think","signed":true,"text":"think"}`,
		"streamedThinking": `{"thinking":"about: think","signed":true,"text":"think"}`,
		"countMatches":     `true`,
		"error":            `{"status":404,"type":"not_found_error"}`,
	}
	for k, w := range want {
		if string(got[k]) != w {
			t.Errorf("%s: got %s, want %s", k, got[k], w)
		}
	}
}

// TestAnthropicDisaggregatedPrefill: /v1/messages takes the same P/D path as chat: on a gateway that sends
// long prompts to another's KV server, a message is prefilled remotely and has chat's tokens, whole and
// streamed.
func TestAnthropicDisaggregatedPrefill(t *testing.T) {
	kvAddr := freeAddr(t)
	startDuet(t, "--engine-opt", "kv_listen="+kvAddr)
	decode := startDuet(t, "--prefill", kvAddr, "--engine-opt", "remote_prefill_threshold=32")
	prompt := strings.Repeat("The lighthouse keeper counted the waves that broke on the rocks below. ", 12)
	post := func(path, body string, out any) {
		t.Helper()
		resp, err := http.Post(decode.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(data, out) != nil {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, data)
		}
	}
	// The message first: its prompt is not in the decode instance's prefix cache yet.
	body := fmt.Sprintf(`{"model":"embedded","temperature":0,"max_tokens":24,"messages":[{"role":"user","content":%q}]}`, prompt)
	var msg struct {
		Content []struct{ Text string } `json:"content"`
		Timings struct {
			PrefillSource string         `json:"prefill_source"`
			Remote        map[string]any `json:"remote_prefill"`
		} `json:"timings"`
	}
	post("/v1/messages", body, &msg)
	if msg.Timings.PrefillSource != "remote" {
		t.Errorf("prefill source %q (remote: %v), want remote", msg.Timings.PrefillSource, msg.Timings.Remote)
	}
	// Chat with thinking off, as a Messages request without thinking asks: the same prompt, so the same
	// tokens (and, now, a prefill from the cache).
	var chat struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Timings struct {
			PrefillSource string `json:"prefill_source"`
		} `json:"timings"`
	}
	post("/v1/chat/completions", fmt.Sprintf(`{"model":"embedded","temperature":0,"max_tokens":24,
		"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":%q}]}`, prompt), &chat)
	t.Logf("chat after the message prefilled from %q", chat.Timings.PrefillSource)
	if len(chat.Choices) != 1 || len(msg.Content) != 1 || msg.Content[0].Text != chat.Choices[0].Message.Content {
		t.Errorf("the message differs from chat:\nmessage %+v\n   chat %+v", msg.Content, chat.Choices)
	}
	streamed, _ := streamMessage(t, decode.anthropic(), anthropic.MessageNewParams{
		Model: "embedded", MaxTokens: 24, Temperature: anthropic.Float(0), Messages: []anthropic.MessageParam{userText(prompt)}})
	if len(streamed.Content) != 1 || len(chat.Choices) != 1 || streamed.Content[0].Text != chat.Choices[0].Message.Content {
		t.Errorf("the streamed message differs from chat: %s", streamed.RawJSON())
	}
}

// TestAnthropicCluster: a message and a token count for a model only another node serves are forwarded to
// it: the answer, whole and streamed through the hop, and the count are that node's.
func TestAnthropicCluster(t *testing.T) {
	port := clusterPort(t)
	secret := writeSecret(t, "the two nodes that speak Anthropic share this secret")
	n1 := startNode(t, "127.0.0.1", port, secret, "")
	n2 := startNode(t, "127.0.0.2", port, secret, "127.0.0.1", "--engine", "echo", "--model", "echo")
	waitFor(t, 20*time.Second, "two ready instances", func() bool { return len(n1.readyOn(t)) == 2 && len(n2.readyOn(t)) == 2 })
	ctx := context.Background()
	params := anthropic.MessageNewParams{Model: "echo", MaxTokens: 2, Temperature: anthropic.Float(0),
		Messages: []anthropic.MessageParam{userText("Hello there")}}

	var resp *http.Response
	c1 := n1.anthropic()
	msg, err := c1.Messages.New(ctx, params, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != "Hello there" || resp.Header.Get("X-Duet-Forwarded-To") != n2.nodeID(t) {
		t.Errorf("through node 1: %s (forwarded to %q)", msg.RawJSON(), resp.Header.Get("X-Duet-Forwarded-To"))
	}
	streamed, _ := streamMessage(t, c1, params)
	sameMessage(t, &streamed, msg)

	count := func(g *node, model string) (int64, string) {
		t.Helper()
		var resp *http.Response
		c := g.anthropic()
		n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: anthropic.Model(model), Messages: params.Messages},
			option.WithResponseInto(&resp))
		if err != nil {
			t.Fatalf("count_tokens of %s on %s: %v", model, g.url, err)
		}
		return n.InputTokens, resp.Header.Get("X-Duet-Forwarded-To")
	}
	local, _ := count(n2, "echo")
	remote, to := count(n1, "echo")
	if remote != local || to != n2.nodeID(t) || remote != msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens {
		t.Errorf("count_tokens of echo: %d on node 1 (forwarded to %q), %d on node 2, usage %+v", remote, to, local, msg.Usage)
	}
	embedded, to := count(n2, "embedded")
	if embedded <= 0 || to != n1.nodeID(t) {
		t.Errorf("count_tokens of embedded on node 2: %d, forwarded to %q", embedded, to)
	}
}

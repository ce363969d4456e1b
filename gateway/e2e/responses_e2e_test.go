package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/duet-ai/duet/internal/testnode"
)

// The Responses API end to end: the official Go and npm clients against the gateway and the echo engine's
// scripted answers, tool calls and reasoning, the faulty engine's failures, and P/D on the embedded model.

func responseParams(model, input string) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}, Temperature: openai.Float(0),
	}
}

// streamResponse reads a stream to its end: the event types in order, the text its deltas add up to, and the
// response of its last event.
func streamResponse(t *testing.T, c openai.Client, p responses.ResponseNewParams) (types []string, text string, last responses.Response) {
	t.Helper()
	stream := c.Responses.NewStreaming(context.Background(), p)
	var b strings.Builder
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != int64(len(types)) {
			t.Errorf("event %d (%s) has sequence_number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			b.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			last = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(types) < 3 || types[0] != "response.created" || types[1] != "response.in_progress" {
		t.Errorf("events %v", types)
	}
	return types, b.String(), last
}

func TestResponsesOpenAIGo(t *testing.T) {
	g := startGateway(t)
	c := g.client()
	ctx := context.Background()

	t.Run("Text", func(t *testing.T) {
		p := responseParams("echo", "the quick brown fox")
		p.Instructions = openai.String("be brief")
		p.Metadata = shared.Metadata{"case": "text"}
		resp, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OutputText() != "the quick brown fox" || resp.Status != "completed" || !strings.HasPrefix(resp.ID, "resp_") || resp.Model != "echo" {
			t.Errorf("response %s", resp.RawJSON())
		}
		if len(resp.Output) != 1 || resp.Output[0].Type != "message" || !strings.HasPrefix(resp.Output[0].ID, "msg_") || resp.Output[0].Role != "assistant" {
			t.Errorf("output %+v", resp.Output)
		}
		if u := resp.Usage; u.OutputTokens != 4 || u.InputTokens == 0 || u.TotalTokens != u.InputTokens+4 {
			t.Errorf("usage %+v", u)
		}
		if resp.Instructions.OfString != "be brief" || resp.Metadata["case"] != "text" || resp.Temperature != 0 {
			t.Errorf("the response does not echo its request: %s", resp.RawJSON())
		}

		types, text, last := streamResponse(t, c, p)
		if text != "the quick brown fox" || last.OutputText() != text || last.Status != "completed" || last.Usage.OutputTokens != 4 {
			t.Errorf("streamed %q, final %s", text, last.RawJSON())
		}
		want := "response.created response.in_progress response.output_item.added response.content_part.added " +
			strings.Repeat("response.output_text.delta ", 4) +
			"response.output_text.done response.content_part.done response.output_item.done response.completed"
		if got := strings.Join(types, " "); got != want {
			t.Errorf("events\n got %s\nwant %s", got, want)
		}
	})

	t.Run("Incomplete", func(t *testing.T) {
		p := responseParams("echo", "one two three four five")
		p.MaxOutputTokens = openai.Int(3)
		resp, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != "incomplete" || resp.IncompleteDetails.Reason != "max_output_tokens" || resp.OutputText() != "one two three " || resp.MaxOutputTokens != 3 {
			t.Errorf("response %s", resp.RawJSON())
		}
		types, text, last := streamResponse(t, c, p)
		if types[len(types)-1] != "response.incomplete" || text != "one two three " || last.Status != "incomplete" {
			t.Errorf("streamed %q, events %v", text, types)
		}
	})

	t.Run("Reasoning", func(t *testing.T) {
		p := responseParams("echo", "think")
		p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffortLow}
		resp, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Output) != 2 || resp.Output[0].Type != "reasoning" || resp.OutputText() != "think" {
			t.Fatalf("output %s", resp.RawJSON())
		}
		if r := resp.Output[0].AsReasoning(); len(r.Content) != 1 || r.Content[0].Text != "about: think" || !strings.HasPrefix(r.ID, "rs_") {
			t.Errorf("reasoning %s", r.RawJSON())
		}
		if resp.Usage.OutputTokensDetails.ReasoningTokens != 2 || resp.Reasoning.Effort != "low" {
			t.Errorf("usage %+v, reasoning %+v", resp.Usage, resp.Reasoning)
		}
		types, _, last := streamResponse(t, c, p)
		if !strings.Contains(strings.Join(types, " "), "response.reasoning_text.delta response.reasoning_text.delta response.reasoning_text.done") ||
			last.Output[0].AsReasoning().Content[0].Text != "about: think" {
			t.Errorf("events %v, final %s", types, last.RawJSON())
		}
	})

	t.Run("Errors", func(t *testing.T) {
		p := responseParams("echo", "hi")
		p.Store = openai.Bool(true)
		_, err := c.Responses.New(ctx, p)
		wantAPIError(t, err, 400, "", "store")
		p = responseParams("echo", "hi")
		p.PreviousResponseID = openai.String("resp_earlier")
		_, err = c.Responses.New(ctx, p)
		wantAPIError(t, err, 400, "", "previous_response_id")
		// A hosted tool is left out of what the model sees and named in the response (as Codex's web_search
		// must be); --hosted-tools=error refuses it.
		p = responseParams("echo", "hi")
		p.Tools = []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}}
		var httpResp *http.Response
		resp, err := c.Responses.New(ctx, p, option.WithResponseInto(&httpResp))
		if err != nil || resp.OutputText() != "hi" || !strings.Contains(resp.RawJSON(), `"ignored_tools":["web_search"]`) || httpResp.Header.Get("Duet-Ignored-Tools") != "web_search" {
			t.Errorf("a request with web_search: %v %v", err, resp)
		}
		strict := startGateway(t, "--hosted-tools", "error").client()
		_, err = strict.Responses.New(ctx, p)
		wantAPIError(t, err, 400, "", "tools[0].type")
		p = responseParams("echo", "hi")
		p.Temperature = openai.Float(3)
		_, err = c.Responses.New(ctx, p)
		wantAPIError(t, err, 400, "", "temperature")
		p = responseParams("echo", "")
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(
			responses.ResponseInputMessageContentListParam{{OfInputImage: &responses.ResponseInputImageParam{ImageURL: openai.String("https://example.com/a.png")}}},
			responses.EasyInputMessageRoleUser)}}
		_, err = c.Responses.New(ctx, p)
		wantAPIError(t, err, 400, "", "input[0].content[0].type")
		_, err = c.Responses.New(ctx, responseParams("gpt-9", "hi"))
		wantAPIError(t, err, 404, "model_not_found", "model")
		// A stream refused before it starts is an HTTP error too.
		stream := c.Responses.NewStreaming(ctx, responseParams("gpt-9", "hi"))
		for stream.Next() {
		}
		wantAPIError(t, stream.Err(), 404, "model_not_found", "model")
		_, err = c.Responses.Get(ctx, "resp_123", responses.ResponseGetParams{})
		wantAPIError(t, err, 404, "not_found", "")
		if apiErr := (*openai.Error)(nil); !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "does not store responses") {
			t.Errorf("GET of a response: %v", err)
		}
		err = rawPost(g, "/v1/responses", "", `{"model":"echo","input":"hi","max_output_tokens":"ten"}`)
		wantAPIError(t, err, 400, "", "max_output_tokens")
		err = rawPost(g, "/v1/responses", "", `{"model":"echo","input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"call_9","output":"y"}]}`)
		wantAPIError(t, err, 400, "", "input[1].call_id")
		// The engine's parameters are this API's: a schema the engine cannot answer is text.format's fault.
		err = rawPost(g, "/v1/responses", "", `{"model":"echo","input":"hi","text":{"format":{"type":"json_schema","name":"a","schema":{"type":"object","properties":{"a":{"$ref":"#/nowhere"}},"required":["a"]}}}}`)
		wantAPIError(t, err, 400, "", "text.format")
	})
}

var weatherTool = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name:        "get_weather",
	Description: openai.String("The weather in a city"),
	Strict:      openai.Bool(true),
	Parameters: map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"city": map[string]any{"type": "string"}},
		"required":             []string{"city"},
		"additionalProperties": false,
	},
}}

// asInput turns a response's output items into input items, as a client sends them back with the next turn.
func asInput(t *testing.T, out []responses.ResponseOutputItemUnion) responses.ResponseInputParam {
	t.Helper()
	var in responses.ResponseInputParam
	for _, it := range out {
		switch it.Type {
		case "message":
			p := it.AsMessage().ToParam()
			in = append(in, responses.ResponseInputItemUnionParam{OfOutputMessage: &p})
		case "function_call":
			p := it.AsFunctionCall().ToParam()
			in = append(in, responses.ResponseInputItemUnionParam{OfFunctionCall: &p})
		case "reasoning":
			p := it.AsReasoning().ToParam()
			in = append(in, responses.ResponseInputItemUnionParam{OfReasoning: &p})
		default:
			t.Fatalf("output item of type %q", it.Type)
		}
	}
	return in
}

// TestResponsesToolRoundTripOpenAIGo: the Go client gets a function call, streamed and not, sends the output
// items back with the function's output and reads the answer; a forced call; reasoning items going back.
func TestResponsesToolRoundTripOpenAIGo(t *testing.T) {
	g := startGateway(t)
	c := g.client()
	ctx := context.Background()
	ask := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(`call: get_weather {"city":"Paris"}`, responses.EasyInputMessageRoleUser)}
	p := responses.ResponseNewParams{Model: "echo", Temperature: openai.Float(0), Tools: []responses.ToolUnionParam{weatherTool},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: ask}}
	resp, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "function_call" || resp.OutputText() != "" {
		t.Fatalf("output %s", resp.RawJSON())
	}
	fc := resp.Output[0].AsFunctionCall()
	if fc.Name != "get_weather" || fc.Arguments != `{"city":"Paris"}` || fc.CallID == "" || !strings.HasPrefix(fc.ID, "fc_") || fc.Status != "completed" {
		t.Errorf("call %s", fc.RawJSON())
	}
	if len(resp.Tools) != 1 || resp.Tools[0].Name != "get_weather" || !resp.Tools[0].Strict || resp.ToolChoice.OfToolChoiceMode != "auto" {
		t.Errorf("tools %+v, tool_choice %+v", resp.Tools, resp.ToolChoice)
	}

	// Streamed: the call's arguments arrive in pieces and are whole in its done event.
	types, _, last := streamResponse(t, c, p)
	joined := strings.Join(types, " ")
	if !strings.Contains(joined, "response.output_item.added response.function_call_arguments.delta") ||
		!strings.Contains(joined, "response.function_call_arguments.done response.output_item.done response.completed") {
		t.Errorf("events %v", types)
	}
	if len(last.Output) != 1 || last.Output[0].AsFunctionCall().Arguments != `{"city":"Paris"}` {
		t.Errorf("streamed output %s", last.RawJSON())
	}

	// The round trip: the call goes back with its output; the answer is what the tool said.
	p.Input.OfInputItemList = append(append(ask, asInput(t, resp.Output)...), responses.ResponseInputItemUnionParam{
		OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(fc.CallID),
			Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("18C and sunny")}}})
	resp, err = c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != "18C and sunny" || len(resp.Output) != 1 || resp.Status != "completed" {
		t.Errorf("answer after the tool: %s", resp.RawJSON())
	}
	if _, text, last := streamResponse(t, c, p); text != "18C and sunny" || last.OutputText() != text {
		t.Errorf("streamed answer after the tool: %q", text)
	}

	// Forced, with reasoning: the reasoning item, the call and its output all go back.
	p.Input.OfInputItemList = responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Oslo", responses.EasyInputMessageRoleUser)}
	p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}}
	p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffortLow}
	resp, err = c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 2 || resp.Output[0].Type != "reasoning" || resp.Output[1].AsFunctionCall().Arguments != `{"city":"Oslo"}` {
		t.Fatalf("forced call %s", resp.RawJSON())
	}
	if resp.ToolChoice.Name != "get_weather" || resp.ToolChoice.Type != "function" {
		t.Errorf("tool_choice %s", resp.ToolChoice.RawJSON())
	}
	p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{}
	p.Input.OfInputItemList = append(append(p.Input.OfInputItemList, asInput(t, resp.Output)...), responses.ResponseInputItemParamOfFunctionCallOutput("-3C"))
	p.Input.OfInputItemList[len(p.Input.OfInputItemList)-1].OfFunctionCallOutput.CallID = openai.String(resp.Output[1].AsFunctionCall().CallID)
	resp, err = c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != "-3C" {
		t.Errorf("answer after the forced call: %s", resp.RawJSON())
	}
}

// TestResponsesStructuredOutputOpenAIGo: a json_schema text format's answer parses into what the client
// asked for, whole and streamed.
func TestResponsesStructuredOutputOpenAIGo(t *testing.T) {
	g := startGateway(t)
	c := g.client()
	type verdict struct {
		Answer string   `json:"answer"`
		Score  int      `json:"score"`
		Tags   []string `json:"tags"`
	}
	p := responseParams("echo", "yes indeed")
	p.Text = responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{
		Name: "verdict", Strict: openai.Bool(true), Schema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"answer": map[string]any{"type": "string"},
				"score":  map[string]any{"type": "integer", "minimum": 3},
				"tags":   map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []string{"x", "y"}}, "minItems": 2},
			},
			"required": []string{"answer", "score", "tags"}, "additionalProperties": false,
		}}}}
	resp, err := c.Responses.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	var v verdict
	if err := json.Unmarshal([]byte(resp.OutputText()), &v); err != nil {
		t.Fatalf("output_text %q: %v", resp.OutputText(), err)
	}
	if v.Answer != "yes indeed" || v.Score != 3 || len(v.Tags) != 2 || v.Tags[0] != "x" {
		t.Errorf("parsed %+v from %q", v, resp.OutputText())
	}
	if f := resp.Text.Format; f.Type != "json_schema" || f.Name != "verdict" || !f.Strict {
		t.Errorf("text.format %s", f.RawJSON())
	}
	if _, text, _ := streamResponse(t, c, p); text != resp.OutputText() {
		t.Errorf("streamed %q, whole %q", text, resp.OutputText())
	}
}

// TestResponsesEngineFailures: the engine's failures reach the client with the status chat completions
// gives them; one mid-stream ends the stream with the error.
func TestResponsesEngineFailures(t *testing.T) {
	g := startFaulty(t)
	c := g.client()
	ctx := context.Background()
	_, err := c.Responses.New(ctx, responseParams("echo", "fail:internal"))
	wantAPIError(t, err, 500, "internal_error", "")
	_, err = c.Responses.New(ctx, responseParams("echo", "fail:busy"))
	wantAPIError(t, err, 429, "rate_limit_exceeded", "")

	p := responseParams("echo", "fail:midstream a b c d e")
	p.MaxOutputTokens = openai.Int(10)
	stream := c.Responses.NewStreaming(ctx, p)
	var types []string
	for stream.Next() {
		types = append(types, stream.Current().Type)
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "mid-stream") {
		t.Errorf("stream ended with %v after %v, want the engine's error", err, types)
	}
	if len(types) == 0 || types[len(types)-1] != "response.output_text.delta" {
		t.Errorf("events before the error: %v", types)
	}

	// Read raw, the stream says error, then response.failed.
	req, _ := http.NewRequest("POST", g.url+"/v1/responses", strings.NewReader(`{"model":"echo","input":"fail:midstream a b c","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if s := readAll(t, resp); !strings.Contains(s, "event: error\ndata: {\"type\":\"error\"") || !strings.HasSuffix(strings.TrimSpace(s[strings.LastIndex(s, "event: "):]), `"usage":null}}`) ||
		!strings.Contains(s[strings.LastIndex(s, "event: "):], "event: response.failed\n") {
		t.Errorf("raw stream:\n%s", s)
	}
}

func readAll(t *testing.T, r *http.Response) string {
	t.Helper()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// TestResponsesNodeClient: the npm client's create, stream helper with finalResponse, parse with a JSON
// schema, and a tool round trip, through testdata/responses_openai.mjs.
func TestResponsesNodeClient(t *testing.T) {
	testnode.Module(t, "openai")
	g := startGateway(t)
	script, err := filepath.Abs("testdata/responses_openai.mjs")
	if err != nil {
		t.Fatal(err)
	}
	out := testnode.Run(t, script, nil, g.url+"/v1")
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("script output %s: %v", out, err)
	}
	want := map[string]string{
		"createText":        `"the quick brown fox"`,
		"createStatus":      `"completed"`,
		"streamText":        `"the quick brown fox"`,
		"streamDeltas":      `"the quick brown fox"`,
		"streamReasoning":   `"about: think"`,
		"streamEvents":      `["response.created","response.in_progress","response.output_item.added","response.content_part.added","response.reasoning_text.delta","response.reasoning_text.delta","response.reasoning_text.done","response.content_part.done","response.output_item.done","response.output_item.added","response.content_part.added","response.output_text.delta","response.output_text.done","response.content_part.done","response.output_item.done","response.completed"]`,
		"parsed":            `{"answer":"ok"}`,
		"toolCall":          `{"name":"get_weather","arguments":"{\"city\":\"Lima\"}"}`,
		"toolParsed":        `{"city":"Lima"}`,
		"toolAnswer":        `"sunny in Lima"`,
		"streamedToolCall":  `{"name":"get_weather","arguments":"{\"city\":\"Lima\"}"}`,
		"streamedToolReply": `"sunny in Lima"`,
		"storeError":        `{"status":400,"param":"store"}`,
	}
	for k, w := range want {
		if string(got[k]) != w {
			t.Errorf("%s: got %s, want %s", k, got[k], w)
		}
	}
}

// TestResponsesDisaggregatedPrefill: /v1/responses runs on P/D as chat completions does: a long prompt on a
// gateway that prefills remotely gets the tokens chat gets on a gateway that prefills locally.
func TestResponsesDisaggregatedPrefill(t *testing.T) {
	kvAddr := freeAddr(t)
	prefill := startDuet(t, "--engine-opt", "kv_listen="+kvAddr)
	decode := startDuet(t, "--prefill", kvAddr, "--engine-opt", "remote_prefill_threshold=32")
	prompt := strings.Repeat("The lighthouse keeper counted the waves that broke on the rocks below. ", 12)

	chatBody := fmt.Sprintf(`{"model":"embedded","temperature":0,"max_tokens":24,"messages":[{"role":"user","content":%q}]}`, prompt)
	resp, err := http.Post(prefill.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Timings map[string]any `json:"timings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&chat); err != nil || resp.StatusCode != 200 || len(chat.Choices) != 1 {
		t.Fatalf("chat: status %d: %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if chat.Timings["prefill_source"] != "local" {
		t.Fatalf("chat prefilled %v, want local", chat.Timings["prefill_source"])
	}

	p := responseParams("embedded", prompt)
	p.MaxOutputTokens = openai.Int(24)
	c := decode.client()
	r, err := c.Responses.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	var timings struct {
		PrefillSource string         `json:"prefill_source"`
		Remote        map[string]any `json:"remote_prefill"`
	}
	if err := json.Unmarshal([]byte(r.JSON.ExtraFields["timings"].Raw()), &timings); err != nil || timings.PrefillSource != "remote" {
		t.Fatalf("responses prefilled %q (%v), want remote: %s", timings.PrefillSource, err, r.RawJSON())
	}
	if r.OutputText() != chat.Choices[0].Message.Content {
		t.Errorf("the disaggregated response differs from chat's local answer:\n responses %q\n      chat %q", r.OutputText(), chat.Choices[0].Message.Content)
	}
	if _, text, _ := streamResponse(t, c, p); text != r.OutputText() {
		t.Errorf("streamed %q, whole %q", text, r.OutputText())
	}
	t.Logf("remote prefill: %v", timings.Remote)
}

// TestResponsesForwarded: a request for a model only another node serves is forwarded there, and its answer,
// whole or streamed, passes through the entry gateway as the owner rendered it.
func TestResponsesForwarded(t *testing.T) {
	port := clusterPort(t)
	secret := writeSecret(t, "the secret of two nodes that answer in responses")
	// Gossip on ports of their own, not the default 7946, which another duet on this machine may hold.
	gossip1 := freeAddr(t)
	_, p2, _ := net.SplitHostPort(freeAddr(t))
	n1 := startNode(t, "127.0.0.1", port, secret, "", "--engine", "echo", "--model", "other", "--cluster-bind", gossip1)
	n2 := startNode(t, "127.0.0.2", port, secret, gossip1, "--engine", "echo", "--model", "echo", "--cluster-bind", "127.0.0.2:"+p2)
	id2 := n2.nodeID(t)
	waitFor(t, 20*time.Second, "two ready instances", func() bool { return len(n1.readyOn(t)) == 2 })

	c := n1.client()
	p := responseParams("echo", "call: get_weather {\"city\":\"Rome\"}")
	p.Tools = []responses.ToolUnionParam{weatherTool}
	resp, err := c.Responses.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	var timings struct {
		Route struct {
			DecodeNode string `json:"decode_node"`
			Forwarded  bool   `json:"forwarded"`
		} `json:"route"`
	}
	if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["timings"].Raw()), &timings); err != nil || !timings.Route.Forwarded || timings.Route.DecodeNode != id2 {
		t.Errorf("route %+v (%v), want forwarded to %s", timings.Route, err, id2)
	}
	if len(resp.Output) != 1 || resp.Output[0].AsFunctionCall().Arguments != `{"city":"Rome"}` {
		t.Errorf("forwarded response %s", resp.RawJSON())
	}
	types, _, last := streamResponse(t, c, p)
	if types[len(types)-1] != "response.completed" || len(last.Output) != 1 || last.Output[0].AsFunctionCall().Arguments != `{"city":"Rome"}` {
		t.Errorf("forwarded stream %v: %s", types, last.RawJSON())
	}
	_, err = c.Responses.New(context.Background(), responseParams("echo", "hi"), option.WithJSONSet("store", true))
	wantAPIError(t, err, 400, "", "store")
}

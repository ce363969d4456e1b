package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-ai/duet/internal/testnode"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

var weatherFunction = shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("The weather in a city"),
	Strict:      openai.Bool(true),
	Parameters: shared.FunctionParameters{
		"type":                 "object",
		"properties":           map[string]any{"city": map[string]any{"type": "string"}},
		"required":             []string{"city"},
		"additionalProperties": false,
	},
}

// TestToolRoundTripOpenAIGo: the official Go client calls a tool, streamed and not, sends the result back and
// reads the answer, through the gateway and the echo engine's scripted tool calls.
func TestToolRoundTripOpenAIGo(t *testing.T) {
	g := startGateway(t)
	c := g.client()
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:       "echo",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(`call: get_weather {"city":"Paris"}`)},
		Tools:       []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(weatherFunction)},
		Temperature: openai.Float(0),
	}
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("finish %q, tool calls %+v", ch.FinishReason, ch.Message.ToolCalls)
	}
	call := ch.Message.ToolCalls[0]
	if call.Function.Name != "get_weather" || call.Function.Arguments != `{"city":"Paris"}` || call.ID == "" || call.Type != "function" {
		t.Errorf("call %+v", call)
	}
	if !strings.Contains(ch.Message.RawJSON(), `"content":null`) {
		t.Errorf("a message of tool calls should have content null: %s", ch.Message.RawJSON())
	}

	// Streamed: the accumulator sees the call finish and assembles the same message.
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var finished []openai.FinishedChatCompletionToolCall
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(finished) != 1 || finished[0].ID == "" || finished[0].Name != "get_weather" || finished[0].Arguments != `{"city":"Paris"}` {
		t.Errorf("streamed tool calls %+v", finished)
	}
	if got := acc.Choices[0]; got.FinishReason != "tool_calls" || len(got.Message.ToolCalls) != 1 || got.Message.ToolCalls[0].ID != finished[0].ID {
		t.Errorf("accumulated %+v", got)
	}

	// The round trip: the assistant's calls and the tool's answer go back.
	params.Messages = append(params.Messages, ch.Message.ToParam(), openai.ToolMessage("18C and sunny", call.ID))
	resp, err = c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if ch := resp.Choices[0]; ch.FinishReason != "stop" || ch.Message.Content != "18C and sunny" || len(ch.Message.ToolCalls) != 0 {
		t.Errorf("answer after the tool: finish %q content %q calls %+v", ch.FinishReason, ch.Message.Content, ch.Message.ToolCalls)
	}

	// Forced, with several choices.
	params.Messages = params.Messages[:1]
	params.Messages[0] = openai.UserMessage("Oslo")
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
		Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}}}
	params.N = openai.Int(2)
	resp, err = c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 2 {
		t.Fatalf("%d choices, want 2", len(resp.Choices))
	}
	for i, ch := range resp.Choices {
		if int(ch.Index) != i || ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` {
			t.Errorf("choice %d: %s", i, ch.RawJSON())
		}
	}
	if resp.Usage.CompletionTokens <= 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
		t.Errorf("usage %+v", resp.Usage)
	}
}

// TestStructuredOutputOpenAIGo: json_schema and json_object answers parse into what the client asked for.
func TestStructuredOutputOpenAIGo(t *testing.T) {
	g := startGateway(t)
	c := g.client()
	type verdict struct {
		Answer string   `json:"answer"`
		Score  int      `json:"score"`
		Tags   []string `json:"tags"`
	}
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"answer": map[string]any{"type": "string"},
			"score":  map[string]any{"type": "integer", "minimum": 3},
			"tags":   map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []string{"x", "y"}}, "minItems": 2},
		},
		"required": []string{"answer", "score", "tags"}, "additionalProperties": false,
	}
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "echo",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("yes indeed")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "verdict", Schema: schema, Strict: openai.Bool(true)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var v verdict
	if err := json.Unmarshal([]byte(resp.Choices[0].Message.Content), &v); err != nil {
		t.Fatalf("content %q: %v", resp.Choices[0].Message.Content, err)
	}
	if v.Answer != "yes indeed" || v.Score != 3 || len(v.Tags) != 2 || v.Tags[0] != "x" {
		t.Errorf("parsed %+v from %q", v, resp.Choices[0].Message.Content)
	}
	resp, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:          "echo",
		Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != `{"echo":"hi"}` {
		t.Errorf("json_object content %q", got)
	}
}

// TestToolsNodeClient: the official npm client's helpers against the gateway: runTools executes a tool and
// sends its result back (streamed and not), parse reads strict tool arguments and a JSON schema answer, and
// the streaming helper assembles tool calls and reasoning.
func TestToolsNodeClient(t *testing.T) {
	testnode.Module(t, "openai")
	g := startGateway(t)
	script, err := filepath.Abs("testdata/openai_tools.mjs")
	if err != nil {
		t.Fatal(err)
	}
	out := testnode.Run(t, script, nil, g.url+"/v1")
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("script output %s: %v", out, err)
	}
	want := map[string]string{
		"runTools":          `"sunny in Lima"`,
		"runToolsStream":    `"sunny in Lima"`,
		"parsedArguments":   `{"city":"Lima"}`,
		"parsedContent":     `{"answer":"ok"}`,
		"streamedToolCalls": `[{"name":"get_weather","arguments":"{\"city\":\"Lima\"}"}]`,
		"streamedReasoning": `"about: think"`,
	}
	for k, w := range want {
		if string(got[k]) != w {
			t.Errorf("%s: got %s, want %s", k, got[k], w)
		}
	}
}

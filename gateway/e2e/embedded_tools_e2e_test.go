package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// cityArgs checks a forced call's arguments against its schema: a city of at most 12 characters.
func cityArgs(t *testing.T, api, args string) {
	t.Helper()
	var a struct {
		City *string `json:"city"`
	}
	if err := json.Unmarshal([]byte(args), &a); err != nil || a.City == nil || len([]rune(*a.City)) > 12 {
		t.Errorf("%s: arguments %s do not match the schema (%v)", api, args, err)
	}
}

var boundedCity = map[string]any{
	"type":                 "object",
	"properties":           map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
	"required":             []string{"city"},
	"additionalProperties": false,
}

// TestEmbeddedToolRoundTripEveryAPI: with the embedded model (a real engine, constrained decoding, the
// Llama 3.1 tool syntax of its template), every client API gets a forced tool call whose arguments match the
// schema, streamed and not, sends the tool's result back and gets an answer: chat completions and Responses
// through openai-go, Messages through anthropic-sdk-go, Ollama's /api/chat over HTTP.
func TestEmbeddedToolRoundTripEveryAPI(t *testing.T) {
	g := startDuet(t)
	ctx := context.Background()

	t.Run("chat", func(t *testing.T) {
		c := g.client(option.WithRequestTimeout(2 * time.Minute))
		p := openai.ChatCompletionNewParams{Model: "embedded", MaxTokens: openai.Int(200), Temperature: openai.Float(0.8), Seed: openai.Int(1),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Oslo?")},
			Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name: "get_weather", Parameters: boundedCity, Strict: openai.Bool(true)})},
			ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
				Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}}},
		}
		resp, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		msg := resp.Choices[0].Message
		if resp.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 {
			t.Fatalf("%s", resp.RawJSON())
		}
		cityArgs(t, "chat", msg.ToolCalls[0].Function.Arguments)
		stream := c.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("streamed: %v %+v", err, acc.Choices)
		}
		if got := acc.Choices[0].Message.ToolCalls[0].Function.Arguments; got != msg.ToolCalls[0].Function.Arguments {
			t.Errorf("streamed arguments %s, whole %s (same seed)", got, msg.ToolCalls[0].Function.Arguments)
		}
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{}
		p.MaxTokens = openai.Int(12)
		p.Messages = append(p.Messages, msg.ToParam(), openai.ToolMessage("18C", msg.ToolCalls[0].ID))
		answer, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if f := answer.Choices[0].FinishReason; f != "stop" && f != "length" && f != "tool_calls" {
			t.Errorf("answer after the tool: %s", answer.RawJSON())
		}
	})

	t.Run("responses", func(t *testing.T) {
		c := g.client(option.WithRequestTimeout(2 * time.Minute))
		p := responses.ResponseNewParams{Model: "embedded", MaxOutputTokens: openai.Int(200), Temperature: openai.Float(0.8),
			Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Oslo?")},
			Tools:      []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Parameters: boundedCity, Strict: openai.Bool(true)}}},
			ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "get_weather"}},
		}
		resp, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var call responses.ResponseFunctionToolCall
		for _, it := range resp.Output {
			if it.Type == "function_call" {
				call = it.AsFunctionCall()
			}
		}
		if call.CallID == "" {
			t.Fatalf("no function call: %s", resp.RawJSON())
		}
		cityArgs(t, "responses", call.Arguments)
		if _, _, last := streamResponse(t, c, p); len(last.Output) == 0 || last.Output[len(last.Output)-1].Type != "function_call" {
			t.Errorf("streamed: %s", last.RawJSON())
		}
		p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{}
		p.MaxOutputTokens = openai.Int(12)
		in := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Weather in Oslo?", responses.EasyInputMessageRoleUser)}
		in = append(in, asInput(t, resp.Output)...)
		in = append(in, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: openai.String(call.CallID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("18C")}}})
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: in}
		answer, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if answer.Status != "completed" && answer.Status != "incomplete" {
			t.Errorf("answer after the tool: %s", answer.RawJSON())
		}
	})

	t.Run("anthropic", func(t *testing.T) {
		c := g.anthropic(anthropicoption.WithRequestTimeout(2 * time.Minute))
		p := anthropic.MessageNewParams{Model: "embedded", MaxTokens: 200, Temperature: anthropic.Float(0.8),
			Messages: []anthropic.MessageParam{userText("Weather in Oslo?")},
			Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{
				Properties: boundedCity["properties"], Required: []string{"city"}, ExtraFields: map[string]any{"additionalProperties": false}}}}},
			ToolChoice: anthropic.ToolChoiceParamOfTool("get_weather"),
		}
		msg, err := c.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != anthropic.StopReasonToolUse || len(msg.Content) == 0 || msg.Content[len(msg.Content)-1].Type != "tool_use" {
			t.Fatalf("%s", msg.RawJSON())
		}
		use := msg.Content[len(msg.Content)-1]
		cityArgs(t, "anthropic", string(use.Input))
		if streamed, _ := streamMessage(t, c, p); streamed.StopReason != anthropic.StopReasonToolUse {
			t.Errorf("streamed: %s", streamed.RawJSON())
		}
		p.ToolChoice = anthropic.ToolChoiceUnionParam{}
		p.MaxTokens = 12
		p.Messages = append(p.Messages, msg.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "18C", false)))
		answer, err := c.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if answer.StopReason == "" {
			t.Errorf("answer after the tool: %s", answer.RawJSON())
		}
	})

	t.Run("ollama", func(t *testing.T) {
		post := func(body string) map[string]any {
			t.Helper()
			resp, err := http.Post(g.url+"/api/chat", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var out map[string]any
			if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			return out
		}
		// Ollama has no tool_choice: the schema goes in as format, the structured answer is the arguments.
		schema, _ := json.Marshal(boundedCity)
		out := post(fmt.Sprintf(`{"model":"embedded","stream":false,"format":%s,"options":{"num_predict":200,"seed":1},"messages":[{"role":"user","content":"Weather in Oslo?"}]}`, schema))
		content, _ := out["message"].(map[string]any)["content"].(string)
		cityArgs(t, "ollama format", content)
		tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
		out = post(fmt.Sprintf(`{"model":"embedded","stream":false,"tools":%s,"options":{"num_predict":12},"messages":[
			{"role":"user","content":"Weather in Oslo?"},
			{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Oslo"}}}]},
			{"role":"tool","content":"18C","tool_name":"get_weather"}]}`, tools))
		if out["done"] != true {
			t.Errorf("answer after the tool: %v", out)
		}
	})
}

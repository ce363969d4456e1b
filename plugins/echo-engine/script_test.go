package echo_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	echo "github.com/duet-ai/duet/plugins/echo-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

type outcome struct {
	content, reasoning string
	streamed           []engine.ToolCall
	final              *engine.Final
}

func generate(t *testing.T, e *echo.Engine, req engine.GenerateRequest) outcome {
	t.Helper()
	var o outcome
	err := e.Generate(context.Background(), req, func(ev engine.Event) error {
		if tok := ev.Token; tok != nil {
			o.content += tok.Text
			o.reasoning += tok.Reasoning
			for _, d := range tok.ToolCalls {
				if d.Index == len(o.streamed) {
					o.streamed = append(o.streamed, engine.ToolCall{ID: d.ID, Name: d.Name})
				}
				o.streamed[d.Index].Arguments += d.Arguments
			}
		}
		if ev.Final != nil {
			o.final = ev.Final
			o.content += ev.Final.Text
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestScripts pins the echo engine's made-up tool calls, JSON and reasoning, which gateway tests and
// examples rely on.
func TestScripts(t *testing.T) {
	e := echo.New()
	d, err := e.Load(context.Background(), engine.LoadRequest{Model: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	weather := engine.Tool{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["city","days"]}`)}
	clock := engine.Tool{Name: "get_time"}
	user := func(s string) []engine.Message { return []engine.Message{{Role: "user", Content: s}} }
	cases := []struct {
		name      string
		req       engine.GenerateRequest
		content   string
		reasoning string
		calls     []string // name + " " + arguments
		finish    engine.FinishReason
	}{
		{name: "plain echo", req: engine.GenerateRequest{Messages: user("hello there")}, content: "hello there", finish: engine.FinishStop},
		{name: "a call line", req: engine.GenerateRequest{Messages: user(`call: get_weather {"city": "Paris", "days": 2}`), Tools: []engine.Tool{weather, clock}, ParallelToolCalls: true},
			calls: []string{`get_weather {"city":"Paris","days":2}`}, finish: engine.FinishToolCalls},
		{name: "parallel calls", req: engine.GenerateRequest{Messages: user("call: get_time\ncall: get_weather {\"city\":\"Oslo\",\"days\":1}"), Tools: []engine.Tool{weather, clock}, ParallelToolCalls: true},
			calls: []string{`get_time {}`, `get_weather {"city":"Oslo","days":1}`}, finish: engine.FinishToolCalls},
		{name: "parallel calls not allowed", req: engine.GenerateRequest{Messages: user("call: get_time\ncall: get_time"), Tools: []engine.Tool{clock}},
			calls: []string{`get_time {}`}, finish: engine.FinishToolCalls},
		{name: "unknown tool is text", req: engine.GenerateRequest{Messages: user("call: nope"), Tools: []engine.Tool{clock}}, content: "call: nope", finish: engine.FinishStop},
		{name: "tool choice none", req: engine.GenerateRequest{Messages: user("call: get_time"), Tools: []engine.Tool{clock}, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceNone}},
			content: "call: get_time", finish: engine.FinishStop},
		{name: "forced function makes up arguments", req: engine.GenerateRequest{Messages: user("Rome"), Tools: []engine.Tool{clock, weather}, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}},
			calls: []string{`get_weather {"city":"Rome","days":1}`}, finish: engine.FinishToolCalls},
		{name: "required calls the first tool", req: engine.GenerateRequest{Messages: user("now"), Tools: []engine.Tool{clock, weather}, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired}},
			calls: []string{`get_time {}`}, finish: engine.FinishToolCalls},
		{name: "answer from a tool", req: engine.GenerateRequest{Tools: []engine.Tool{clock}, Messages: []engine.Message{
			{Role: "user", Content: "call: get_time"}, {Role: "assistant", ToolCalls: []engine.ToolCall{{ID: "c", Name: "get_time", Arguments: "{}"}}},
			{Role: "tool", ToolCallID: "c", Content: "noon"}}}, content: "noon", finish: engine.FinishStop},
		{name: "json object", req: engine.GenerateRequest{Messages: user("hi you"), ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONObject}},
			content: `{"echo":"hi you"}`, finish: engine.FinishStop},
		{name: "json schema", req: engine.GenerateRequest{Messages: user("x"), ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema,
			Schema: []byte(`{"type":"object","properties":{"n":{"type":"number"},"tags":{"type":"array","items":{"$ref":"#/$defs/t"},"minItems":1},"ok":{"type":"boolean"}},"required":["tags","n","ok"],"$defs":{"t":{"enum":["a","b"]}}}`)}},
			content: `{"n":0,"ok":true,"tags":["a"]}`, finish: engine.FinishStop},
		{name: "thinking", req: engine.GenerateRequest{Messages: user("why"), TemplateVars: map[string]any{"enable_thinking": true}},
			reasoning: "about: why", content: "why", finish: engine.FinishStop},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.InstanceID = d.InstanceID
			o := generate(t, e, c.req)
			if o.content != c.content || o.reasoning != c.reasoning || o.final.FinishReason != c.finish {
				t.Errorf("content %q reasoning %q finish %s, want %q %q %s", o.content, o.reasoning, o.final.FinishReason, c.content, c.reasoning, c.finish)
			}
			var got []string
			for i, call := range o.final.ToolCalls {
				got = append(got, call.Name+" "+call.Arguments)
				if !strings.HasPrefix(call.ID, "call_") || !json.Valid([]byte(call.Arguments)) {
					t.Errorf("call %+v", call)
				}
				if i >= len(o.streamed) || o.streamed[i] != call {
					t.Errorf("streamed %+v, final %+v", o.streamed, o.final.ToolCalls)
				}
			}
			if strings.Join(got, "\n") != strings.Join(c.calls, "\n") {
				t.Errorf("calls %q, want %q", got, c.calls)
			}
		})
	}
}

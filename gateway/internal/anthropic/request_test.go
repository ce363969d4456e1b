package anthropic

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

func TestParseMessages(t *testing.T) {
	t.Parallel()
	weather := `{"name":"get_weather","description":"The weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}`
	cases := []struct {
		name string
		body string
		want Request
	}{
		{
			name: "a string",
			body: `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
			want: Request{Model: "m", Messages: []engine.Message{{Role: "user", Content: "hi"}},
				Sampling: engine.Sampling{MaxTokens: 8, Temperature: 1}, ParallelToolCalls: true,
				TemplateVars: map[string]any{"enable_thinking": false}},
		},
		{
			name: "system blocks, text blocks, sampling and stream",
			body: `{"model":"m","max_tokens":8,"stream":true,"temperature":0.5,"top_p":0.9,"top_k":40,
				"stop_sequences":["END",""],"metadata":{"user_id":"u"},
				"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be kind."}],
				"messages":[{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]}]}`,
			want: Request{Model: "m", Stream: true,
				Messages:          []engine.Message{{Role: "system", Content: "Be brief.\nBe kind."}, {Role: "user", Content: "one\ntwo"}},
				Sampling:          engine.Sampling{MaxTokens: 8, Temperature: 0.5, TopP: 0.9, TopK: 40, Stop: []string{"END"}},
				ParallelToolCalls: true, TemplateVars: map[string]any{"enable_thinking": false}},
		},
		{
			name: "a tool round trip with thinking",
			body: `{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},
				"tools":[` + weather + `],"tool_choice":{"type":"any","disable_parallel_tool_use":true},
				"messages":[
					{"role":"user","content":"call: get_weather {\"city\":\"Oslo\"}"},
					{"role":"assistant","content":[
						{"type":"thinking","thinking":"The user wants weather.","signature":"c2ln"},
						{"type":"redacted_thinking","data":"opaque"},
						{"type":"text","text":"Let me look."},
						{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{ "city" : "Oslo" }}]},
					{"role":"user","content":[
						{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18C"},{"type":"text","text":"sunny"}]},
						{"type":"text","text":"And tomorrow?"}]}]}`,
			want: Request{Model: "m",
				Messages: []engine.Message{
					{Role: "user", Content: `call: get_weather {"city":"Oslo"}`},
					{Role: "assistant", Content: "Let me look.", Reasoning: "The user wants weather.",
						ToolCalls: []engine.ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
					{Role: "tool", ToolCallID: "toolu_1", Content: "18C\nsunny"},
					{Role: "user", Content: "And tomorrow?"},
				},
				Sampling: engine.Sampling{MaxTokens: 2048, Temperature: 1},
				Tools: []engine.Tool{{Name: "get_weather", Description: "The weather",
					Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
				ToolChoice:   engine.ToolChoice{Mode: engine.ToolChoiceRequired},
				TemplateVars: map[string]any{"enable_thinking": true}},
		},
		{
			name: "a failed tool, a named tool choice, structured output",
			body: `{"model":"m","max_tokens":8,"thinking":{"type":"disabled"},
				"tools":[` + weather + `],"tool_choice":{"type":"tool","name":"get_weather"},
				"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}},
				"messages":[
					{"role":"user","content":"weather?"},
					{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
					{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"no such city","is_error":true}]}]}`,
			want: Request{Model: "m",
				Messages: []engine.Message{
					{Role: "user", Content: "weather?"},
					{Role: "assistant", ToolCalls: []engine.ToolCall{{ID: "t1", Name: "get_weather", Arguments: `{}`}}},
					{Role: "tool", ToolCallID: "t1", Content: "Error: no such city"},
				},
				Sampling: engine.Sampling{MaxTokens: 8, Temperature: 1},
				Tools: []engine.Tool{{Name: "get_weather", Description: "The weather",
					Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
				ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}, ParallelToolCalls: true,
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: []byte(`{"type":"object"}`), Strict: true},
				TemplateVars:   map[string]any{"enable_thinking": false}},
		},
		{
			name: "tool_choice none, adaptive thinking",
			body: `{"model":"m","max_tokens":8,"thinking":{"type":"adaptive"},"tools":[` + weather + `],"tool_choice":{"type":"none"},
				"messages":[{"role":"user","content":"hi"}]}`,
			want: Request{Model: "m", Messages: []engine.Message{{Role: "user", Content: "hi"}},
				Sampling: engine.Sampling{MaxTokens: 8, Temperature: 1},
				Tools: []engine.Tool{{Name: "get_weather", Description: "The weather",
					Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
				ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceNone}, ParallelToolCalls: true,
				TemplateVars: map[string]any{"enable_thinking": true}},
		},
		{
			name: "system messages where they are, deferred tools left out, adaptive thinking at low effort",
			body: `{"model":"m","max_tokens":32000,"thinking":{"type":"adaptive","display":"omitted"},"output_config":{"effort":"low"},
				"metadata":{"user_id":"u"},"context_management":{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":100000}}]},
				"tools":[` + weather + `,{"name":"later","description":"d","input_schema":{"type":"object","properties":{}},"defer_loading":true}],
				"messages":[
					{"role":"user","content":"hi"},
					{"role":"system","content":[{"type":"text","text":"env","cache_control":{"type":"ephemeral"}}],"output_config":{"effort":"low"}},
					{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{}}]},
					{"role":"system","content":"between a call and its result"},
					{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"sun","cache_control":{"type":"ephemeral"}}]}]}`,
			want: Request{Model: "m",
				Messages: []engine.Message{
					{Role: "user", Content: "hi"},
					{Role: "system", Content: "env"},
					{Role: "assistant", ToolCalls: []engine.ToolCall{{ID: "t1", Name: "get_weather", Arguments: `{}`}}},
					{Role: "system", Content: "between a call and its result"},
					{Role: "tool", ToolCallID: "t1", Content: "sun"},
				},
				Sampling: engine.Sampling{MaxTokens: 32000, Temperature: 1},
				Tools: []engine.Tool{{Name: "get_weather", Description: "The weather",
					Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
				ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceAuto}, ParallelToolCalls: true,
				TemplateVars: map[string]any{"enable_thinking": false}},
		},
		{
			name: "clear_thinking keeps the latest turns' thinking",
			body: `{"model":"m","max_tokens":8,"thinking":{"type":"adaptive"},"output_config":{"effort":"high"},
				"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":1}}]},
				"messages":[
					{"role":"user","content":"1"},
					{"role":"assistant","content":[{"type":"thinking","thinking":"old","signature":"s"},{"type":"text","text":"a"}]},
					{"role":"user","content":"2"},
					{"role":"assistant","content":[{"type":"thinking","thinking":"new","signature":"s"},{"type":"text","text":"b"}]},
					{"role":"user","content":"3"}]}`,
			want: Request{Model: "m",
				Messages: []engine.Message{
					{Role: "user", Content: "1"}, {Role: "assistant", Content: "a"},
					{Role: "user", Content: "2"}, {Role: "assistant", Content: "b", Reasoning: "new"},
					{Role: "user", Content: "3"},
				},
				Sampling: engine.Sampling{MaxTokens: 8, Temperature: 1}, ParallelToolCalls: true,
				TemplateVars: map[string]any{"enable_thinking": true}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseMessages([]byte(c.body))
			if err != nil {
				t.Fatalf("error %q", err.Message)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseCountTokens(t *testing.T) {
	t.Parallel()
	// No max_tokens; sampling fields do not matter to a count and are not checked.
	got, err := ParseCountTokens([]byte(`{"model":"m","temperature":7,"system":"s","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err.Message)
	}
	want := Request{Model: "m", Messages: []engine.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "hi"}},
		ParallelToolCalls: true, TemplateVars: map[string]any{"enable_thinking": false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// TestParseErrors: every bad input is a 400 invalid_request_error whose message names the field. The
// envelopes are in testdata/parse_errors.golden, one per case, so their wording can be reviewed in one place.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	const tools = `"tools":[{"name":"f","input_schema":{"type":"object"}}]`
	msg := func(content string) string {
		return `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":` + content + `}]}`
	}
	turn := func(assistant, user string) string {
		return `{"model":"m","max_tokens":8,` + tools + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":` +
			assistant + `},{"role":"user","content":` + user + `}]}`
	}
	cases := []struct {
		name, body, param, want string // a name starting "count_tokens" parses as count_tokens
	}{
		{"empty body", ``, "", "the request body is empty"},
		{"not an object", `[1]`, "", "must be a JSON object"},
		{"bad JSON", `{"model":`, "", "not valid JSON"},
		{"not UTF-8", "{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", "", "not valid UTF-8"},
		{"no model", `{"max_tokens":8,"messages":[]}`, "model", "model: Field required"},
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "max_tokens: Field required"},
		{"max_tokens a string", `{"model":"m","max_tokens":"8","messages":[]}`, "max_tokens", "invalid type for 'max_tokens'"},
		{"max_tokens zero", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "max_tokens must be between 1"},
		{"no messages", `{"model":"m","max_tokens":8}`, "messages", "messages: Field required"},
		{"count_tokens without messages", `{"model":"m"}`, "messages", "messages: Field required"},
		{"empty messages", `{"model":"m","max_tokens":8,"messages":[]}`, "messages", "at least one message"},
		{"no role", `{"model":"m","max_tokens":8,"messages":[{"content":"hi"}]}`, "messages.0.role", "messages.0.role: Field required"},
		{"a system message with an image", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"system","content":[{"type":"image"}]}]}`, "messages.1.content.0.type", "image content is not supported"},
		{"a system message with tool_use", `{"model":"m","max_tokens":8,"messages":[{"role":"system","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`, "messages.0.content.0.type", "cannot be in a system message"},
		{"unknown role", `{"model":"m","max_tokens":8,"messages":[{"role":"tool","content":"hi"}]}`, "messages.0.role", `must be "user", "assistant" or "system"`},
		{"no content", `{"model":"m","max_tokens":8,"messages":[{"role":"user"}]}`, "messages.0.content", "messages.0.content: Field required"},
		{"empty content", msg(`""`), "messages.0.content", "non-empty content"},
		{"empty blocks", msg(`[]`), "messages.0.content", "non-empty content"},
		{"content a number", msg(`5`), "messages.0.content", "must be a string or an array of content blocks"},
		{"a block of the wrong type", msg(`[{"type":"text","text":5}]`), "messages.0.content", "invalid type for 'text'"},
		{"a block without type", msg(`[{"text":"hi"}]`), "messages.0.content.0.type", "Field required"},
		{"a text block without text", msg(`[{"type":"text"}]`), "messages.0.content.0.text", "Field required"},
		{"an image", msg(`[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]`), "messages.0.content.0.type", "image content is not supported"},
		{"a document", msg(`[{"type":"document","source":{}}]`), "messages.0.content.0.type", "document content is not supported"},
		{"an unknown block", msg(`[{"type":"server_tool_use"}]`), "messages.0.content.0.type", `"server_tool_use" are not supported`},
		{"tool_use from the user", msg(`[{"type":"tool_use","id":"t","name":"f","input":{}}]`), "messages.0.content.0.type", "cannot be in a user message"},
		{"a last assistant message", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"The answer is"}]}`, "messages.1", "prefilled assistant turn is not supported"},
		{"tool_result from the assistant", turn(`[{"type":"tool_result","tool_use_id":"t"}]`, `"q"`), "messages.1.content.0.type", "cannot be in an assistant message"},
		{"tool_use without id", turn(`[{"type":"tool_use","name":"f","input":{}}]`, `"q"`), "messages.1.content.0.id", "Field required"},
		{"tool_use without name", turn(`[{"type":"tool_use","id":"t","input":{}}]`, `"q"`), "messages.1.content.0.name", "Field required"},
		{"tool_use without input", turn(`[{"type":"tool_use","id":"t","name":"f"}]`, `"q"`), "messages.1.content.0.input", "Field required"},
		{"tool_use input not an object", turn(`[{"type":"tool_use","id":"t","name":"f","input":[1]}]`, `"q"`), "messages.1.content.0.input", "must be an object"},
		{"two tool_use ids alike", turn(`[{"type":"tool_use","id":"t","name":"f","input":{}},{"type":"tool_use","id":"t","name":"f","input":{}}]`, `"q"`), "messages.1.content.1.id", "two tool_use blocks"},
		{"thinking without thinking", turn(`[{"type":"thinking","signature":"s"}]`, `"q"`), "messages.1.content.0.thinking", "Field required"},
		{"tool_result without id", turn(`[{"type":"tool_use","id":"t","name":"f","input":{}}]`, `[{"type":"tool_result"}]`), "messages.2.content.0.tool_use_id", "Field required"},
		{"tool_result of no call", turn(`[{"type":"tool_use","id":"t","name":"f","input":{}}]`, `[{"type":"tool_result","tool_use_id":"u","content":"x"}]`), "messages.2.content.0.tool_use_id", "answers no tool_use block"},
		{"tool_result after text", turn(`[{"type":"tool_use","id":"t","name":"f","input":{}}]`, `[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"t"}]`), "messages.2.content.1", "must come first"},
		{"tool_result with an image", turn(`[{"type":"tool_use","id":"t","name":"f","input":{}}]`, `[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]`), "messages.2.content.0.content.0.type", "image content is not supported"},
		{"tool_result content a number", turn(`[{"type":"tool_use","id":"t","name":"f","input":{}}]`, `[{"type":"tool_result","tool_use_id":"t","content":3}]`), "messages.2.content.0.content", "must be a string or an array of text blocks"},
		{"system a number", `{"model":"m","max_tokens":8,"system":1,"messages":[{"role":"user","content":"hi"}]}`, "system", "must be a string or an array of text blocks"},
		{"system with an image", `{"model":"m","max_tokens":8,"system":[{"type":"image"}],"messages":[{"role":"user","content":"hi"}]}`, "system.0.type", "only text blocks"},
		{"temperature above 1", `{"model":"m","max_tokens":8,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`, "temperature", "temperature must be between 0 and 1, got 1.5"},
		{"top_p above 1", `{"model":"m","max_tokens":8,"top_p":2,"messages":[{"role":"user","content":"hi"}]}`, "top_p", "top_p must be"},
		{"top_k negative", `{"model":"m","max_tokens":8,"top_k":-5,"messages":[{"role":"user","content":"hi"}]}`, "top_k", "top_k must be"},
		{"stop_sequences not strings", `{"model":"m","max_tokens":8,"stop_sequences":[1],"messages":[]}`, "stop_sequences", "invalid type for 'stop_sequences'"},
		{"a server tool", `{"model":"m","max_tokens":8,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`, "tools.0.type", "server tools"},
		{"a tool without schema", `{"model":"m","max_tokens":8,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"hi"}]}`, "tools.0.input_schema", "Field required"},
		{"a tool schema not an object", `{"model":"m","max_tokens":8,"tools":[{"name":"f","input_schema":"x"}],"messages":[{"role":"user","content":"hi"}]}`, "tools.0.input_schema", "must be a JSON schema object"},
		{"a tool schema of another type", `{"model":"m","max_tokens":8,"tools":[{"name":"f","input_schema":{"type":"string"}}],"messages":[{"role":"user","content":"hi"}]}`, "tools.0.input_schema.type", `must be "object"`},
		{"a tool without name", `{"model":"m","max_tokens":8,"tools":[{"input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`, "tools.0.name", "has no name"},
		{"a tool with a bad name", `{"model":"m","max_tokens":8,"tools":[{"name":"a b","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`, "tools.0.name", "must be 1 to 64"},
		{"two tools alike", `{"model":"m","max_tokens":8,"tools":[{"name":"f","input_schema":{"type":"object"}},{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}`, "tools.1.name", "two tools are named"},
		{"tool_choice without type", `{"model":"m","max_tokens":8,` + tools + `,"tool_choice":{},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice.type", "Field required"},
		{"tool_choice of an unknown type", `{"model":"m","max_tokens":8,` + tools + `,"tool_choice":{"type":"required"},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice.type", `must be "auto", "any", "tool" or "none"`},
		{"tool_choice tool without name", `{"model":"m","max_tokens":8,` + tools + `,"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice.name", "Field required"},
		{"tool_choice of an unknown tool", `{"model":"m","max_tokens":8,` + tools + `,"tool_choice":{"type":"tool","name":"g"}` + `,"messages":[{"role":"user","content":"hi"}]}`, "tool_choice", "not among the tools"},
		{"tool_choice without tools", `{"model":"m","max_tokens":8,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice", `"any" needs tools`},
		{"tool_choice a string", `{"model":"m","max_tokens":8,"tool_choice":"auto","messages":[]}`, "tool_choice", "invalid type for 'tool_choice'"},
		{"thinking without type", `{"model":"m","max_tokens":8,"thinking":{},"messages":[{"role":"user","content":"hi"}]}`, "thinking.type", "Field required"},
		{"thinking of an unknown type", `{"model":"m","max_tokens":8,"thinking":{"type":"on"},"messages":[{"role":"user","content":"hi"}]}`, "thinking.type", `must be "enabled"`},
		{"thinking without budget", `{"model":"m","max_tokens":8,"thinking":{"type":"enabled"},"messages":[{"role":"user","content":"hi"}]}`, "thinking.budget_tokens", "Field required"},
		{"thinking budget too small", `{"model":"m","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":100},"messages":[{"role":"user","content":"hi"}]}`, "thinking.budget_tokens", "at least 1024"},
		{"thinking budget over max_tokens", `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"hi"}]}`, "thinking.budget_tokens", "less than max_tokens (2000)"},
		{"an unknown effort", `{"model":"m","max_tokens":8,"output_config":{"effort":"extreme"},"messages":[{"role":"user","content":"hi"}]}`, "output_config.effort", `must be "low", "medium", "high", "xhigh" or "max"`},
		{"a context edit without type", `{"model":"m","max_tokens":8,"context_management":{"edits":[{}]},"messages":[{"role":"user","content":"hi"}]}`, "context_management.edits.0.type", "Field required"},
		{"an unknown context edit", `{"model":"m","max_tokens":8,"context_management":{"edits":[{"type":"clear_everything"}]},"messages":[{"role":"user","content":"hi"}]}`, "context_management.edits.0.type", `must be "clear_thinking_20251015" or "clear_tool_uses_20250919"`},
		{"a bad thinking keep", `{"model":"m","max_tokens":8,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":-1}}]},"messages":[{"role":"user","content":"hi"}]}`, "context_management.edits.0.keep", "must be \"all\" or"},
		{"output format of another type", `{"model":"m","max_tokens":8,"output_config":{"format":{"type":"json_object"}},"messages":[{"role":"user","content":"hi"}]}`, "output_config.format.type", `must be "json_schema"`},
		{"output format without schema", `{"model":"m","max_tokens":8,"output_config":{"format":{"type":"json_schema"}},"messages":[{"role":"user","content":"hi"}]}`, "output_config.format.schema", "must be a JSON object"},
		{"stream a string", `{"model":"m","max_tokens":8,"stream":"yes","messages":[]}`, "stream", "invalid type for 'stream'"},
	}
	var all strings.Builder
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("two cases named %q", c.name)
		}
		seen[c.name] = true
		parse := ParseMessages
		if strings.HasPrefix(c.name, "count_tokens") {
			parse = ParseCountTokens
		}
		_, err := parse([]byte(c.body))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if err.Status != 400 || err.Param != c.param || !strings.Contains(err.Message, c.want) {
			t.Errorf("%s: %d param %q %q; want 400 param %q saying %q", c.name, err.Status, err.Param, err.Message, c.param, c.want)
		}
		fmt.Fprintf(&all, "%s: %d %s\n", c.name, err.Status, AppendError(nil, err))
	}
	apitest.Golden(t, "parse_errors.golden", []byte(all.String()))
}

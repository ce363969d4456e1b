package responses

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

const weatherTool = `{"type":"function","name":"get_weather","description":"weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}`

func TestParse(t *testing.T) {
	t.Parallel()
	weather := engine.Tool{Name: "get_weather", Description: "weather now", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`), Strict: true}
	cases := []struct {
		name   string
		body   string
		stream bool
		want   engine.GenerateRequest
	}{
		{
			name: "a string",
			body: `{"model":"m","input":"hi"}`,
			want: engine.GenerateRequest{Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: engine.Sampling{Temperature: 1}, ParallelToolCalls: true},
		},
		{
			name: "instructions, roles and content parts; what changes nothing is accepted",
			body: `{"model":"m","instructions":"be brief","stream":true,"stream_options":{"include_obfuscation":false},"store":false,"previous_response_id":null,
				"input":[{"role":"developer","content":"dev"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
					{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"c","annotations":[]},{"type":"refusal","refusal":"d"}]},
					{"role":"system","content":""}],
				"temperature":0,"top_p":0.5,"max_output_tokens":7,"metadata":{"k":"v"},"user":"u1","truncation":"auto","include":["reasoning.encrypted_content"],
				"service_tier":"auto","prompt_cache_key":"p","safety_identifier":"s","max_tool_calls":3,"top_logprobs":0,"text":{"format":{"type":"text"},"verbosity":"low"},"unknown":{"x":[1]}}`,
			stream: true,
			want: engine.GenerateRequest{
				Messages: []engine.Message{{Role: "system", Content: "be brief"}, {Role: "system", Content: "dev"}, {Role: "user", Content: "ab"},
					{Role: "assistant", Content: "cd"}, {Role: "system"}},
				Sampling:          engine.Sampling{Temperature: 0, TopP: 0.5, MaxTokens: 7},
				ParallelToolCalls: true,
			},
		},
		{
			name: "a tool round trip: the items of a turn are one assistant message",
			body: `{"model":"m","input":[{"role":"user","content":"weather in Oslo and Lima?"},
					{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"look it up"}],"encrypted_content":"opaque"},
					{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Oslo\"}","status":"completed"},
					{"type":"function_call","call_id":"call_2","name":"get_weather","arguments":""},
					{"type":"function_call_output","call_id":"call_1","output":"-3C"},
					{"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"25C"}]},
					{"type":"reasoning","content":[{"type":"reasoning_text","text":"both known"}],"summary":[{"type":"summary_text","text":"ignored"}]},
					{"role":"assistant","content":"Oslo is cold."},
					{"type":"function_call","call_id":"call_3","name":"get_weather","arguments":"{}"}],
				"tools":[` + weatherTool + `,{"type":"function","name":"noargs","strict":false}],
				"tool_choice":{"type":"function","name":"get_weather"},"parallel_tool_calls":false}`,
			want: engine.GenerateRequest{
				Messages: []engine.Message{{Role: "user", Content: "weather in Oslo and Lima?"},
					{Role: "assistant", Reasoning: "look it up", ToolCalls: []engine.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}, {ID: "call_2", Name: "get_weather", Arguments: "{}"}}},
					{Role: "tool", ToolCallID: "call_1", Name: "get_weather", Content: "-3C"},
					{Role: "tool", ToolCallID: "call_2", Name: "get_weather", Content: "25C"},
					{Role: "assistant", Content: "Oslo is cold.", Reasoning: "both known", ToolCalls: []engine.ToolCall{{ID: "call_3", Name: "get_weather", Arguments: "{}"}}}},
				Tools:      []engine.Tool{weather, {Name: "noargs", Parameters: []byte(`{"type":"object","properties":{}}`)}},
				ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"},
				Sampling:   engine.Sampling{Temperature: 1},
			},
		},
		{
			name: "structured output and reasoning effort",
			body: `{"model":"m","input":"ok","text":{"format":{"type":"json_schema","name":"out","description":"d","schema":{"type":"object"},"strict":true}},
				"reasoning":{"effort":"none","summary":"auto"},"tools":[` + weatherTool + `],"tool_choice":"required"}`,
			want: engine.GenerateRequest{Messages: []engine.Message{{Role: "user", Content: "ok"}},
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "out", Schema: []byte(`{"type":"object"}`), Strict: true},
				TemplateVars:   map[string]any{"enable_thinking": false, "reasoning_effort": "low"}, Tools: []engine.Tool{weather},
				ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceRequired}, Sampling: engine.Sampling{Temperature: 1}, ParallelToolCalls: true},
		},
		{
			name: "json_object",
			body: `{"model":"m","input":"ok","text":{"format":{"type":"json_object"}},"reasoning":{"effort":"high"},"tools":[` + weatherTool + `],"tool_choice":"none"}`,
			want: engine.GenerateRequest{Messages: []engine.Message{{Role: "user", Content: "ok"}},
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONObject}, TemplateVars: map[string]any{"enable_thinking": true, "reasoning_effort": "high"},
				Tools: []engine.Tool{weather}, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceNone}, Sampling: engine.Sampling{Temperature: 1}, ParallelToolCalls: true},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse([]byte(c.body), Options{})
			if err != nil {
				t.Fatalf("Parse: %v (param %s)", err, err.Param)
			}
			if got.Model != "m" || got.Stream != c.stream || got.Echo == nil {
				t.Errorf("model %q stream %v echo %v", got.Model, got.Stream, got.Echo)
			}
			if !reflect.DeepEqual(got.Generate, c.want) {
				t.Errorf("got  %+v\nwant %+v", got.Generate, c.want)
			}
			n := 0
			for _, m := range got.Generate.Messages {
				n += len(m.Content) + len(m.Reasoning)
				for _, tc := range m.ToolCalls {
					n += len(tc.Name) + len(tc.Arguments)
				}
			}
			if got.PromptBytes != n || n == 0 {
				t.Errorf("prompt bytes %d, want %d", got.PromptBytes, n)
			}
		})
	}
}

// TestParseErrors: every bad input is a 400 naming the field as the client spelled it. The envelopes are in
// testdata/errors.golden, so their messages are reviewed with the code (-update rewrites it).
func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body, param string
		opts              Options
	}{
		{"empty body", ``, "", Options{}},
		{"not an object", `[1]`, "", Options{}},
		{"not JSON", `{"model":`, "", Options{}},
		{"not UTF-8", "{\"model\":\"m\",\"input\":\"\xff\"}", "input", Options{}},
		{"no model", `{"input":"hi"}`, "model", Options{}},
		{"model of the wrong type", `{"model":5,"input":"hi"}`, "model", Options{}},
		{"no input", `{"model":"m"}`, "input", Options{}},
		{"input null", `{"model":"m","input":null}`, "input", Options{}},
		{"input empty", `{"model":"m","input":[]}`, "input", Options{}},
		{"input a number", `{"model":"m","input":5}`, "input", Options{}},
		{"an item that is not an object", `{"model":"m","input":["hi"]}`, "input[0]", Options{}},
		{"an item with neither type nor role", `{"model":"m","input":[{"content":"hi"}]}`, "input[0].type", Options{}},
		{"an unknown item type", `{"model":"m","input":[{"type":"web_search_call","id":"ws_1"}]}`, "input[0].type", Options{}},
		{"an item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type", Options{}},
		{"a message without role", `{"model":"m","input":[{"type":"message","content":"hi"}]}`, "input[0].role", Options{}},
		{"a tool role", `{"model":"m","input":[{"role":"tool","content":"hi"}]}`, "input[0].role", Options{}},
		{"a user message without content", `{"model":"m","input":[{"role":"user"}]}`, "input[0].content", Options{}},
		{"content of the wrong type", `{"model":"m","input":[{"role":"user","content":5}]}`, "input[0].content", Options{}},
		{"a part without type", `{"model":"m","input":[{"role":"user","content":[{"text":"a"}]}]}`, "input[0].content[0].type", Options{}},
		{"a part without text", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text", Options{}},
		{"a text of the wrong type", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":1}]}]}`, "input[0].content[0].text", Options{}},
		{"a refusal without refusal", `{"model":"m","input":[{"role":"assistant","content":[{"type":"refusal"}]}]}`, "input[0].content[0].refusal", Options{}},
		{"an image", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"what is it?"},{"type":"input_image","image_url":"https://x/y.png"}]}]}`, "input[0].content[1].type", Options{}},
		{"a file", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file_1"}]}]}`, "input[0].content[0].type", Options{}},
		{"audio", `{"model":"m","input":[{"role":"user","content":[{"type":"input_audio"}]}]}`, "input[0].content[0].type", Options{}},
		{"an unknown part", `{"model":"m","input":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`, "input[0].content[0].type", Options{}},
		{"a function call without call_id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id", Options{}},
		{"a function call without name", `{"model":"m","input":[{"type":"function_call","call_id":"c","arguments":"{}"}]}`, "input[0].name", Options{}},
		{"arguments that are not JSON", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{"}]}`, "input[0].arguments", Options{}},
		{"arguments as an object", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":{}}]}`, "input[0].arguments", Options{}},
		{"an output without call_id", `{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", Options{}},
		{"an output of no call", `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f"},{"type":"function_call_output","call_id":"c2","output":"x"}]}`, "input[1].call_id", Options{}},
		{"an output without output", `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f"},{"type":"function_call_output","call_id":"c1"}]}`, "input[1].output", Options{}},
		{"an image output", `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f"},{"type":"function_call_output","call_id":"c1","output":[{"type":"input_image","image_url":"x"}]}]}`, "input[1].output[0].type", Options{}},
		{"reasoning content of the wrong type", `{"model":"m","input":[{"type":"reasoning","content":"x"}]}`, "input[0].content", Options{}},
		{"instructions of the wrong type", `{"model":"m","input":"hi","instructions":["a"]}`, "instructions", Options{}},
		{"store true", `{"model":"m","input":"hi","store":true}`, "store", Options{}},
		{"previous_response_id", `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id", Options{}},
		{"a conversation", `{"model":"m","input":"hi","conversation":"conv_1"}`, "conversation", Options{}},
		{"background", `{"model":"m","input":"hi","background":true}`, "background", Options{}},
		{"a prompt template", `{"model":"m","input":"hi","prompt":{"id":"pmpt_1"}}`, "prompt", Options{}},
		{"a hosted tool, refused by --hosted-tools=error", `{"model":"m","input":"hi","tools":[` + weatherTool + `,{"type":"web_search"}]}`, "tools[1].type", Options{HostedTools: HostedToolsError}},
		{"a custom tool of an unknown format", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"grep","format":{"type":"yaml"}}]}`, "tools[0].format.type", Options{}},
		{"a custom tool of an unknown grammar", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"grep","format":{"type":"grammar","syntax":"ebnf","definition":"x"}}]}`, "tools[0].format.syntax", Options{}},
		{"a custom tool's grammar without a definition", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"grep","format":{"type":"grammar","syntax":"lark"}}]}`, "tools[0].format.definition", Options{}},
		{"a custom tool without name", `{"model":"m","input":"hi","tools":[{"type":"custom"}]}`, "tools[0].name", Options{}},
		{"a namespace with a bad name", `{"model":"m","input":"hi","tools":[{"type":"namespace","name":"a.b","tools":[]}]}`, "tools[0].name", Options{}},
		{"a hosted tool in a namespace", `{"model":"m","input":"hi","tools":[{"type":"namespace","name":"ns","tools":[{"type":"web_search"}]}]}`, "tools[0].tools[0].type", Options{}},
		{"a namespace in a namespace", `{"model":"m","input":"hi","tools":[{"type":"namespace","name":"ns","tools":[{"type":"namespace","name":"inner"}]}]}`, "tools[0].tools[0].type", Options{}},
		{"a namespaced tool of the name of another", `{"model":"m","input":"hi","tools":[{"type":"function","name":"ns__f"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]}]}`, "tools[1].tools[0].name", Options{}},
		{"an additional_tools item with a bad tool", `{"model":"m","input":[{"type":"additional_tools","tools":[{"type":"shellfish"}]},{"role":"user","content":"hi"}]}`, "input[0].tools[0].type", Options{}},
		{"a custom tool call without input", `{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"exec"}]}`, "input[0].input", Options{}},
		{"a custom tool output of no call", `{"model":"m","input":[{"type":"custom_tool_call_output","call_id":"c","output":"x"}]}`, "input[0].call_id", Options{}},
		{"an unknown tool", `{"model":"m","input":"hi","tools":[{"type":"shellfish"}]}`, "tools[0].type", Options{}},
		{"a tool without type", `{"model":"m","input":"hi","tools":[{"name":"f"}]}`, "tools[0].type", Options{}},
		{"a tool without name", `{"model":"m","input":"hi","tools":[{"type":"function"}]}`, "tools[0].name", Options{}},
		{"a tool with a bad name", `{"model":"m","input":"hi","tools":[{"type":"function","name":"a b"}]}`, "tools[0].name", Options{}},
		{"two tools of one name", `{"model":"m","input":"hi","tools":[` + weatherTool + `,` + weatherTool + `]}`, "tools[1].name", Options{}},
		{"parameters that are no schema", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":[1]}]}`, "tools[0].parameters", Options{}},
		{"tools of the wrong type", `{"model":"m","input":"hi","tools":{"type":"function"}}`, "tools", Options{}},
		{"tool_choice without tools", `{"model":"m","input":"hi","tool_choice":"required"}`, "tool_choice", Options{}},
		{"tool_choice unknown", `{"model":"m","input":"hi","tools":[` + weatherTool + `],"tool_choice":"sometimes"}`, "tool_choice", Options{}},
		{"tool_choice function as a string", `{"model":"m","input":"hi","tools":[` + weatherTool + `],"tool_choice":"function"}`, "tool_choice", Options{}},
		{"tool_choice of no tool", `{"model":"m","input":"hi","tools":[` + weatherTool + `],"tool_choice":{"type":"function","name":"other"}}`, "tool_choice", Options{}},
		{"tool_choice without name", `{"model":"m","input":"hi","tools":[` + weatherTool + `],"tool_choice":{"type":"function"}}`, "tool_choice.name", Options{}},
		{"tool_choice without type", `{"model":"m","input":"hi","tools":[` + weatherTool + `],"tool_choice":{"name":"get_weather"}}`, "tool_choice.type", Options{}},
		{"tool_choice hosted", `{"model":"m","input":"hi","tools":[` + weatherTool + `],"tool_choice":{"type":"file_search"}}`, "tool_choice.type", Options{}},
		{"tool_choice allowed_tools", `{"model":"m","input":"hi","tools":[` + weatherTool + `],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, "tool_choice.type", Options{}},
		{"tool_choice a number", `{"model":"m","input":"hi","tool_choice":1}`, "tool_choice", Options{}},
		{"text.format unknown", `{"model":"m","input":"hi","text":{"format":{"type":"yaml"}}}`, "text.format.type", Options{}},
		{"text.format without type", `{"model":"m","input":"hi","text":{"format":{}}}`, "text.format.type", Options{}},
		{"text.format a string", `{"model":"m","input":"hi","text":{"format":"json"}}`, "text.format", Options{}},
		{"json_schema without name", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`, "text.format.name", Options{}},
		{"json_schema with a bad name", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"a b","schema":{"type":"object"}}}}`, "text.format.name", Options{}},
		{"json_schema without schema", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"a"}}}`, "text.format.schema", Options{}},
		{"json_schema strict of the wrong type", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"a","schema":{},"strict":"yes"}}}`, "text.format.strict", Options{}},
		{"verbosity unknown", `{"model":"m","input":"hi","text":{"verbosity":"loud"}}`, "text.verbosity", Options{}},
		{"temperature too high", `{"model":"m","input":"hi","temperature":3}`, "temperature", Options{}},
		{"top_p zero", `{"model":"m","input":"hi","top_p":0}`, "top_p", Options{}},
		{"max_output_tokens zero", `{"model":"m","input":"hi","max_output_tokens":0}`, "max_output_tokens", Options{}},
		{"max_output_tokens a string", `{"model":"m","input":"hi","max_output_tokens":"ten"}`, "max_output_tokens", Options{}},
		{"max_tool_calls zero", `{"model":"m","input":"hi","max_tool_calls":0}`, "max_tool_calls", Options{}},
		{"reasoning effort unknown", `{"model":"m","input":"hi","reasoning":{"effort":"extreme"}}`, "reasoning.effort", Options{}},
		{"reasoning summary unknown", `{"model":"m","input":"hi","reasoning":{"summary":"long"}}`, "reasoning.summary", Options{}},
		{"reasoning effort of the wrong type", `{"model":"m","input":"hi","reasoning":{"effort":1}}`, "reasoning.effort", Options{}},
		{"stream_options without stream", `{"model":"m","input":"hi","stream_options":{}}`, "stream_options", Options{}},
		{"stream of the wrong type", `{"model":"m","input":"hi","stream":"yes"}`, "stream", Options{}},
		{"top_logprobs", `{"model":"m","input":"hi","top_logprobs":2}`, "top_logprobs", Options{}},
		{"truncation unknown", `{"model":"m","input":"hi","truncation":"middle"}`, "truncation", Options{}},
		{"metadata of the wrong type", `{"model":"m","input":"hi","metadata":{"a":1}}`, "metadata", Options{}},
		{"too much metadata", `{"model":"m","input":"hi","metadata":{` + metadataPairs(17) + `}}`, "metadata", Options{}},
		{"a metadata key too long", `{"model":"m","input":"hi","metadata":{"` + string(bytes.Repeat([]byte("k"), 65)) + `":"v"}}`, "metadata", Options{}},
		{"a metadata value too long", `{"model":"m","input":"hi","metadata":{"k":"` + string(bytes.Repeat([]byte("v"), 513)) + `"}}`, "metadata", Options{}},
	}
	var golden bytes.Buffer
	for _, c := range cases {
		_, err := Parse([]byte(c.body), c.opts)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if err.Status != 400 || err.Param != c.param || err.Message == "" || err.Type != "invalid_request_error" {
			t.Errorf("%s: status %d param %q type %q (%s), want 400 param %q", c.name, err.Status, err.Param, err.Type, err.Message, c.param)
		}
		fmt.Fprintf(&golden, "%s\n%d %s\n\n", c.name, err.Status, err.AppendEnvelope(nil))
	}
	apitest.Golden(t, "errors.golden", golden.Bytes())
}

func metadataPairs(n int) string {
	var b bytes.Buffer
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":"v"`, i)
	}
	return b.String()
}

// TestStoreFalseAndAbsent: OpenAI's store defaults to true, but duet's to false: a client that leaves store
// out, or sends it false or null, is served.
func TestStoreFalseAndAbsent(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"model":"m","input":"hi"}`, `{"model":"m","input":"hi","store":false}`, `{"model":"m","input":"hi","store":null,"previous_response_id":""}`} {
		if _, err := Parse([]byte(body), Options{}); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

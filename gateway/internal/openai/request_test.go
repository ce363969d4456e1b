package openai_test

import (
	"reflect"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

func TestParseChat(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
		want openai.ChatRequest
	}{
		{
			name: "minimal",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			want: openai.ChatRequest{Model: "m", Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: engine.Sampling{Temperature: 1},
				ParallelToolCalls: true, N: 1},
		},
		{
			name: "everything",
			body: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":null},{"role":"developer","content":"dev"}],
				"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":7,"max_tokens":99,"temperature":0,"top_p":0.5,"n":1,"seed":42,
				"stop":["x","","y"],"logprobs":true,"top_logprobs":3,"presence_penalty":0.5,"frequency_penalty":-0.5,"user":"u1",
				"top_k":5,"min_p":0.1,"repetition_penalty":1.1,"ignore_eos":true,"unknown_field":{"nested":[1,2]},"response_format":{"type":"text"}}`,
			want: openai.ChatRequest{
				Model: "m",
				Messages: []engine.Message{
					{Role: "system", Content: "be brief"}, {Role: "user", Content: "ab"}, {Role: "assistant"}, {Role: "system", Content: "dev"},
				},
				Stream: true, IncludeUsage: true, ParallelToolCalls: true, N: 1,
				Sampling: engine.Sampling{
					MaxTokens: 7, Temperature: 0, TopP: 0.5, Seed: apitest.Ptr(int64(42)), Stop: []string{"x", "y"}, Logprobs: true, TopLogprobs: 3,
					PresencePenalty: 0.5, FrequencyPenalty: -0.5, TopK: 5, MinP: 0.1, RepetitionPenalty: 1.1, IgnoreEOS: true,
				},
			},
		},
		{
			name: "stop as a string and max_tokens",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"stop":"END","max_tokens":3,"stream":false}`,
			want: openai.ChatRequest{Model: "m", Messages: []engine.Message{{Role: "user", Content: "hi"}},
				Sampling: engine.Sampling{Temperature: 1, MaxTokens: 3, Stop: []string{"END"}}, ParallelToolCalls: true, N: 1},
		},
		{
			name: "tools, a tool round trip, structured output, n and logit_bias",
			body: `{"model":"m","messages":[{"role":"user","content":"weather?"},
				{"role":"assistant","content":null,"reasoning_content":"look it up","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
				{"role":"tool","tool_call_id":"call_1","content":"-3C"}],
				"tools":[{"type":"function","function":{"name":"get_weather","description":"weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},
					{"type":"function","function":{"name":"noargs"}}],
				"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,
				"response_format":{"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"},"strict":true}},
				"n":3,"logit_bias":{"50256":-100,"7":2.5},"chat_template_kwargs":{"enable_thinking":false}}`,
			want: openai.ChatRequest{Model: "m",
				Messages: []engine.Message{{Role: "user", Content: "weather?"},
					{Role: "assistant", Reasoning: "look it up", ToolCalls: []engine.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
					{Role: "tool", ToolCallID: "call_1", Content: "-3C"}},
				Tools: []engine.Tool{{Name: "get_weather", Description: "weather now", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`), Strict: true},
					{Name: "noargs", Parameters: []byte(`{"type":"object","properties":{}}`)}},
				ToolChoice:     engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"},
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: "out", Schema: []byte(`{"type":"object"}`), Strict: true},
				N:              3, TemplateVars: map[string]any{"enable_thinking": false},
				Sampling: engine.Sampling{Temperature: 1, LogitBias: map[int32]float64{50256: -100, 7: 2.5}}},
		},
		{
			name: "the deprecated functions API",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},{"role":"function","name":"f","content":"ok"}],
				"functions":[{"name":"f","parameters":{"type":"object"}}],"function_call":"auto","reasoning_effort":"none"}`,
			want: openai.ChatRequest{Model: "m",
				Messages: []engine.Message{{Role: "user", Content: "hi"}, {Role: "assistant", ToolCalls: []engine.ToolCall{{ID: "call_1", Name: "f", Arguments: "{}"}}},
					{Role: "tool", Name: "f", Content: "ok"}},
				Tools:      []engine.Tool{{Name: "f", Parameters: []byte(`{"type":"object"}`)}},
				ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceAuto}, ParallelToolCalls: true, N: 1,
				TemplateVars: map[string]any{"enable_thinking": false, "reasoning_effort": "low"}, Sampling: engine.Sampling{Temperature: 1}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := openai.ParseChat([]byte(c.body))
			if err != nil {
				t.Fatalf("ParseChat: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseChatErrors(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body, param string
	}{
		{"empty body", ``, ""},
		{"not an object", `[1,2]`, ""},
		{"bad json", `{"model":`, ""},
		{"no model", `{` + msgs + `}`, "model"},
		{"model not a string", `{"model":5,` + msgs + `}`, "model"},
		{"no messages", `{"model":"m"}`, "messages"},
		{"empty messages", `{"model":"m","messages":[]}`, "messages"},
		{"messages not an array", `{"model":"m","messages":"hi"}`, "messages"},
		{"missing role", `{"model":"m","messages":[{"content":"hi"}]}`, "messages[0].role"},
		{"bad role", `{"model":"m","messages":[{"role":"wizard","content":"hi"}]}`, "messages[0].role"},
		{"tool message without tool_call_id", `{"model":"m","messages":[{"role":"tool","content":"hi"}]}`, "messages[0].tool_call_id"},
		{"tool_calls on a user message", `{"model":"m","messages":[{"role":"user","content":"hi","tool_calls":[{"type":"function","function":{"name":"f"}}]}]}`, "messages[0].tool_calls"},
		{"tool call arguments not JSON", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{x"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{"content number", `{"model":"m","messages":[{"role":"user","content":5}]}`, "messages[0].content"},
		{"user content null", `{"model":"m","messages":[{"role":"user","content":null}]}`, "messages[0].content"},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[0].content[0].type"},
		{"part without text", `{"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text"},
		{"n=0", `{"model":"m",` + msgs + `,"n":0}`, "n"},
		{"n=129", `{"model":"m",` + msgs + `,"n":129}`, "n"},
		{"n not an integer", `{"model":"m",` + msgs + `,"n":"two"}`, "n"},
		{"max_tokens 0", `{"model":"m",` + msgs + `,"max_tokens":0}`, "max_tokens"},
		{"max_completion_tokens negative", `{"model":"m",` + msgs + `,"max_completion_tokens":-1}`, "max_completion_tokens"},
		{"max_tokens float", `{"model":"m",` + msgs + `,"max_tokens":1.5}`, "max_tokens"},
		// Past int32 and past uint32: once narrowed at the plugin boundary (2^32+4 answered with 4 tokens).
		{"max_tokens 2^31", `{"model":"m",` + msgs + `,"max_tokens":2147483648}`, "max_tokens"},
		{"max_tokens 2^32+4", `{"model":"m",` + msgs + `,"max_tokens":4294967300}`, "max_tokens"},
		{"max_completion_tokens 2^32+1", `{"model":"m",` + msgs + `,"max_completion_tokens":4294967297}`, "max_completion_tokens"},
		{"max_tokens past int64", `{"model":"m",` + msgs + `,"max_tokens":1e30}`, "max_tokens"},
		{"top_k 2^31", `{"model":"m",` + msgs + `,"top_k":2147483648}`, "top_k"},
		{"top_k 2^32+1", `{"model":"m",` + msgs + `,"top_k":4294967297}`, "top_k"},
		{"top_k -2", `{"model":"m",` + msgs + `,"top_k":-2}`, "top_k"},
		{"content not UTF-8", `{"model":"m","messages":[{"role":"user","content":"ok"},{"role":"user","content":"caf` + "\xe9" + `"}]}`, "messages[1].content"},
		{"content part not UTF-8", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + "\xff" + `"}]}]}`, "messages[0].content"},
		{"model not UTF-8", `{"model":"m` + "\xc3" + `","messages":[{"role":"user","content":"hi"}]}`, ""},
		{"temperature high", `{"model":"m",` + msgs + `,"temperature":2.5}`, "temperature"},
		{"temperature string", `{"model":"m",` + msgs + `,"temperature":"hot"}`, "temperature"},
		{"top_p zero", `{"model":"m",` + msgs + `,"top_p":0}`, "top_p"},
		{"stop number", `{"model":"m",` + msgs + `,"stop":5}`, "stop"},
		{"stop list of numbers", `{"model":"m",` + msgs + `,"stop":[1]}`, "stop"},
		{"five stops", `{"model":"m",` + msgs + `,"stop":["a","b","c","d","e"]}`, "stop"},
		{"top_logprobs without logprobs", `{"model":"m",` + msgs + `,"top_logprobs":2}`, "top_logprobs"},
		{"top_logprobs too many", `{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":21}`, "top_logprobs"},
		{"logprobs string", `{"model":"m",` + msgs + `,"logprobs":"yes"}`, "logprobs"},
		{"stream_options without stream", `{"model":"m",` + msgs + `,"stream_options":{"include_usage":true}}`, "stream_options"},
		{"stream string", `{"model":"m",` + msgs + `,"stream":"true"}`, "stream"},
		{"seed string", `{"model":"m",` + msgs + `,"seed":"1"}`, "seed"},
		{"presence_penalty", `{"model":"m",` + msgs + `,"presence_penalty":3}`, "presence_penalty"},
		{"tool without a function", `{"model":"m",` + msgs + `,"tools":[{"type":"function"}]}`, "tools[0].function.name"},
		{"tool of another type", `{"model":"m",` + msgs + `,"tools":[{"type":"retrieval"}]}`, "tools[0].type"},
		{"tool name with a space", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"get weather"}}]}`, "tools[0].function.name"},
		{"two tools of one name", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, "tools[1].function.name"},
		{"parameters not an object", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`, "tools[0].function.parameters"},
		{"tool_choice of no tool", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice"},
		{"tool_choice required without tools", `{"model":"m",` + msgs + `,"tool_choice":"required"}`, "tool_choice"},
		{"tool_choice unknown", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"always"}`, "tool_choice"},
		{"json_schema without schema", `{"model":"m",` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, "response_format.json_schema.schema"},
		{"json_schema without name", `{"model":"m",` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`, "response_format.json_schema.name"},
		{"response_format unknown", `{"model":"m",` + msgs + `,"response_format":{"type":"yaml"}}`, "response_format.type"},
		{"logit_bias too strong", `{"model":"m",` + msgs + `,"logit_bias":{"5":101}}`, "logit_bias"},
		{"logit_bias key", `{"model":"m",` + msgs + `,"logit_bias":{"five":1}}`, "logit_bias"},
		{"reasoning_effort", `{"model":"m",` + msgs + `,"reasoning_effort":"max"}`, "reasoning_effort"},
		{"user number", `{"model":"m",` + msgs + `,"user":7}`, "user"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := openai.ParseChat([]byte(c.body))
			if err == nil {
				t.Fatalf("no error for %s", c.body)
			}
			if err.Status != 400 || err.Type != apicore.TypeInvalidRequest {
				t.Errorf("status %d type %q, want 400 invalid_request_error", err.Status, err.Type)
			}
			if err.Param != c.param {
				t.Errorf("param %q, want %q (message: %s)", err.Param, c.param, err.Message)
			}
			if err.Message == "" {
				t.Errorf("empty message")
			}
		})
	}
}

func TestParseCompletion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		body    string
		want    openai.CompletionRequest
		wantErr string // param
	}{
		{name: "string prompt", body: `{"model":"m","prompt":"once"}`,
			want: openai.CompletionRequest{Model: "m", Prompt: "once", Sampling: engine.Sampling{MaxTokens: 16, Temperature: 1}}},
		{name: "one string in a list", body: `{"model":"m","prompt":["once"],"max_tokens":5}`,
			want: openai.CompletionRequest{Model: "m", Prompt: "once", Sampling: engine.Sampling{MaxTokens: 5, Temperature: 1}}},
		{name: "token ids", body: `{"model":"m","prompt":[1,2,3],"logprobs":2,"temperature":0}`,
			want: openai.CompletionRequest{Model: "m", PromptTokens: []int32{1, 2, 3}, Logprobs: apitest.Ptr(2),
				Sampling: engine.Sampling{MaxTokens: 16, Logprobs: true, TopLogprobs: 2}}},
		{name: "token ids nested", body: `{"model":"m","prompt":[[4,5]]}`,
			want: openai.CompletionRequest{Model: "m", PromptTokens: []int32{4, 5}, Sampling: engine.Sampling{MaxTokens: 16, Temperature: 1}}},
		{name: "no prompt", body: `{"model":"m"}`, wantErr: "prompt"},
		{name: "batched prompts", body: `{"model":"m","prompt":["a","b"]}`, wantErr: "prompt"},
		{name: "negative token", body: `{"model":"m","prompt":[1,-2]}`, wantErr: "prompt"},
		{name: "float token", body: `{"model":"m","prompt":[1.5]}`, wantErr: "prompt"},
		{name: "object prompt", body: `{"model":"m","prompt":{}}`, wantErr: "prompt"},
		{name: "empty list", body: `{"model":"m","prompt":[]}`, wantErr: "prompt"},
		{name: "logprobs 6", body: `{"model":"m","prompt":"x","logprobs":6}`, wantErr: "logprobs"},
		{name: "best_of", body: `{"model":"m","prompt":"x","best_of":3}`, wantErr: "best_of"},
		{name: "echo", body: `{"model":"m","prompt":"x","echo":true}`, wantErr: "echo"},
		{name: "suffix", body: `{"model":"m","prompt":"x","suffix":"y"}`, wantErr: "suffix"},
		{name: "prompt not UTF-8", body: `{"model":"m","prompt":"` + "\xed\xa0\x80" + `"}`, wantErr: "prompt"},
		{name: "max_tokens 2^32+4", body: `{"model":"m","prompt":"x","max_tokens":4294967300}`, wantErr: "max_tokens"},
		{name: "token id 2^32+1", body: `{"model":"m","prompt":[4294967297]}`, wantErr: "prompt"},
		{name: "top_k -1 is off", body: `{"model":"m","prompt":"x","top_k":-1}`,
			want: openai.CompletionRequest{Model: "m", Prompt: "x", Sampling: engine.Sampling{MaxTokens: 16, Temperature: 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := openai.ParseCompletion([]byte(c.body))
			if c.wantErr != "" {
				if err == nil || err.Param != c.wantErr {
					t.Fatalf("got error %v, want one about %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCompletion: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestReasoningEffortVars: reasoning_effort reaches the template as enable_thinking and as the level harmony
// templates (gpt-oss) write; what the client set in chat_template_kwargs wins.
func TestReasoningEffortVars(t *testing.T) {
	t.Parallel()
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		body string
		want map[string]any
	}{
		{`{"model":"m",` + msgs + `,"reasoning_effort":"high"}`, map[string]any{"enable_thinking": true, "reasoning_effort": "high"}},
		{`{"model":"m",` + msgs + `,"reasoning_effort":"medium"}`, map[string]any{"enable_thinking": true, "reasoning_effort": "medium"}},
		{`{"model":"m",` + msgs + `,"reasoning_effort":"minimal"}`, map[string]any{"enable_thinking": true, "reasoning_effort": "low"}},
		{`{"model":"m",` + msgs + `,"reasoning_effort":"none"}`, map[string]any{"enable_thinking": false, "reasoning_effort": "low"}},
		{`{"model":"m",` + msgs + `,"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":"high"}}`,
			map[string]any{"enable_thinking": true, "reasoning_effort": "high"}},
		{`{"model":"m",` + msgs + `}`, nil},
	}
	for _, c := range cases {
		got, err := openai.ParseChat([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if !reflect.DeepEqual(got.TemplateVars, c.want) {
			t.Errorf("%s: template vars %v, want %v", c.body, got.TemplateVars, c.want)
		}
	}
}

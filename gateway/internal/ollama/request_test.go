package ollama

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"testing"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

// warm is the sampling of a body that sets none: Ollama's default temperature.
var warm = engine.Sampling{Temperature: 0.8}

func TestParseChat(t *testing.T) {
	t.Parallel()
	weather := engine.Tool{Name: "get_weather", Description: "The weather in a city",
		Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}
	cases := []struct {
		name string
		body string
		want Request
	}{
		{
			name: "minimal: streams by default",
			body: `{"model":"echo","messages":[{"role":"user","content":"hi"}]}`,
			want: Request{Model: "echo", Stream: true, Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: warm},
		},
		{
			name: "not streamed, roles in any case, null content",
			body: `{"model":"echo:latest","stream":false,"messages":[{"role":"SYSTEM","content":"be brief"},{"role":"User","content":"hi"},{"role":"assistant","content":null}]}`,
			want: Request{Model: "echo:latest", Messages: []engine.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}, {Role: "assistant"}},
				Sampling: warm},
		},
		{
			name: "every option duet honours, and some it ignores",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"keep_alive":"5m","truncate":true,"shift":false,
				"options":{"num_predict":64,"temperature":0,"top_k":40,"top_p":0.9,"min_p":0.05,"seed":42,"stop":["\n\n","","END"],
				"repeat_penalty":1.1,"presence_penalty":0.5,"frequency_penalty":-0.5,"num_ctx":4096,
				"num_keep":4,"typical_p":1,"mirostat":0,"num_gpu":-1,"use_mmap":true,"low_vram":false,"made_up":{"x":1}}}`,
			want: Request{Model: "m", Stream: true, Messages: []engine.Message{{Role: "user", Content: "hi"}}, NumCtx: 4096,
				Sampling: engine.Sampling{MaxTokens: 64, Temperature: 0, TopK: 40, TopP: 0.9, MinP: 0.05, Seed: apitest.Ptr(int64(42)),
					Stop: []string{"\n\n", "END"}, RepetitionPenalty: 1.1, PresencePenalty: 0.5, FrequencyPenalty: -0.5}},
		},
		{
			name: "no limit, a random seed, integers written as floats, a single stop string, null options",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":-1,"seed":-1,"top_k":20.0,"stop":"END","temperature":null}}`,
			want: Request{Model: "m", Stream: true, Messages: []engine.Message{{Role: "user", Content: "hi"}},
				Sampling: engine.Sampling{Temperature: 0.8, TopK: 20, Stop: []string{"END"}}},
		},
		{
			name: "num_predict -2 fills the context",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":-2}}`,
			want: Request{Model: "m", Stream: true, Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: warm},
		},
		{
			name: "a tool round trip: calls without ids, results named by tool",
			body: `{"model":"m","tools":[{"type":"function","function":{"name":"get_weather","description":"The weather in a city",
					"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],
				"messages":[{"role":"user","content":"weather in Oslo and Lima?"},
					{"role":"assistant","content":"","thinking":"two cities","tool_calls":[
						{"function":{"name":"get_weather","arguments":{"city":"Oslo"}}},
						{"function":{"index":1,"name":"get_weather","arguments":{ "city" : "Lima" }}}]},
					{"role":"tool","tool_name":"get_weather","content":"-3C"},
					{"role":"tool","content":"25C"}]}`,
			want: Request{Model: "m", Stream: true, Sampling: warm, Tools: []engine.Tool{weather}, ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceAuto},
				Messages: []engine.Message{
					{Role: "user", Content: "weather in Oslo and Lima?"},
					{Role: "assistant", Reasoning: "two cities", ToolCalls: []engine.ToolCall{
						{ID: "call_1_0", Name: "get_weather", Arguments: `{"city":"Oslo"}`}, {ID: "call_1_1", Name: "get_weather", Arguments: `{"city":"Lima"}`}}},
					{Role: "tool", Name: "get_weather", ToolCallID: "call_1_0", Content: "-3C"},
					{Role: "tool", Name: "get_weather", ToolCallID: "call_1_1", Content: "25C"},
				}},
		},
		{
			name: "calls with ids, OpenAI-style string arguments, a result by id, a tool without parameters",
			body: `{"model":"m","tools":[{"function":{"name":"now"}}],
				"messages":[{"role":"assistant","tool_calls":[{"id":"c9","function":{"name":"now","arguments":"{}"}},{"id":"c10","function":{"name":"now"}}]},
					{"role":"tool","tool_call_id":"c10","content":"noon"}]}`,
			want: Request{Model: "m", Stream: true, Sampling: warm,
				Tools:      []engine.Tool{{Name: "now", Parameters: []byte(`{"type":"object","properties":{}}`)}},
				ToolChoice: engine.ToolChoice{Mode: engine.ToolChoiceAuto},
				Messages: []engine.Message{
					{Role: "assistant", ToolCalls: []engine.ToolCall{{ID: "c9", Name: "now", Arguments: "{}"}, {ID: "c10", Name: "now", Arguments: "{}"}}},
					{Role: "tool", Name: "now", ToolCallID: "c10", Content: "noon"},
				}},
		},
		{
			name: "format json, thinking on",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"format":"json","think":true}`,
			want: Request{Model: "m", Stream: true, Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: warm,
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONObject}, TemplateVars: map[string]any{"enable_thinking": true}},
		},
		{
			name: "a schema format, a thinking level, logprobs",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"format":{"type":"object","properties":{"a":{"type":"string"}}},"think":"high","logprobs":true,"top_logprobs":3}`,
			want: Request{Model: "m", Stream: true, Messages: []engine.Message{{Role: "user", Content: "hi"}},
				Sampling:       engine.Sampling{Temperature: 0.8, Logprobs: true, TopLogprobs: 3},
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`), Strict: true},
				TemplateVars:   map[string]any{"enable_thinking": true}},
		},
		{
			name: "thinking off, empty format, images empty",
			body: `{"model":"m","messages":[{"role":"user","content":"hi","images":[]}],"format":"","think":false,"top_logprobs":5}`,
			want: Request{Model: "m", Stream: true, Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: warm,
				TemplateVars: map[string]any{"enable_thinking": false}},
		},
		{
			name: "no messages: load the model",
			body: `{"model":"m"}`,
			want: Request{Model: "m", Stream: true, Load: "load", Sampling: warm},
		},
		{
			name: "no messages and keep_alive 0: unload it",
			body: `{"model":"m","messages":[],"keep_alive":0}`,
			want: Request{Model: "m", Stream: true, Load: "unload", Sampling: warm},
		},
		{
			name: "keep_alive 0 with messages: generate, as Ollama does",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"keep_alive":"0s"}`,
			want: Request{Model: "m", Stream: true, Messages: []engine.Message{{Role: "user", Content: "hi"}}, Sampling: warm},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseChat([]byte(c.body))
			if err != nil {
				t.Fatalf("unexpected error %d %q", err.Status, err.Message)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

func TestParseGenerate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
		want Request
	}{
		{
			name: "a prompt becomes a chat",
			body: `{"model":"m","prompt":"Why is the sky blue?"}`,
			want: Request{Model: "m", Stream: true, Messages: []engine.Message{{Role: "user", Content: "Why is the sky blue?"}}, Sampling: warm},
		},
		{
			name: "with a system prompt, not streamed",
			body: `{"model":"m","prompt":"hi","system":"be brief","stream":false,"options":{"num_predict":5}}`,
			want: Request{Model: "m", Messages: []engine.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}},
				Sampling: engine.Sampling{Temperature: 0.8, MaxTokens: 5}},
		},
		{
			name: "raw: the prompt as it is",
			body: `{"model":"m","prompt":"<s>[INST] hi [/INST]","raw":true,"format":"json","think":"low","context":[],"suffix":"","template":""}`,
			want: Request{Model: "m", Stream: true, Prompt: "<s>[INST] hi [/INST]", Sampling: warm,
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONObject}, TemplateVars: map[string]any{"enable_thinking": true}},
		},
		{
			name: "no prompt: load",
			body: `{"model":"m","prompt":""}`,
			want: Request{Model: "m", Stream: true, Load: "load", Sampling: warm},
		},
		{
			name: "no prompt, keep_alive 0: unload",
			body: `{"model":"m","keep_alive":"0"}`,
			want: Request{Model: "m", Stream: true, Load: "unload", Sampling: warm},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseGenerate([]byte(c.body))
			if err != nil {
				t.Fatalf("unexpected error %d %q", err.Status, err.Message)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

func TestParseShow(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{`{"model":"echo"}`: "echo", `{"name":"echo:latest"}`: "echo:latest", `{"model":"a","name":"b"}`: "a"} {
		if got, err := ParseShow([]byte(body)); err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", body, got, err, want)
		}
	}
}

// errorCase is a bad input and the status it gets; its body is in testdata/errors.json.
type errorCase struct {
	name   string
	parse  func([]byte) (Request, *apicore.Error)
	body   string
	status int
}

func show(body []byte) (Request, *apicore.Error) {
	_, err := ParseShow(body)
	return Request{}, err
}

func errorCases() []errorCase {
	msg := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	gen := func(extra string) string { return `{"model":"m","prompt":"hi"` + extra + `}` }
	return []errorCase{
		{"chat/empty body", ParseChat, ``, 400},
		{"chat/not an object", ParseChat, `[1,2]`, 400},
		{"chat/not JSON", ParseChat, `{"model":`, 400},
		{"chat/not UTF-8", ParseChat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", 400},
		{"chat/no model", ParseChat, `{"messages":[{"role":"user","content":"hi"}]}`, 400},
		{"chat/model not a string", ParseChat, `{"model":7}`, 400},
		{"chat/stream not a boolean", ParseChat, msg(`,"stream":"yes"`), 400},
		{"chat/messages not an array", ParseChat, `{"model":"m","messages":"hi"}`, 400},
		{"chat/message without role", ParseChat, `{"model":"m","messages":[{"content":"hi"}]}`, 400},
		{"chat/unknown role", ParseChat, `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, 400},
		{"chat/content parts", ParseChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, 400},
		{"chat/images", ParseChat, `{"model":"m","messages":[{"role":"user","content":"what is this?","images":["iVBORw0KGgo="]}]}`, 400},
		{"chat/tool calls on a user message", ParseChat, `{"model":"m","messages":[{"role":"user","content":"hi","tool_calls":[{"function":{"name":"f"}}]}]}`, 400},
		{"chat/tool call without a name", ParseChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":{}}}]}]}`, 400},
		{"chat/tool call arguments not an object", ParseChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]}`, 400},
		{"chat/tool of another type", ParseChat, msg(`,"tools":[{"type":"retrieval","function":{"name":"f"}}]`), 400},
		{"chat/tool without a function", ParseChat, msg(`,"tools":[{"type":"function"}]`), 400},
		{"chat/tool with a bad name", ParseChat, msg(`,"tools":[{"type":"function","function":{"name":"get weather"}}]`), 400},
		{"chat/tool parameters not a schema", ParseChat, msg(`,"tools":[{"type":"function","function":{"name":"f","parameters":"none"}}]`), 400},
		{"chat/two tools of one name", ParseChat, msg(`,"tools":[{"function":{"name":"f"}},{"function":{"name":"f"}}]`), 400},
		{"chat/format of another kind", ParseChat, msg(`,"format":"yaml"`), 400},
		{"chat/format a number", ParseChat, msg(`,"format":3`), 400},
		{"chat/think at another level", ParseChat, msg(`,"think":"extreme"`), 400},
		{"chat/think a number", ParseChat, msg(`,"think":1`), 400},
		{"chat/keep_alive not a duration", ParseChat, msg(`,"keep_alive":"forever"`), 400},
		{"chat/keep_alive a boolean", ParseChat, msg(`,"keep_alive":true`), 400},
		{"chat/top_logprobs too many", ParseChat, msg(`,"logprobs":true,"top_logprobs":21`), 400},
		{"chat/options not an object", ParseChat, msg(`,"options":[1]`), 400},
		{"options/temperature not a number", ParseChat, msg(`,"options":{"temperature":"hot"}`), 400},
		{"options/temperature too high", ParseChat, msg(`,"options":{"temperature":3}`), 400},
		{"options/top_p zero", ParseChat, msg(`,"options":{"top_p":0}`), 400},
		{"options/top_k negative", ParseChat, msg(`,"options":{"top_k":-5}`), 400},
		{"options/top_k not an integer", ParseChat, msg(`,"options":{"top_k":2.5}`), 400},
		{"options/min_p above one", ParseChat, msg(`,"options":{"min_p":1.5}`), 400},
		{"options/repeat_penalty zero", ParseChat, msg(`,"options":{"repeat_penalty":0}`), 400},
		{"options/presence_penalty out of range", ParseChat, msg(`,"options":{"presence_penalty":2.5}`), 400},
		{"options/frequency_penalty out of range", ParseChat, msg(`,"options":{"frequency_penalty":-3}`), 400},
		{"options/num_predict too large", ParseChat, msg(`,"options":{"num_predict":1e12}`), 400},
		{"options/num_ctx negative", ParseChat, msg(`,"options":{"num_ctx":-1}`), 400},
		{"options/num_ctx not a number", ParseChat, msg(`,"options":{"num_ctx":"big"}`), 400},
		{"options/seed not an integer", ParseChat, msg(`,"options":{"seed":"lucky"}`), 400},
		{"options/stop not strings", ParseChat, msg(`,"options":{"stop":[1,2]}`), 400},
		{"generate/no model", ParseGenerate, `{"prompt":"hi"}`, 400},
		{"generate/prompt not a string", ParseGenerate, `{"model":"m","prompt":["hi"]}`, 400},
		{"generate/suffix", ParseGenerate, gen(`,"suffix":"return x"`), 400},
		{"generate/template", ParseGenerate, gen(`,"template":"{{ .Prompt }}"`), 400},
		{"generate/context", ParseGenerate, gen(`,"context":[1,2,3]`), 400},
		{"generate/images", ParseGenerate, gen(`,"images":["iVBORw0KGgo="]`), 400},
		{"generate/raw with a system prompt", ParseGenerate, gen(`,"raw":true,"system":"be brief"`), 400},
		{"generate/schema not an object", ParseGenerate, gen(`,"format":{"type":"object"`), 400},
		{"show/empty body", show, ``, 400},
		{"show/no model", show, `{}`, 400},
		{"show/model not a string", show, `{"model":["m"]}`, 400},
		{"model not found", func([]byte) (Request, *apicore.Error) { return Request{}, ModelNotFound("llama3:8b") }, ``, 404},
	}
}

// TestParseErrors: every bad input is a client error (never a 500) with a message that says what is wrong,
// rendered as Ollama renders errors. The bodies are in testdata/errors.json (-update rewrites it).
func TestParseErrors(t *testing.T) {
	t.Parallel()
	type rendered struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	}
	got := map[string]rendered{}
	for _, c := range errorCases() {
		_, err := c.parse([]byte(c.body))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if err.Status != c.status || err.Message == "" {
			t.Errorf("%s: status %d, message %q; want %d", c.name, err.Status, err.Message, c.status)
		}
		if _, dup := got[c.name]; dup {
			t.Fatalf("two cases named %q", c.name)
		}
		got[c.name] = rendered{Status: err.Status, Body: AppendError(nil, err.Message)}
	}
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, n := range names {
		key, _ := json.Marshal(n)
		val, _ := json.Marshal(got[n])
		b.Write(key)
		b.WriteString(": ")
		b.Write(val)
		if i < len(names)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	apitest.Golden(t, "errors.json", b.Bytes())
}

// TestBadBodiesRenderAsJSON: every error body is one valid JSON object with a string "error", as Ollama's
// clients read it (the npm client throws its message; the Go client decodes it into StatusError).
func TestBadBodiesRenderAsJSON(t *testing.T) {
	t.Parallel()
	for _, c := range errorCases() {
		_, err := c.parse([]byte(c.body))
		if err == nil {
			continue
		}
		var out struct {
			Error *string `json:"error"`
		}
		body := AppendError(nil, err.Message)
		if json.Unmarshal(body, &out) != nil || out.Error == nil || *out.Error != err.Message || err.Status < 400 || err.Status >= http.StatusInternalServerError {
			t.Errorf("%s: %d %s", c.name, err.Status, body)
		}
	}
}

package mlxengine

import (
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/toolcall"
	"github.com/duet-ai/duet/sdk/engine"
)

func TestTemplateInput(t *testing.T) {
	msgs := []engine.Message{
		{Role: "user", Content: "weather?", Name: "ann"},
		{Role: "assistant", Reasoning: "look it up", ToolCalls: []engine.ToolCall{
			{ID: "c1", Name: "get_weather", Arguments: ` {"city": "Paris"}`},
			{ID: "c2", Name: "raw", Arguments: `not json`},
		}},
		{Role: "tool", Content: "18C", ToolCallID: "c1"},
	}
	tools := []engine.Tool{{Name: "get_weather", Description: "Weather now", Parameters: []byte(`{"type":"object"}`)}, {Name: "bare"}}
	in, err := templateInput(msgs, tools, map[string]any{"enable_thinking": false}, toolcall.Format{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"name":"ann"}`,
		`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}},` +
			`{"id":"c2","type":"function","function":{"name":"raw","arguments":"not json"}}],"reasoning_content":"look it up"}`,
		`{"tool_call_id":"c1"}`,
	}
	for i, w := range want {
		if got := string(in.Messages[i].Extra); got != w {
			t.Errorf("message %d extra\n got %s\nwant %s", i, got, w)
		}
	}
	if got, w := string(in.Tools), `[{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object"}}},{"type":"function","function":{"name":"bare"}}]`; got != w {
		t.Errorf("tools\n got %s\nwant %s", got, w)
	}
	if in.Vars["enable_thinking"] != false {
		t.Errorf("vars %v", in.Vars)
	}
	// Harmony templates (gpt-oss) read the reasoning of earlier turns as "thinking".
	in, err = templateInput(msgs, tools, nil, toolcall.Format{Calls: toolcall.CallsHarmony, Reasoning: toolcall.ReasoningHarmony})
	if err != nil {
		t.Fatal(err)
	}
	w := `{"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}},` +
		`{"id":"c2","type":"function","function":{"name":"raw","arguments":"not json"}}],"thinking":"look it up"}`
	if got := string(in.Messages[1].Extra); got != w {
		t.Errorf("harmony: message 1 extra\n got %s\nwant %s", got, w)
	}
}

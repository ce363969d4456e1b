package mlxengine

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/toolcall"
	"github.com/duet-ai/duet/sdk/engine"
)

func TestParsedOutput(t *testing.T) {
	tools := []toolcall.Tool{{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}
	cases := []struct {
		name, text      string
		content, reason string
		calls           []string
		err             string
		streamedIndexes []int
	}{
		{name: "content and a call", text: "<think>hmm</think>Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
			content: "Sure.", reason: "hmm", calls: []string{`get_weather {"city":"Oslo"}`}, streamedIndexes: []int{0}},
		{name: "an unknown tool before a good one", text: "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
			calls: []string{`get_weather {"city":"Rome"}`}, err: `"nope"`, streamedIndexes: []int{0}},
		{name: "cut off", text: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci",
			calls: []string{`get_weather {"ci`}, streamedIndexes: []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := toolcall.NewParser(toolcall.Format{Calls: toolcall.CallsHermes, Reasoning: toolcall.ReasoningThink}, toolcall.Options{Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			o := &parsedOutput{p: p, log: slog.New(slog.DiscardHandler)}
			var content, reasoning strings.Builder
			var indexes []int
			for _, r := range c.text { // a rune at a time, as tokens would come
				d := o.Add(string(r))
				content.WriteString(d.Content)
				reasoning.WriteString(d.Reasoning)
				for _, tc := range d.ToolCalls {
					if tc.ID != "" {
						indexes = append(indexes, tc.Index)
					}
				}
			}
			d, calls, err := o.Flush()
			content.WriteString(d.Content)
			reasoning.WriteString(d.Reasoning)
			if content.String() != c.content || reasoning.String() != c.reason {
				t.Errorf("content %q reasoning %q, want %q %q", content.String(), reasoning.String(), c.content, c.reason)
			}
			var got []string
			for _, call := range calls {
				got = append(got, call.Name+" "+call.Arguments)
			}
			if strings.Join(got, "|") != strings.Join(c.calls, "|") || len(indexes) != len(c.streamedIndexes) {
				t.Errorf("calls %q (streamed as %v), want %q (%v)", got, indexes, c.calls, c.streamedIndexes)
			}
			for i, x := range indexes {
				if x != c.streamedIndexes[i] {
					t.Errorf("streamed indexes %v, want %v", indexes, c.streamedIndexes)
				}
			}
			switch {
			case c.err == "" && err != nil:
				t.Errorf("error %v", err)
			case c.err != "" && (engine.CodeOf(err) != engine.CodeInvalidOutput || !strings.Contains(err.Error(), c.err)):
				t.Errorf("error %v, want an invalid_output error mentioning %s", err, c.err)
			}
		})
	}
}

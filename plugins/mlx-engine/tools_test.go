package mlxengine_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/plugins/mlx-engine/model"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/engine"
)

// loadFamily loads a tiny generated model of a family.
func loadFamily(t *testing.T, fam model.Family) (*mlxengine.Engine, engine.Description) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), string(fam))
	o := modelgen.Tiny()
	o.Family = fam
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	d, err := e.Load(context.Background(), engine.LoadRequest{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	return e, d
}

var weather = engine.Tool{Name: "get_weather", Description: "The weather in a city",
	Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}

// TestToolPrompts: the generated models' templates offer tools as their families do (Llama 3.1's JSON, Hermes'
// <tool_call>), render an assistant's calls and the tool's answer, and the engine says it can parse calls.
func TestToolPrompts(t *testing.T) {
	conversation := []engine.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []engine.ToolCall{{ID: "c1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
		{Role: "tool", ToolCallID: "c1", Content: "18C"},
	}
	cases := []struct {
		fam  model.Family
		want []string
	}{
		{model.Llama, []string{
			"<|start_header_id|>system<|end_header_id|>\n\nBe brief.\n\nYou can call functions.",
			`The functions:` + "\n" + `{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}<|eot_id|>`,
			`<|start_header_id|>assistant<|end_header_id|>` + "\n\n" + `{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>`,
			`<|start_header_id|>ipython<|end_header_id|>` + "\n\n18C<|eot_id|>",
		}},
		{model.Qwen3, []string{
			"<|im_start|>system\nBe brief.\n\n# Tools",
			"<tools>\n" + `{"type": "function", "function": {"name": "get_weather"`,
			"<|im_start|>assistant\n\n<tool_call>\n" + `{"name": "get_weather", "arguments": {"city": "Paris"}}` + "\n</tool_call><|im_end|>",
			"<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>",
		}},
	}
	for _, c := range cases {
		t.Run(string(c.fam), func(t *testing.T) {
			e, d := loadFamily(t, c.fam)
			if !d.Capabilities.Tools {
				t.Errorf("capabilities %+v: the template offers tools", d.Capabilities)
			}
			res, err := e.Tokenize(context.Background(), engine.TokenizeRequest{InstanceID: d.InstanceID, Messages: conversation,
				Tools: []engine.Tool{weather}, AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(res.Text, w) {
					t.Errorf("rendered prompt lacks %q:\n%s", w, res.Text)
				}
			}
			if strings.Count(res.Text, "Be brief.") != 1 {
				t.Errorf("the system message is written %d times", strings.Count(res.Text, "Be brief."))
			}
			plain, err := e.Tokenize(context.Background(), engine.TokenizeRequest{InstanceID: d.InstanceID, Messages: conversation[:2], AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(plain.Text, "function") {
				t.Errorf("without tools the prompt mentions functions:\n%s", plain.Text)
			}
		})
	}
}

package mlxengine_test

import (
	"context"
	"encoding/json"
	"os"
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

// TestForcedToolCalls: in each family's syntax, a forced call (a named function, or required with parallel
// calls) comes out of a tiny random model as real tool calls: the grammar writes the family's markers, the
// parser reads them back, streamed deltas add up to the final calls, and the arguments match the schema.
func TestForcedToolCalls(t *testing.T) {
	tools := []engine.Tool{
		{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false}`)},
		{Name: "get_time", Parameters: []byte(`{"type":"object","properties":{"zone":{"type":"string","maxLength":8}},"required":["zone"],"additionalProperties":false}`)},
	}
	for _, fam := range []model.Family{model.Llama, model.Qwen3} {
		t.Run(string(fam), func(t *testing.T) {
			e, d := loadFamily(t, fam)
			for _, choice := range []engine.ToolChoice{{Mode: engine.ToolChoiceFunction, Name: "get_weather"}, {Mode: engine.ToolChoiceRequired}} {
				for seed := range int64(4) {
					s := seed
					req := engine.GenerateRequest{InstanceID: d.InstanceID, Messages: []engine.Message{{Role: "user", Content: "Weather in Oslo?"}},
						Tools: tools, ToolChoice: choice, ParallelToolCalls: true,
						Sampling: engine.Sampling{MaxTokens: 400, Temperature: 1, Seed: &s}}
					var streamed []engine.ToolCall
					var content strings.Builder
					var final *engine.Final
					err := e.Generate(context.Background(), req, func(ev engine.Event) error {
						if tok := ev.Token; tok != nil {
							content.WriteString(tok.Text)
							for _, dl := range tok.ToolCalls {
								if dl.Index == len(streamed) {
									streamed = append(streamed, engine.ToolCall{ID: dl.ID, Name: dl.Name})
								}
								streamed[dl.Index].Arguments += dl.Arguments
							}
						}
						if ev.Final != nil {
							final = ev.Final
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					if final.FinishReason != engine.FinishToolCalls || len(final.ToolCalls) == 0 {
						t.Fatalf("%s seed %d: finish %s (%s), calls %+v, content %q", choice.Mode, seed, final.FinishReason, final.Error, final.ToolCalls, content.String())
					}
					if content.String()+final.Text != "" {
						t.Errorf("content %q beside forced calls", content.String()+final.Text)
					}
					if len(streamed) != len(final.ToolCalls) {
						t.Errorf("streamed %+v, final %+v", streamed, final.ToolCalls)
					}
					for i, c := range final.ToolCalls {
						if i < len(streamed) && streamed[i] != c {
							t.Errorf("streamed call %+v, final %+v", streamed[i], c)
						}
						if choice.Mode == engine.ToolChoiceFunction && c.Name != "get_weather" {
							t.Errorf("forced get_weather, got %s", c.Name)
						}
						var args map[string]string
						if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil || len(args) == 0 {
							t.Errorf("arguments %s: %v", c.Arguments, err)
						}
					}
				}
			}
		})
	}
}

// TestPromptOpenedReasoning: a template that opens a reasoning block (as DeepSeek-R1's does) makes what the
// model writes reasoning, not content, until the block closes; constrained output closes it first.
func TestPromptOpenedReasoning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r1")
	o := modelgen.Tiny()
	o.Family = model.Qwen3
	if err := modelgen.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}" +
		"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	d, err := e.Load(context.Background(), engine.LoadRequest{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Capabilities.Reasoning {
		t.Fatalf("capabilities %+v: the template thinks", d.Capabilities)
	}
	collect := func(req engine.GenerateRequest) (string, string, *engine.Final) {
		var content, reasoning strings.Builder
		var final *engine.Final
		err := e.Generate(context.Background(), req, func(ev engine.Event) error {
			if ev.Token != nil {
				content.WriteString(ev.Token.Text)
				reasoning.WriteString(ev.Token.Reasoning)
			}
			if ev.Final != nil {
				final = ev.Final
				content.WriteString(final.Text)
				reasoning.WriteString(final.Reasoning)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return content.String(), reasoning.String(), final
	}
	req := engine.GenerateRequest{InstanceID: d.InstanceID, Messages: []engine.Message{{Role: "user", Content: "hi"}},
		Sampling: engine.Sampling{MaxTokens: 24, IgnoreEOS: true, StopTokenIDs: nil}, TemplateVars: map[string]any{"enable_thinking": true}}
	content, reasoning, _ := collect(req)
	if reasoning == "" || strings.Contains(content+reasoning, "<think>") {
		t.Errorf("content %q reasoning %q: the output of an opened block is reasoning, without markers", content, reasoning)
	}
	req.ResponseFormat = engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: []byte(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`)}
	req.Sampling.IgnoreEOS = false
	content, reasoning, f := collect(req)
	if reasoning != "" || (content != `{"ok":true}` && content != `{"ok":false}` && content != `{ "ok": true }` && !json.Valid([]byte(content))) || f.FinishReason != engine.FinishStop {
		t.Errorf("constrained: content %q reasoning %q finish %s", content, reasoning, f.FinishReason)
	}
}

// TestParsedOutputHidesSpecialTokens: the output parser reads its markers from special tokens, and only
// those are kept: other special tokens a model writes (an end of turn it is told to ignore, say) are not
// content.
func TestParsedOutputHidesSpecialTokens(t *testing.T) {
	e, d := loadFamily(t, model.Llama)
	eot := int32(-1)
	res, err := e.Tokenize(context.Background(), engine.TokenizeRequest{InstanceID: d.InstanceID, Prompt: "<|eot_id|>"})
	if err != nil || len(res.Tokens) != 1 {
		t.Fatalf("tokenize <|eot_id|>: %v %v", res.Tokens, err)
	}
	eot = res.Tokens[0]
	seed := int64(3)
	var content strings.Builder
	err = e.Generate(context.Background(), engine.GenerateRequest{InstanceID: d.InstanceID,
		Messages: []engine.Message{{Role: "user", Content: "hi"}},
		Sampling: engine.Sampling{MaxTokens: 12, IgnoreEOS: true, Temperature: 1, Seed: &seed, LogitBias: map[int32]float64{eot: 100}}},
		func(ev engine.Event) error {
			if ev.Token != nil {
				content.WriteString(ev.Token.Text)
			}
			if ev.Final != nil {
				content.WriteString(ev.Final.Text)
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(content.String(), "<|") {
		t.Errorf("special tokens in the content: %q", content.String())
	}
}

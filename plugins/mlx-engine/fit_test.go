package mlxengine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	mlxengine "github.com/duet-ai/duet/plugins/mlx-engine"
	"github.com/duet-ai/duet/sdk/engine"
)

// generate runs req and returns the streamed content with the final event.
func generate(t *testing.T, e engine.Engine, req engine.GenerateRequest) (string, *engine.Final) {
	t.Helper()
	var content strings.Builder
	var final *engine.Final
	err := e.Generate(context.Background(), req, func(ev engine.Event) error {
		if ev.Token != nil {
			content.WriteString(ev.Token.Text)
		}
		if ev.Final != nil {
			final = ev.Final
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if final == nil {
		t.Fatal("no final event")
	}
	return content.String() + final.Text, final
}

// TestStrictOutputsFitMaxTokens: the embedded model (a tiny random Llama, the gateway's default) writes free
// strings until the budget ends them, so forced tool calls and json_schema outputs with free strings used to
// end cut by max_tokens, unparsable, every time. With the grammar steering to close when the tokens left
// reach the shortest completion, all 16 of each parse at a modest max_tokens, and say "length" where the
// budget shaped them (here all do: the random model never closes a string on its own).
func TestStrictOutputsFitMaxTokens(t *testing.T) {
	e := mlxengine.New(nil)
	t.Cleanup(e.Close)
	d, err := e.Load(context.Background(), engine.LoadRequest{InstanceID: "i", Model: mlxengine.EmbeddedModel})
	if err != nil {
		t.Fatal(err)
	}
	// The shortest forced call of get_weather is 57 bytes and about 41 tokens of the embedded vocabulary (at
	// max_tokens 40 every such call is cut); 48 leaves the model a few tokens of its own.
	const maxTokens = 48
	user := []engine.Message{{Role: "user", Content: "Describe the weather in Oslo."}}
	tools := []engine.Tool{
		{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"},"note":{"type":"string"}},"required":["city","note"],"additionalProperties":false}`)},
		{Name: "get_time", Parameters: []byte(`{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"],"additionalProperties":false}`)},
	}
	schema := []byte(`{"type":"object","properties":{"title":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"body":{"type":"string"}},"required":["title","tags","body"],"additionalProperties":false}`)

	t.Run("forced tool calls", func(t *testing.T) {
		length := 0
		for seed := range int64(16) {
			s := seed
			choice := engine.ToolChoice{Mode: engine.ToolChoiceFunction, Name: "get_weather"}
			if seed%2 == 1 {
				choice = engine.ToolChoice{Mode: engine.ToolChoiceRequired}
			}
			text, final := generate(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: user, Tools: tools,
				ToolChoice: choice, ParallelToolCalls: seed%4 == 1,
				Sampling: engine.Sampling{MaxTokens: maxTokens, Temperature: 1, Seed: &s}})
			if final.Error != "" || len(final.ToolCalls) == 0 {
				t.Fatalf("seed %d: finish %s (%s), no calls; text %q", seed, final.FinishReason, final.Error, text)
			}
			if final.FinishReason != engine.FinishToolCalls && final.FinishReason != engine.FinishLength {
				t.Errorf("seed %d: finish %s, want tool_calls or length", seed, final.FinishReason)
			}
			if final.FinishReason == engine.FinishLength {
				length++
			}
			if final.Usage.CompletionTokens > maxTokens {
				t.Errorf("seed %d: %d tokens past max_tokens %d", seed, final.Usage.CompletionTokens, maxTokens)
			}
			for _, c := range final.ToolCalls {
				var args map[string]string
				if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
					t.Errorf("seed %d: call %s(%s): %v; %+v %q", seed, c.Name, c.Arguments, err, final.Usage, text)
				}
			}
		}
		t.Logf("%d of 16 steered to fit (finish length)", length)
		if length == 0 {
			t.Errorf("no call needed the budget's steering: the test's max_tokens %d is too generous to test it", maxTokens)
		}
	})

	t.Run("json_schema with free strings", func(t *testing.T) {
		length := 0
		for seed := range int64(16) {
			s := seed
			text, final := generate(t, e, engine.GenerateRequest{InstanceID: d.InstanceID, Messages: user,
				ResponseFormat: engine.ResponseFormat{Type: engine.FormatJSONSchema, Schema: schema, Strict: true},
				Sampling:       engine.Sampling{MaxTokens: maxTokens, Temperature: 1, Seed: &s}})
			if final.Error != "" {
				t.Fatalf("seed %d: %s", seed, final.Error)
			}
			var v struct {
				Title *string  `json:"title"`
				Tags  []string `json:"tags"`
				Body  *string  `json:"body"`
			}
			if err := json.Unmarshal([]byte(text), &v); err != nil || v.Title == nil || v.Tags == nil || v.Body == nil {
				t.Errorf("seed %d (finish %s): %q does not parse as the schema's object: %v", seed, final.FinishReason, text, err)
			}
			switch final.FinishReason {
			case engine.FinishLength:
				length++
			case engine.FinishStop:
			default:
				t.Errorf("seed %d: finish %s, want stop or length", seed, final.FinishReason)
			}
			if final.Usage.CompletionTokens > maxTokens {
				t.Errorf("seed %d: %d tokens past max_tokens %d", seed, final.Usage.CompletionTokens, maxTokens)
			}
		}
		t.Logf("%d of 16 steered to fit (finish length)", length)
		if length == 0 {
			t.Errorf("no output needed the budget's steering: the test's max_tokens %d is too generous to test it", maxTokens)
		}
	})
}

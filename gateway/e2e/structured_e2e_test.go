package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// orderSchema has what the guarantee must hold for: nested objects, enums, required fields, bounded
// strings, integers with bounds, arrays. Strings are bounded so that even the embedded model's noise ends
// within max_tokens; the grammar guarantees validity, not brevity.
const orderSchema = `{
	"type": "object",
	"properties": {
		"customer": {"type": "object", "properties": {
			"name": {"type": "string", "maxLength": 16},
			"tier": {"type": "string", "enum": ["free", "pro", "enterprise"]}
		}, "required": ["name", "tier"], "additionalProperties": false},
		"items": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {
			"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
			"quantity": {"type": "integer", "minimum": 1, "maximum": 99},
			"gift": {"type": "boolean"}
		}, "required": ["sku", "quantity"], "additionalProperties": false}},
		"priority": {"enum": ["low", "high"]},
		"note": {"anyOf": [{"type": "string", "maxLength": 12}, {"type": "null"}]}
	},
	"required": ["customer", "items", "priority"],
	"additionalProperties": false
}`

func compileSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(schema)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validJSON(s *jsonschema.Schema, text string) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// TestConstrainedOutputsValidate: with the embedded model (noise, as far as JSON goes) sampled at
// temperature 1, 100 forced tool calls and 100 json_schema answers, half of each streamed, all validate
// against their schema with a real JSON Schema validator, and none is empty or cut off.
func TestConstrainedOutputsValidate(t *testing.T) {
	if testing.Short() {
		t.Skip("200 generations with the embedded model")
	}
	g := startDuet(t, "--max-inflight", "16")
	// Eight at a time share each decode step; on two loaded cores a prompt that carries the schema can wait
	// tens of seconds behind the others' prefills.
	c := g.client(option.WithRequestTimeout(5 * time.Minute))
	schema := compileSchema(t, orderSchema)
	var params map[string]any
	if err := json.Unmarshal([]byte(orderSchema), &params); err != nil {
		t.Fatal(err)
	}
	tool := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "place_order", Parameters: params, Strict: openai.Bool(true)})
	other := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "cancel_order",
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "integer"}}}})

	request := func(i int) openai.ChatCompletionNewParams {
		p := openai.ChatCompletionNewParams{
			Model:       "embedded",
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("Order %d: two red lamps for Ana, quickly.", i))},
			Temperature: openai.Float(1),
			Seed:        openai.Int(int64(i)),
			MaxTokens:   openai.Int(600),
		}
		if i%2 == 0 { // a forced call
			p.Tools = []openai.ChatCompletionToolUnionParam{other, tool}
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
				Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "place_order"}}}
		} else {
			p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "order", Schema: params, Strict: openai.Bool(true)}}}
		}
		return p
	}
	// answer runs request i, streamed when i%4 >= 2, and returns what must validate and the finish reason.
	answer := func(i int) (string, string, error) {
		p := request(i)
		var msg openai.ChatCompletionMessage
		var finish string
		if i%4 >= 2 {
			stream := c.Chat.Completions.NewStreaming(context.Background(), p)
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				return "", "", err
			}
			if len(acc.Choices) != 1 {
				return "", "", fmt.Errorf("%d choices", len(acc.Choices))
			}
			msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
		} else {
			resp, err := c.Chat.Completions.New(context.Background(), p)
			if err != nil {
				return "", "", err
			}
			msg, finish = resp.Choices[0].Message, resp.Choices[0].FinishReason
		}
		if i%2 == 0 {
			if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "place_order" || msg.ToolCalls[0].ID == "" {
				return "", finish, fmt.Errorf("tool calls %+v (content %q)", msg.ToolCalls, msg.Content)
			}
			return msg.ToolCalls[0].Function.Arguments, finish, nil
		}
		return msg.Content, finish, nil
	}

	const n = 200
	var mu sync.Mutex
	failures := 0
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			text, finish, err := answer(i)
			want := "stop"
			if i%2 == 0 {
				want = "tool_calls"
			}
			if err == nil && finish != want {
				err = fmt.Errorf("finish_reason %q, want %q", finish, want)
			}
			if err == nil {
				err = validJSON(schema, text)
			}
			if err != nil {
				mu.Lock()
				failures++
				mu.Unlock()
				t.Errorf("request %d (%s): %v\n%s", i, map[bool]string{true: "forced call", false: "json_schema"}[i%2 == 0], err, text)
			} else if i < 4 {
				t.Logf("request %d: %s", i, text)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d constrained outputs validate", n-failures, n)
}

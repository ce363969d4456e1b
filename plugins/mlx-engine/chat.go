package mlxengine

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/duet-ai/duet/plugins/mlx-engine/chattemplate"
	"github.com/duet-ai/duet/plugins/mlx-engine/tokenizer"
	"github.com/duet-ai/duet/plugins/mlx-engine/toolcall"
	"github.com/duet-ai/duet/sdk/engine"
)

// templateInput is what a chat template sees of a request: the messages with their tool calls, tool call ids,
// names and reasoning as the fields Hugging Face templates read (harmony templates read reasoning as
// "thinking", the others as "reasoning_content"), the tools in OpenAI's shape, and the request's template
// variables.
func templateInput(messages []engine.Message, tools []engine.Tool, vars map[string]any, f toolcall.Format) (chattemplate.Input, error) {
	in := chattemplate.Input{Messages: make([]chattemplate.Message, len(messages)), Vars: vars}
	for i, m := range messages {
		extra, err := messageExtra(m, f.Reasoning == toolcall.ReasoningHarmony)
		if err != nil {
			return in, err
		}
		in.Messages[i] = chattemplate.Message{Role: m.Role, Content: m.Content, Extra: extra}
	}
	if len(tools) > 0 {
		b, err := json.Marshal(toolsJSON(tools))
		if err != nil {
			return in, engine.InvalidParam("tools", "%v", err)
		}
		in.Tools = b
	}
	return in, nil
}

type templateFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type templateTool struct {
	Type     string           `json:"type"`
	Function templateFunction `json:"function"`
}

func toolsJSON(tools []engine.Tool) []templateTool {
	out := make([]templateTool, len(tools))
	for i, t := range tools {
		out[i] = templateTool{Type: "function", Function: templateFunction{Name: t.Name, Description: t.Description}}
		if json.Valid(t.Parameters) {
			out[i].Function.Parameters = t.Parameters
		}
	}
	return out
}

type templateCallFunction struct {
	Name string `json:"name"`
	// Arguments is the JSON object itself, not its text: templates write it with tojson (Llama 3, Qwen,
	// Hermes) or iterate over it (Qwen3-Coder's XML), as transformers passes it. Arguments that are not an
	// object stay a string.
	Arguments json.RawMessage `json:"arguments"`
}

type templateCall struct {
	ID       string               `json:"id,omitempty"`
	Type     string               `json:"type"`
	Function templateCallFunction `json:"function"`
}

type templateExtra struct {
	Name             string         `json:"name,omitempty"`
	ToolCalls        []templateCall `json:"tool_calls,omitempty"`
	ToolCallID       string         `json:"tool_call_id,omitempty"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	Thinking         string         `json:"thinking,omitempty"`
}

// messageExtra is a message's fields beside role and content; thinking puts its reasoning where harmony
// templates read it.
func messageExtra(m engine.Message, thinking bool) (json.RawMessage, error) {
	x := templateExtra{Name: m.Name, ToolCallID: m.ToolCallID, ReasoningContent: m.Reasoning}
	if thinking {
		x.ReasoningContent, x.Thinking = "", m.Reasoning
	}
	for _, c := range m.ToolCalls {
		args := json.RawMessage(c.Arguments)
		if !isJSONObject(args) {
			q, _ := json.Marshal(c.Arguments)
			args = q
		}
		x.ToolCalls = append(x.ToolCalls, templateCall{ID: c.ID, Type: "function", Function: templateCallFunction{Name: c.Name, Arguments: args}})
	}
	if len(x.ToolCalls) == 0 && x.Name == "" && x.ToolCallID == "" && x.ReasoningContent == "" && x.Thinking == "" {
		return nil, nil
	}
	b, err := json.Marshal(x)
	if err != nil {
		return nil, engine.InvalidParam("messages", "%v", err)
	}
	return b, nil
}

// isJSONObject reports whether b is one valid JSON object.
func isJSONObject(b []byte) bool {
	for i, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return json.Valid(b[i:])
		}
		return false
	}
	return false
}

// appendTurnEnds adds to eos the tokens that end an assistant turn in the model's chat format, where the model
// files may not list them: harmony's <|return|> (a final answer) and <|call|> (a tool call; gpt-oss's
// generation_config.json lists both, its tokenizer_config.json only <|return|>), and <end_of_turn> for a
// template that ends turns with it (Gemma; a base model's files name only <eos>). Only special tokens of the
// vocabulary count; ids already there are not repeated.
func appendTurnEnds(eos []int32, tok *tokenizer.Tokenizer, tmpl string, f toolcall.Format) []int32 {
	var ends []string
	if f.Calls == toolcall.CallsHarmony {
		ends = append(ends, "<|return|>", "<|call|>")
	}
	if strings.Contains(tmpl, "<end_of_turn>") {
		ends = append(ends, "<end_of_turn>")
	}
	for _, s := range ends {
		if id, ok := tok.TokenID(s); ok && tok.IsSpecial(id) && !slices.Contains(eos, id) {
			eos = append(eos, id)
		}
	}
	return eos
}

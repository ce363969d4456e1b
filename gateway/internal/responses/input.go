package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/duet-ai/duet/gateway/internal/openai"
	"github.com/duet-ai/duet/sdk/engine"
)

// Input is a string (one user message) or a list of items: messages, the function calls of earlier responses
// and their outputs, and reasoning. The items of one assistant turn (reasoning, a message, function calls)
// become one assistant message, as chat templates expect a turn.

type itemBody struct {
	Type      *string         `json:"type"`
	Role      *string         `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    *string         `json:"call_id"`
	Name      *string         `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	Summary   []partBody      `json:"summary"`
}

type partBody struct {
	Type    *string `json:"type"`
	Text    *string `json:"text"`
	Refusal *string `json:"refusal"`
}

// roles maps the message roles of the API to the engine's.
var roles = map[string]string{"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}

// unsupportedParts are content the API takes that a text model cannot read.
var unsupportedParts = map[string]string{"input_image": "images", "input_file": "files", "input_audio": "audio"}

func parseInput(raw json.RawMessage) ([]engine.Message, *openai.Error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, openai.BadRequest("input", "input is required: duet keeps no conversations, so each request carries the whole conversation as input")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, openai.BadRequest("input", "input is not a valid string")
		}
		return []engine.Message{{Role: "user", Content: s}}, nil
	case raw[0] != '[':
		return nil, openai.BadRequest("input", "invalid type for 'input': expected a string or an array of input items")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, openai.BadRequest("input", "input is not a valid array")
	}
	if len(items) == 0 {
		return nil, openai.BadRequest("input", "input must not be empty")
	}
	c := conversation{calls: map[string]string{}}
	for i, it := range items {
		if err := c.add(fmt.Sprintf("input[%d]", i), it); err != nil {
			return nil, err
		}
	}
	return c.msgs, nil
}

// conversation gathers input items into engine messages.
type conversation struct {
	msgs []engine.Message
	// turn: the last message is an assistant message that later items of the same turn (function calls) join.
	turn bool
	// reasoning waits for the assistant message of its turn.
	reasoning string
	calls     map[string]string // call id -> function name, of the calls so far
}

func (c *conversation) add(param string, raw json.RawMessage) *openai.Error {
	var it itemBody
	if err := decodeAt(raw, param, &it); err != nil {
		return err
	}
	typ := "message"
	if it.Type != nil {
		typ = *it.Type
	} else if it.Role == nil {
		return openai.BadRequest(param+".type", "%s has neither a type nor a role", param)
	}
	switch typ {
	case "message":
		return c.message(param, &it)
	case "function_call":
		return c.functionCall(param, &it)
	case "function_call_output":
		return c.functionCallOutput(param, &it)
	case "reasoning":
		return c.addReasoning(param, &it)
	case "item_reference":
		return openai.BadRequest(param+".type", "%s is an item_reference, but duet does not store items: send the item itself", param)
	}
	return openai.BadRequest(param+".type", "%s: input item type %q is not supported; duet takes message, function_call, function_call_output and reasoning items", param, typ)
}

func (c *conversation) message(param string, it *itemBody) *openai.Error {
	if it.Role == nil {
		return openai.BadRequest(param+".role", "%s is missing the role", param)
	}
	role, ok := roles[*it.Role]
	if !ok {
		return openai.BadRequest(param+".role", "invalid role %q: expected user, assistant, system or developer (a tool's answer is a function_call_output item)", *it.Role)
	}
	content, err := parseContent(param+".content", it.Content, role == "assistant")
	if err != nil {
		return err
	}
	m := engine.Message{Role: role, Content: content}
	c.turn = false
	if role == "assistant" {
		m.Reasoning, c.reasoning, c.turn = c.reasoning, "", true
	}
	c.msgs = append(c.msgs, m)
	return nil
}

func (c *conversation) functionCall(param string, it *itemBody) *openai.Error {
	if it.CallID == nil || *it.CallID == "" {
		return openai.BadRequest(param+".call_id", "%s is a function_call without call_id", param)
	}
	if it.Name == nil || *it.Name == "" {
		return openai.BadRequest(param+".name", "%s is a function_call without name", param)
	}
	call := engine.ToolCall{ID: *it.CallID, Name: *it.Name, Arguments: "{}"}
	if a := it.Arguments; a != nil && *a != "" {
		if !json.Valid([]byte(*a)) {
			return openai.BadRequest(param+".arguments", "%s's arguments are not valid JSON", param)
		}
		call.Arguments = *a
	}
	c.calls[call.ID] = call.Name
	if !c.turn {
		c.msgs = append(c.msgs, engine.Message{Role: "assistant", Reasoning: c.reasoning})
		c.reasoning, c.turn = "", true
	}
	last := &c.msgs[len(c.msgs)-1]
	last.ToolCalls = append(last.ToolCalls, call)
	return nil
}

func (c *conversation) functionCallOutput(param string, it *itemBody) *openai.Error {
	if it.CallID == nil || *it.CallID == "" {
		return openai.BadRequest(param+".call_id", "%s is a function_call_output without call_id", param)
	}
	name, ok := c.calls[*it.CallID]
	if !ok {
		return openai.BadRequest(param+".call_id", "no function_call before %s has call_id %q: send the function_call item of the earlier response before its output", param, *it.CallID)
	}
	out, err := parseContent(param+".output", it.Output, false)
	if err != nil {
		return err
	}
	c.msgs = append(c.msgs, engine.Message{Role: "tool", Content: out, ToolCallID: *it.CallID, Name: name})
	c.turn = false
	return nil
}

// addReasoning keeps a reasoning item's text for the assistant message of its turn: its reasoning_text
// content, or else its summary. Encrypted reasoning is OpenAI's and cannot be read here; it is dropped.
func (c *conversation) addReasoning(param string, it *itemBody) *openai.Error {
	var parts []partBody
	if ct := bytes.TrimSpace(it.Content); len(ct) > 0 && string(ct) != "null" {
		if err := json.Unmarshal(ct, &parts); err != nil {
			return openai.BadRequest(param+".content", "%s.content must be an array of reasoning_text parts", param)
		}
	}
	text := joinParts(parts, "reasoning_text")
	if text == "" {
		text = joinParts(it.Summary, "summary_text")
	}
	c.reasoning += text
	c.turn = false
	return nil
}

func joinParts(parts []partBody, typ string) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Type != nil && *p.Type == typ && p.Text != nil {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(*p.Text)
		}
	}
	return b.String()
}

// parseContent reads a message's content or a function call's output: a string, or an array of text parts,
// which are joined.
func parseContent(param string, raw json.RawMessage, nullable bool) (string, *openai.Error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		if nullable {
			return "", nil
		}
		return "", openai.BadRequest(param, "%s is required", param)
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", openai.BadRequest(param, "%s is not a valid string", param)
		}
		return s, nil
	case raw[0] != '[':
		return "", openai.BadRequest(param, "invalid type for '%s': expected a string or an array of content parts", param)
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", openai.BadRequest(param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for j, pr := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var p partBody
		if err := decodeAt(pr, pp, &p); err != nil {
			return "", err
		}
		if p.Type == nil {
			return "", openai.BadRequest(pp+".type", "%s is missing its type", pp)
		}
		text, field := p.Text, "text"
		switch t := *p.Type; {
		case t == "input_text" || t == "output_text":
		case t == "refusal":
			text, field = p.Refusal, "refusal"
		case unsupportedParts[t] != "":
			return "", openai.BadRequest(pp+".type", "%s is %s, but duet serves text models, which cannot read %s; send text only", pp, t, unsupportedParts[t])
		default:
			return "", openai.BadRequest(pp+".type", "content part type %q is not supported; only input_text, output_text and refusal", t)
		}
		if text == nil {
			return "", openai.BadRequest(pp+"."+field, "%s is missing its %s", pp, field)
		}
		b.WriteString(*text)
	}
	return b.String(), nil
}

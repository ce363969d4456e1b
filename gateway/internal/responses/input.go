package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/duet-ai/duet/gateway/internal/apicore"
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
	// Namespace is the namespace of a function_call's or custom_tool_call's tool.
	Namespace *string `json:"namespace"`
	// Input is a custom_tool_call's free-form input.
	Input *string `json:"input"`
	// EncryptedContent is a reasoning item's sealed text.
	EncryptedContent *string `json:"encrypted_content"`
	// Tools are an additional_tools item's.
	Tools []json.RawMessage `json:"tools"`
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

func parseInput(raw json.RawMessage, tools *toolSet, sealer *Sealer) ([]engine.Message, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, apicore.BadRequest("input", "input is required: duet keeps no conversations, so each request carries the whole conversation as input")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, apicore.BadRequest("input", "input is not a valid string")
		}
		return []engine.Message{{Role: "user", Content: s}}, nil
	case raw[0] != '[':
		return nil, apicore.BadRequest("input", "invalid type for 'input': expected a string or an array of input items")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, apicore.BadRequest("input", "input is not a valid array")
	}
	if len(items) == 0 {
		return nil, apicore.BadRequest("input", "input must not be empty")
	}
	c := conversation{calls: map[string]string{}, tools: tools, sealer: sealer}
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
	tools     *toolSet          // additional_tools items add to it
	sealer    *Sealer           // opens reasoning's encrypted_content; nil: ignore it
}

func (c *conversation) add(param string, raw json.RawMessage) *apicore.Error {
	var it itemBody
	if err := decodeAt(raw, param, &it); err != nil {
		return err
	}
	typ := "message"
	if it.Type != nil {
		typ = *it.Type
	} else if it.Role == nil {
		return apicore.BadRequest(param+".type", "%s has neither a type nor a role", param)
	}
	switch typ {
	case "message":
		return c.message(param, &it)
	case "function_call":
		return c.functionCall(param, &it, false)
	case "custom_tool_call":
		return c.functionCall(param, &it, true)
	case "function_call_output", "custom_tool_call_output":
		return c.functionCallOutput(param, &it)
	case "additional_tools":
		// Codex sends the tools of some models as an item of the conversation: to the model they are tools.
		return c.tools.add(param+".tools", it.Tools)
	case "reasoning":
		return c.addReasoning(param, &it)
	case "item_reference":
		return apicore.BadRequest(param+".type", "%s is an item_reference, but duet does not store items: send the item itself", param)
	}
	return apicore.BadRequest(param+".type", "%s: input item type %q is not supported; duet takes message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning and additional_tools items", param, typ)
}

func (c *conversation) message(param string, it *itemBody) *apicore.Error {
	if it.Role == nil {
		return apicore.BadRequest(param+".role", "%s is missing the role", param)
	}
	role, ok := roles[*it.Role]
	if !ok {
		return apicore.BadRequest(param+".role", "invalid role %q: expected user, assistant, system or developer (a tool's answer is a function_call_output item)", *it.Role)
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

// functionCall adds a function_call item, or a custom_tool_call item (custom), to its turn. A call into a
// namespace is a call of the function the model saw, NAMESPACE__NAME; a custom tool's input is the one
// argument of its function.
func (c *conversation) functionCall(param string, it *itemBody, custom bool) *apicore.Error {
	typ := "function_call"
	if custom {
		typ = "custom_tool_call"
	}
	if it.CallID == nil || *it.CallID == "" {
		return apicore.BadRequest(param+".call_id", "%s is a %s without call_id", param, typ)
	}
	if it.Name == nil || *it.Name == "" {
		return apicore.BadRequest(param+".name", "%s is a %s without name", param, typ)
	}
	call := engine.ToolCall{ID: *it.CallID, Name: *it.Name, Arguments: "{}"}
	if ns := it.Namespace; ns != nil && *ns != "" {
		call.Name = *ns + namespaceSep + call.Name
	}
	switch a := it.Arguments; {
	case custom:
		if it.Input == nil {
			return apicore.BadRequest(param+".input", "%s is a custom_tool_call without input", param)
		}
		args, _ := json.Marshal(struct {
			Input string `json:"input"`
		}{*it.Input})
		call.Arguments = string(args)
	case a != nil && *a != "":
		if !json.Valid([]byte(*a)) {
			return apicore.BadRequest(param+".arguments", "%s's arguments are not valid JSON", param)
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

func (c *conversation) functionCallOutput(param string, it *itemBody) *apicore.Error {
	if it.CallID == nil || *it.CallID == "" {
		return apicore.BadRequest(param+".call_id", "%s is a %s without call_id", param, *it.Type)
	}
	name, ok := c.calls[*it.CallID]
	if !ok {
		return apicore.BadRequest(param+".call_id", "no call before %s has call_id %q: send the function_call (or custom_tool_call) item of the earlier response before its output", param, *it.CallID)
	}
	out, err := parseContent(param+".output", it.Output, false)
	if err != nil {
		return err
	}
	c.msgs = append(c.msgs, engine.Message{Role: "tool", Content: out, ToolCallID: *it.CallID, Name: name})
	c.turn = false
	return nil
}

// addReasoning keeps a reasoning item's text for the assistant message of its turn: its encrypted_content
// when this cluster sealed it (the whole reasoning, as the model wrote it), else its reasoning_text content,
// else its summary. encrypted_content that does not open here (OpenAI's, another cluster's, or altered) is
// dropped, as if the item had none: the conversation goes on without that reasoning rather than fail.
func (c *conversation) addReasoning(param string, it *itemBody) *apicore.Error {
	var parts []partBody
	if ct := bytes.TrimSpace(it.Content); len(ct) > 0 && string(ct) != "null" {
		if err := json.Unmarshal(ct, &parts); err != nil {
			return apicore.BadRequest(param+".content", "%s.content must be an array of reasoning_text parts", param)
		}
	}
	text := ""
	if e := it.EncryptedContent; e != nil && *e != "" {
		text, _ = c.sealer.Open(*e)
	}
	if text == "" {
		text = joinParts(parts, "reasoning_text")
	}
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
func parseContent(param string, raw json.RawMessage, nullable bool) (string, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		if nullable {
			return "", nil
		}
		return "", apicore.BadRequest(param, "%s is required", param)
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", apicore.BadRequest(param, "%s is not a valid string", param)
		}
		return s, nil
	case raw[0] != '[':
		return "", apicore.BadRequest(param, "invalid type for '%s': expected a string or an array of content parts", param)
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", apicore.BadRequest(param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for j, pr := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var p partBody
		if err := decodeAt(pr, pp, &p); err != nil {
			return "", err
		}
		if p.Type == nil {
			return "", apicore.BadRequest(pp+".type", "%s is missing its type", pp)
		}
		text, field := p.Text, "text"
		switch t := *p.Type; {
		case t == "input_text" || t == "output_text":
		case t == "refusal":
			text, field = p.Refusal, "refusal"
		case unsupportedParts[t] != "":
			return "", apicore.BadRequest(pp+".type", "%s is %s, but duet serves text models, which cannot read %s; send text only", pp, t, unsupportedParts[t])
		default:
			return "", apicore.BadRequest(pp+".type", "content part type %q is not supported; only input_text, output_text and refusal", t)
		}
		if text == nil {
			return "", apicore.BadRequest(pp+"."+field, "%s is missing its %s", pp, field)
		}
		b.WriteString(*text)
	}
	return b.String(), nil
}

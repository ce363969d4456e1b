package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Anthropic's bounds that differ from OpenAI's.
const (
	maxTemperature = 1
	// minThinkingBudget is the least thinking.budget_tokens Anthropic accepts.
	minThinkingBudget = 1024
)

// Request is a parsed Messages or count_tokens body, in the engine contract's terms.
type Request struct {
	Model  string
	Stream bool
	// Messages start with the system prompt, when there is one; tool results are "tool" messages.
	Messages          []engine.Message
	Sampling          engine.Sampling
	Tools             []engine.Tool
	ToolChoice        engine.ToolChoice
	ParallelToolCalls bool
	ResponseFormat    engine.ResponseFormat
	TemplateVars      map[string]any
}

// wire shapes: pointers tell "absent" from zero, RawMessage holds the fields that take several types.

type body struct {
	Model         *string         `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      *[]messageBody  `json:"messages"`
	Tools         []toolBody      `json:"tools"`
	ToolChoice    *toolChoiceBody `json:"tool_choice"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Stream        *bool           `json:"stream"`
	Thinking      *thinkingBody   `json:"thinking"`
	OutputConfig  *outputConfig   `json:"output_config"`
	// ContextManagement edits the conversation before the model sees it (Claude Code sends it every turn).
	ContextManagement *contextManagement `json:"context_management"`
	// metadata (user_id), service_tier and cache_control are read by nobody: the gateway has no use for them.
}

type contextManagement struct {
	Edits []contextEdit `json:"edits"`
}

// contextEdit is one of context_management.edits; Keep is {"type": ..., "value": n} or "all".
type contextEdit struct {
	Type *string         `json:"type"`
	Keep json.RawMessage `json:"keep"`
}

type messageBody struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
	// A system message may carry its own output_config (Claude Code's per-turn effort): it is accepted and
	// read by nobody, as the request's own effort is what switches thinking.
}

// blockBody is any content block; Type says which fields belong to it.
type blockBody struct {
	Type      *string         `json:"type"`
	Text      *string         `json:"text"`
	ID        *string         `json:"id"`
	Name      *string         `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID *string         `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   *bool           `json:"is_error"`
	Thinking  *string         `json:"thinking"`
}

type toolBody struct {
	Type        *string         `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Strict      *bool           `json:"strict"`
	// DeferLoading keeps a tool out of the model's context until a tool search loads it; this server has no
	// tool search, so such a tool is left out of what the model sees.
	DeferLoading *bool `json:"defer_loading"`
}

type toolChoiceBody struct {
	Type                   *string `json:"type"`
	Name                   *string `json:"name"`
	DisableParallelToolUse *bool   `json:"disable_parallel_tool_use"`
}

type thinkingBody struct {
	Type         *string `json:"type"`
	BudgetTokens *int    `json:"budget_tokens"`
}

type outputConfig struct {
	Format *struct {
		Type   *string         `json:"type"`
		Schema json.RawMessage `json:"schema"`
	} `json:"format"`
	// Effort tunes how much Claude thinks; engines have only the template's switch, so any effort turns
	// thinking on when the request does not say otherwise with thinking.
	Effort *string `json:"effort"`
}

// ParseMessages parses and validates a POST /v1/messages body.
func ParseMessages(data []byte) (Request, *apicore.Error) { return parse(data, false) }

// ParseCountTokens parses and validates a POST /v1/messages/count_tokens body: a Messages body without
// max_tokens (sampling fields, if sent, are ignored: they do not change the prompt).
func ParseCountTokens(data []byte) (Request, *apicore.Error) { return parse(data, true) }

func parse(data []byte, counting bool) (Request, *apicore.Error) {
	r, err := parseBody(data, counting)
	return r, named(err)
}

// named puts the field first in a message that does not name it, as Anthropic's messages do: its envelope has
// no param. (The shared validation's messages name fields in their own way, and some not at all.)
func named(e *apicore.Error) *apicore.Error {
	if e == nil || e.Param == "" {
		return e
	}
	scope := e.Param
	if i := strings.LastIndexByte(scope, '.'); i > 0 {
		scope = scope[:i]
	}
	if strings.Contains(e.Message, scope) {
		return e
	}
	out := *e
	out.Message = e.Param + ": " + e.Message
	return &out
}

func parseBody(data []byte, counting bool) (Request, *apicore.Error) {
	var b body
	if err := apicore.Decode(data, &b); err != nil {
		return Request{}, err
	}
	var r Request
	if !utf8.Valid(data) {
		return r, apicore.NotUTF8("")
	}
	if b.Model == nil || *b.Model == "" {
		return r, required("model")
	}
	r.Model = *b.Model
	if !counting && b.MaxTokens == nil {
		return r, required("max_tokens")
	}
	if b.Messages == nil {
		return r, required("messages")
	}
	if len(*b.Messages) == 0 {
		return r, apicore.BadRequest("messages", "messages: at least one message is required")
	}
	system, err := parseSystem(b.System)
	if err != nil {
		return r, err
	}
	if system != "" {
		r.Messages = append(r.Messages, engine.Message{Role: "system", Content: system})
	}
	if r.Messages, err = parseMessages(*b.Messages, r.Messages); err != nil {
		return r, err
	}
	if err = parseTools(&b, &r); err != nil {
		return r, err
	}
	var effort *string
	if b.OutputConfig != nil {
		effort = b.OutputConfig.Effort
	}
	if r.TemplateVars, err = parseThinking(b.Thinking, effort, b.MaxTokens); err != nil {
		return r, err
	}
	if err = applyContextManagement(b.ContextManagement, r.Messages); err != nil {
		return r, err
	}
	if r.ResponseFormat, err = parseOutputConfig(b.OutputConfig); err != nil {
		return r, err
	}
	if counting {
		return r, nil
	}
	r.Stream = b.Stream != nil && *b.Stream
	err = apicore.Sampling{
		Temperature: b.Temperature, TopP: b.TopP, TopK: b.TopK, MaxTokens: b.MaxTokens, Stop: b.StopSequences,
		DefaultTemperature: 1, MaxTemperature: maxTemperature, // Anthropic's default and bound
		Names: map[string]string{"stop": "stop_sequences"},
	}.Apply(&r.Sampling)
	return r, err
}

// required is Anthropic's error for a missing field.
func required(param string) *apicore.Error {
	return apicore.BadRequest(param, "%s: Field required", param)
}

// parseSystem accepts a string or an array of text blocks, which are joined by newlines.
func parseSystem(raw json.RawMessage) (string, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", apicore.BadRequest("system", "system: not a valid string")
		}
		return s, nil
	case raw[0] == '[':
		var blocks []blockBody
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return "", apicore.BadRequest("system", "system: must be a string or an array of text blocks")
		}
		var texts []string
		for i, bl := range blocks {
			param := fmt.Sprintf("system.%d", i)
			if bl.Type == nil || *bl.Type != "text" {
				return "", apicore.BadRequest(param+".type", "%s: the system prompt takes only text blocks", param)
			}
			if bl.Text == nil {
				return "", required(param + ".text")
			}
			texts = append(texts, *bl.Text)
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", apicore.BadRequest("system", "system: must be a string or an array of text blocks")
}

// parseMessages converts the conversation. A user turn becomes a "tool" message per tool_result (which
// Anthropic puts first) and a user message of its text; an assistant turn becomes one assistant message with
// its text, thinking (Reasoning) and tool_use blocks (ToolCalls); a system turn (Claude Code sends its
// environment as one, after the user's first message) becomes a system message where it is, for the chat
// template to place. Each tool_result must answer a tool_use of the last assistant turn before it, as
// Anthropic requires: templates pair them by id.
func parseMessages(ms []messageBody, out []engine.Message) ([]engine.Message, *apicore.Error) {
	var calls map[string]bool // the tool_use ids of the last assistant turn
	for i, m := range ms {
		param := fmt.Sprintf("messages.%d", i)
		if m.Role == nil {
			return nil, required(param + ".role")
		}
		blocks, err := parseContent(param+".content", m.Content)
		if err != nil {
			return nil, err
		}
		switch *m.Role {
		case "user":
			msgs, err := userTurn(param, blocks, calls)
			if err != nil {
				return nil, err
			}
			out = append(out, msgs...)
			calls = nil
		case "assistant":
			msg, ids, err := assistantTurn(param, blocks)
			if err != nil {
				return nil, err
			}
			if i == len(ms)-1 {
				// Anthropic continues a final assistant turn (a prefill); the engine contract can only answer
				// after it, which would quietly be another answer.
				return nil, apicore.BadRequest(param, "%s: the last message is the assistant's; continuing a prefilled assistant turn is not supported by this server, so end with a user message", param)
			}
			out = append(out, msg)
			calls = ids
		case "system":
			msg, err := systemTurn(blocks)
			if err != nil {
				return nil, err
			}
			out = append(out, msg)
		default:
			return nil, apicore.BadRequest(param+".role", `%s.role: must be "user", "assistant" or "system", got %q`, param, *m.Role)
		}
	}
	return out, nil
}

// block is a content block with its field path, for errors.
type block struct {
	blockBody
	param string
}

// parseContent reads a message's content: a string (one text block) or an array of blocks. It must not be
// empty: Anthropic allows that only for a final assistant turn, which this server does not continue.
func parseContent(param string, raw json.RawMessage) ([]block, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	var blocks []block
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, required(param)
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, apicore.BadRequest(param, "%s: not a valid string", param)
		}
		text := "text"
		blocks = []block{{blockBody: blockBody{Type: &text, Text: &s}, param: param}}
		if s == "" {
			blocks = nil
		}
	case raw[0] == '[':
		var bs []blockBody
		if err := json.Unmarshal(raw, &bs); err != nil {
			return nil, apicore.BadRequest(param, "%s: must be a string or an array of content blocks (%s)", param, typeError(err))
		}
		for j, b := range bs {
			bp := fmt.Sprintf("%s.%d", param, j)
			if b.Type == nil {
				return nil, required(bp + ".type")
			}
			blocks = append(blocks, block{blockBody: b, param: bp})
		}
	default:
		return nil, apicore.BadRequest(param, "%s: must be a string or an array of content blocks", param)
	}
	if len(blocks) == 0 {
		return nil, apicore.BadRequest(param, "%s: messages must have non-empty content", param)
	}
	return blocks, nil
}

// typeError says what encoding/json found wrong inside a nested value.
func typeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("invalid type for '%s': got %s", te.Field, te.Value)
	}
	return "not valid JSON"
}

// unsupported refuses a block type this server cannot pass to an engine, or one that cannot be where it is
// (in "a user message", say).
func unsupported(b block, where string) *apicore.Error {
	switch *b.Type {
	case "image", "document":
		return apicore.BadRequest(b.param+".type", "%s: %s content is not supported by this server: its engines read text only", b.param, *b.Type)
	case "text", "tool_use", "tool_result", "thinking", "redacted_thinking":
		return apicore.BadRequest(b.param+".type", "%s: a %s block cannot be in %s", b.param, *b.Type, where)
	}
	return apicore.BadRequest(b.param+".type", "%s: content blocks of type %q are not supported by this server", b.param, *b.Type)
}

// systemTurn is a system message inside the conversation: text blocks only, as the system parameter.
func systemTurn(blocks []block) (engine.Message, *apicore.Error) {
	texts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if *b.Type != "text" {
			return engine.Message{}, unsupported(b, "a system message")
		}
		if b.Text == nil {
			return engine.Message{}, required(b.param + ".text")
		}
		texts = append(texts, *b.Text)
	}
	return engine.Message{Role: "system", Content: strings.Join(texts, "\n")}, nil
}

func userTurn(param string, blocks []block, calls map[string]bool) ([]engine.Message, *apicore.Error) {
	var out []engine.Message
	var texts []string
	for _, b := range blocks {
		switch *b.Type {
		case "text":
			if b.Text == nil {
				return nil, required(b.param + ".text")
			}
			texts = append(texts, *b.Text)
		case "tool_result":
			if len(texts) > 0 {
				return nil, apicore.BadRequest(b.param, "%s: tool_result blocks must come first in a user message, before any text", b.param)
			}
			msg, err := toolResult(b, calls)
			if err != nil {
				return nil, err
			}
			out = append(out, msg)
		default:
			return nil, unsupported(b, "a user message")
		}
	}
	if len(texts) > 0 {
		out = append(out, engine.Message{Role: "user", Content: strings.Join(texts, "\n")})
	}
	return out, nil
}

func toolResult(b block, calls map[string]bool) (engine.Message, *apicore.Error) {
	if b.ToolUseID == nil || *b.ToolUseID == "" {
		return engine.Message{}, required(b.param + ".tool_use_id")
	}
	id := *b.ToolUseID
	if !calls[id] {
		return engine.Message{}, apicore.BadRequest(b.param+".tool_use_id", "%s: tool_use_id %q answers no tool_use block of the assistant message just before it", b.param, id)
	}
	raw := bytes.TrimSpace(b.Content)
	var content string
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &content); err != nil {
			return engine.Message{}, apicore.BadRequest(b.param+".content", "%s.content: not a valid string", b.param)
		}
	case raw[0] == '[':
		var bs []blockBody
		if err := json.Unmarshal(raw, &bs); err != nil {
			return engine.Message{}, apicore.BadRequest(b.param+".content", "%s.content: must be a string or an array of text blocks", b.param)
		}
		var texts []string
		for j, inner := range bs {
			ib := block{blockBody: inner, param: fmt.Sprintf("%s.content.%d", b.param, j)}
			switch {
			case inner.Type == nil:
				return engine.Message{}, required(ib.param + ".type")
			case *inner.Type != "text":
				return engine.Message{}, unsupported(ib, "a tool_result")
			case inner.Text == nil:
				return engine.Message{}, required(ib.param + ".text")
			}
			texts = append(texts, *inner.Text)
		}
		content = strings.Join(texts, "\n")
	default:
		return engine.Message{}, apicore.BadRequest(b.param+".content", "%s.content: must be a string or an array of text blocks", b.param)
	}
	if b.IsError != nil && *b.IsError {
		content = strings.TrimSpace("Error: " + content)
	}
	return engine.Message{Role: "tool", ToolCallID: id, Content: content}, nil
}

func assistantTurn(param string, blocks []block) (engine.Message, map[string]bool, *apicore.Error) {
	msg := engine.Message{Role: "assistant"}
	var texts, thinking []string
	ids := map[string]bool{}
	for _, b := range blocks {
		switch *b.Type {
		case "text":
			if b.Text == nil {
				return msg, nil, required(b.param + ".text")
			}
			texts = append(texts, *b.Text)
		case "thinking":
			if b.Thinking == nil {
				return msg, nil, required(b.param + ".thinking")
			}
			thinking = append(thinking, *b.Thinking)
		case "redacted_thinking":
			// Claude's encrypted thinking: nothing an engine can read.
		case "tool_use":
			call, err := toolUse(b)
			if err != nil {
				return msg, nil, err
			}
			if ids[call.ID] {
				return msg, nil, apicore.BadRequest(b.param+".id", "%s.id: two tool_use blocks have the id %q", b.param, call.ID)
			}
			ids[call.ID] = true
			msg.ToolCalls = append(msg.ToolCalls, call)
		default:
			return msg, nil, unsupported(b, "an assistant message")
		}
	}
	msg.Content = strings.Join(texts, "\n")
	msg.Reasoning = strings.Join(thinking, "\n")
	return msg, ids, nil
}

func toolUse(b block) (engine.ToolCall, *apicore.Error) {
	switch {
	case b.ID == nil || *b.ID == "":
		return engine.ToolCall{}, required(b.param + ".id")
	case b.Name == nil || *b.Name == "":
		return engine.ToolCall{}, required(b.param + ".name")
	}
	input := bytes.TrimSpace(b.Input)
	if len(input) == 0 {
		return engine.ToolCall{}, required(b.param + ".input")
	}
	var args bytes.Buffer
	if input[0] != '{' || json.Compact(&args, input) != nil {
		return engine.ToolCall{}, apicore.BadRequest(b.param+".input", "%s.input: must be an object", b.param)
	}
	return engine.ToolCall{ID: *b.ID, Name: *b.Name, Arguments: args.String()}, nil
}

// parseTools reads tools and tool_choice into the shared validation.
func parseTools(b *body, r *Request) *apicore.Error {
	fns := make([]apicore.Function, 0, len(b.Tools))
	for i, t := range b.Tools {
		param := fmt.Sprintf("tools.%d", i)
		if t.Type != nil && *t.Type != "custom" {
			return apicore.BadRequest(param+".type", "%s: tools of type %q (Anthropic's server tools) are not supported by this server; define the tool with a name and an input_schema", param, *t.Type)
		}
		schema := bytes.TrimSpace(t.InputSchema)
		if len(schema) == 0 || string(schema) == "null" {
			return required(param + ".input_schema")
		}
		var s struct {
			Type json.RawMessage `json:"type"`
		}
		if schema[0] != '{' || json.Unmarshal(schema, &s) != nil {
			return apicore.BadRequest(param+".input_schema", "%s.input_schema: must be a JSON schema object", param)
		}
		if string(bytes.TrimSpace(s.Type)) != `"object"` {
			return apicore.BadRequest(param+".input_schema.type", `%s.input_schema.type: must be "object"`, param)
		}
		if t.DeferLoading != nil && *t.DeferLoading {
			continue
		}
		fns = append(fns, apicore.Function{Name: t.Name, Description: t.Description, Parameters: schema, Strict: t.Strict, Param: param})
	}
	var err *apicore.Error
	if r.Tools, err = apicore.Tools(fns, "tools"); err != nil {
		return err
	}
	r.ParallelToolCalls = true
	mode, name := "", ""
	if c := b.ToolChoice; c != nil {
		if c.Type == nil {
			return required("tool_choice.type")
		}
		switch *c.Type {
		case "auto":
			mode = engine.ToolChoiceAuto
		case "any":
			mode = engine.ToolChoiceRequired
		case "tool":
			mode = engine.ToolChoiceFunction
			if c.Name == nil || *c.Name == "" {
				return required("tool_choice.name")
			}
			name = *c.Name
		case "none":
			mode = engine.ToolChoiceNone
		default:
			return apicore.BadRequest("tool_choice.type", `tool_choice.type: must be "auto", "any", "tool" or "none", got %q`, *c.Type)
		}
		if mode != engine.ToolChoiceNone && len(r.Tools) == 0 {
			return apicore.BadRequest("tool_choice", "tool_choice: %q needs tools, and the request has none", *c.Type)
		}
		if c.DisableParallelToolUse != nil && *c.DisableParallelToolUse {
			r.ParallelToolCalls = false
		}
	}
	r.ToolChoice, err = apicore.ToolChoice(mode, name, r.Tools, "tool_choice")
	return err
}

// efforts are output_config.effort's values.
var efforts = map[string]bool{"low": true, "medium": true, "high": true, "xhigh": true, "max": true}

// parseThinking turns thinking on or off in the chat template, the one reasoning switch engines have. Without
// thinking, Claude does not think (whatever the effort), so neither does the engine's model; "enabled" thinks;
// "adaptive" lets the model decide how much, by the effort: it thinks unless the effort is "low", where Claude
// mostly answers straight away.
func parseThinking(t *thinkingBody, effort *string, maxTokens *int) (map[string]any, *apicore.Error) {
	if effort != nil && !efforts[*effort] {
		return nil, apicore.BadRequest("output_config.effort", `output_config.effort: must be "low", "medium", "high", "xhigh" or "max", got %q`, *effort)
	}
	if t == nil {
		return apicore.Thinking(false, nil), nil
	}
	if t.Type == nil {
		return nil, required("thinking.type")
	}
	switch *t.Type {
	case "enabled":
		if t.BudgetTokens == nil {
			return nil, required("thinking.budget_tokens")
		}
		n := *t.BudgetTokens
		if n < minThinkingBudget {
			return nil, apicore.BadRequest("thinking.budget_tokens", "thinking.budget_tokens: must be at least %d, got %d", minThinkingBudget, n)
		}
		if maxTokens != nil && n >= *maxTokens {
			return nil, apicore.BadRequest("thinking.budget_tokens", "thinking.budget_tokens: must be less than max_tokens (%d), got %d", *maxTokens, n)
		}
		return apicore.Thinking(true, nil), nil
	case "adaptive":
		return apicore.Thinking(effort == nil || *effort != "low", nil), nil
	case "disabled":
		return apicore.Thinking(false, nil), nil
	}
	return nil, apicore.BadRequest("thinking.type", `thinking.type: must be "enabled", "adaptive" or "disabled", got %q`, *t.Type)
}

// parseOutputConfig reads structured outputs (output_config.format, a JSON schema).
func parseOutputConfig(c *outputConfig) (engine.ResponseFormat, *apicore.Error) {
	if c == nil || c.Format == nil {
		return engine.ResponseFormat{}, nil
	}
	if c.Format.Type == nil || *c.Format.Type != "json_schema" {
		return engine.ResponseFormat{}, apicore.BadRequest("output_config.format.type", `output_config.format.type: must be "json_schema"`)
	}
	return apicore.JSONSchemaFormat("", c.Format.Schema, true, "output_config.format")
}

// Context edits this server knows: clearing old thinking is applied; clearing old tool results waits for a
// token threshold (100k input tokens by default) that the prompt of a local model does not reach before its
// context ends, so it is accepted and not applied.
const (
	clearThinking = "clear_thinking_20251015"
	clearToolUses = "clear_tool_uses_20250919"
)

// applyContextManagement applies context_management.edits to the parsed conversation: clear_thinking drops
// the thinking of all assistant turns but the last keep.value ones (keep "all" keeps every one; Anthropic's
// default keeps one).
func applyContextManagement(c *contextManagement, ms []engine.Message) *apicore.Error {
	if c == nil {
		return nil
	}
	for i, e := range c.Edits {
		param := fmt.Sprintf("context_management.edits.%d", i)
		if e.Type == nil {
			return required(param + ".type")
		}
		switch *e.Type {
		case clearThinking:
			keep, err := thinkingTurnsKept(e.Keep, param+".keep")
			if err != nil {
				return err
			}
			if keep >= 0 {
				clearOldThinking(ms, keep)
			}
		case clearToolUses:
		default:
			return apicore.BadRequest(param+".type", "%s.type: must be %q or %q, got %q", param, clearThinking, clearToolUses, *e.Type)
		}
	}
	return nil
}

// thinkingTurnsKept reads clear_thinking's keep: how many of the latest assistant turns keep their thinking,
// or -1 for all.
func thinkingTurnsKept(raw json.RawMessage, param string) (int, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return 1, nil
	case string(raw) == `"all"`:
		return -1, nil
	}
	var k struct {
		Type  *string `json:"type"`
		Value *int    `json:"value"`
	}
	if raw[0] != '{' || json.Unmarshal(raw, &k) != nil || k.Type == nil || *k.Type != "thinking_turns" || k.Value == nil || *k.Value < 0 {
		return 0, apicore.BadRequest(param, `%s: must be "all" or {"type": "thinking_turns", "value": n} with n >= 0`, param)
	}
	return *k.Value, nil
}

// clearOldThinking empties the Reasoning of every assistant message but the last keep that have some.
func clearOldThinking(ms []engine.Message, keep int) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role != "assistant" || ms[i].Reasoning == "" {
			continue
		}
		if keep > 0 {
			keep--
			continue
		}
		ms[i].Reasoning = ""
	}
}

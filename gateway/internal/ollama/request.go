package ollama

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Ollama's defaults and bounds.
const (
	defaultTemperature = 0.8
	maxTopLogprobs     = 20
)

// Request is a parsed /api/chat or /api/generate body, in the engine contract's terms.
type Request struct {
	// Model is the model as the client named it ("echo:latest"); answers repeat it.
	Model string
	// Stream is Ollama's default: true unless the body says "stream": false.
	Stream bool
	// Load is set for a body with no messages (chat) or no prompt (generate), Ollama's way to load a model
	// ("load") or, with keep_alive 0, to unload it ("unload"): nothing is generated, the answer is the done
	// object with Load as its done_reason. duet's instances stay loaded either way.
	Load string

	// Exactly one of Messages and Prompt is set (Prompt by a raw generate).
	Messages []engine.Message
	Prompt   string

	Sampling       engine.Sampling
	Tools          []engine.Tool
	ToolChoice     engine.ToolChoice
	ResponseFormat engine.ResponseFormat
	TemplateVars   map[string]any
	// NumCtx is options.num_ctx, 0 when absent. An engine's context is fixed when it loads: the caller
	// refuses a num_ctx beyond it and ignores a smaller one.
	NumCtx int
}

// GenerateRequest is the engine request of a parsed body.
func (r *Request) GenerateRequest() engine.GenerateRequest {
	return engine.GenerateRequest{
		Messages: r.Messages, Prompt: r.Prompt, Sampling: r.Sampling, Tools: r.Tools, ToolChoice: r.ToolChoice,
		ParallelToolCalls: true, // Ollama has no switch: a model may call several tools
		ResponseFormat:    r.ResponseFormat, TemplateVars: r.TemplateVars,
	}
}

// Wire shapes. Pointers tell "absent" from zero; RawMessage holds fields that take several types (think,
// format, keep_alive) or whose errors should name their index.

// commonBody holds what chat and generate share; both embed it.
type commonBody struct {
	Model       *string                    `json:"model"`
	Stream      *bool                      `json:"stream"`
	Format      json.RawMessage            `json:"format"`
	KeepAlive   json.RawMessage            `json:"keep_alive"`
	Options     map[string]json.RawMessage `json:"options"`
	Think       json.RawMessage            `json:"think"`
	Logprobs    *bool                      `json:"logprobs"`
	TopLogprobs *int                       `json:"top_logprobs"`
	// Truncate and Shift ask Ollama to drop or shift history that overflows the context. duet keeps the
	// prompt whole and says when it does not fit; they are read only so that their type is checked.
	Truncate *bool `json:"truncate"`
	Shift    *bool `json:"shift"`
}

type chatBody struct {
	commonBody
	Messages []messageBody `json:"messages"`
	Tools    []toolBody    `json:"tools"`
}

type generateBody struct {
	commonBody
	Prompt   *string         `json:"prompt"`
	Suffix   *string         `json:"suffix"`
	System   *string         `json:"system"`
	Template *string         `json:"template"`
	Context  json.RawMessage `json:"context"`
	Raw      *bool           `json:"raw"`
	Images   json.RawMessage `json:"images"`
}

type messageBody struct {
	Role       *string         `json:"role"`
	Content    json.RawMessage `json:"content"`
	Thinking   *string         `json:"thinking"`
	Images     json.RawMessage `json:"images"`
	ToolCalls  []toolCallBody  `json:"tool_calls"`
	ToolName   *string         `json:"tool_name"`
	ToolCallID *string         `json:"tool_call_id"`
}

type toolCallBody struct {
	ID       *string `json:"id"`
	Function *struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type toolBody struct {
	Type     *string `json:"type"`
	Function *struct {
		Name        *string         `json:"name"`
		Description *string         `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// ParseChat parses and validates an /api/chat body.
func ParseChat(body []byte) (Request, *apicore.Error) {
	var b chatBody
	if err := decode(body, &b); err != nil {
		return Request{}, err
	}
	r, err := b.common()
	if err != nil {
		return r, err
	}
	if len(b.Messages) == 0 {
		r.Load = b.loadReason()
		return r, nil
	}
	if r.Messages, err = parseMessages(b.Messages); err != nil {
		return r, err
	}
	if r.Tools, r.ToolChoice, err = parseTools(b.Tools); err != nil {
		return r, err
	}
	return r, nil
}

// ParseGenerate parses and validates an /api/generate body. Without raw, the prompt (and system) become a
// chat rendered with the model's template, as Ollama renders them; with raw, the prompt goes to the model
// as it is.
func ParseGenerate(body []byte) (Request, *apicore.Error) {
	var b generateBody
	if err := decode(body, &b); err != nil {
		return Request{}, err
	}
	r, err := b.common()
	if err != nil {
		return r, err
	}
	raw := b.Raw != nil && *b.Raw
	switch {
	case b.Suffix != nil && *b.Suffix != "":
		return r, apicore.BadRequest("suffix", "suffix (fill in the middle) is not supported by this server")
	case b.Template != nil && *b.Template != "":
		return r, apicore.BadRequest("template", "template is not supported: prompts are rendered with the model's own chat template; send raw: true with a prompt you rendered yourself")
	case present(b.Context):
		return r, apicore.BadRequest("context", "context is deprecated and not supported: send the conversation to /api/chat instead")
	case present(b.Images):
		return r, imagesRefused("images")
	case raw && b.System != nil && *b.System != "":
		return r, apicore.BadRequest("raw", "raw mode does not support template, system, or context")
	}
	prompt := ""
	if b.Prompt != nil {
		prompt = *b.Prompt
	}
	if prompt == "" {
		r.Load = b.loadReason()
		return r, nil
	}
	if raw {
		r.Prompt = prompt
		return r, nil
	}
	if b.System != nil && *b.System != "" {
		r.Messages = append(r.Messages, engine.Message{Role: "system", Content: *b.System})
	}
	r.Messages = append(r.Messages, engine.Message{Role: "user", Content: prompt})
	return r, nil
}

// ParseShow reads the model an /api/show body names ("model", or the older "name").
func ParseShow(body []byte) (string, *apicore.Error) {
	var b struct {
		Model *string `json:"model"`
		Name  *string `json:"name"`
	}
	if err := decode(body, &b); err != nil {
		return "", err
	}
	switch {
	case b.Model != nil && *b.Model != "":
		return *b.Model, nil
	case b.Name != nil && *b.Name != "":
		return *b.Name, nil
	}
	return "", apicore.BadRequest("model", "model is required")
}

// ModelNotFound is Ollama's 404 for a model no instance serves.
func ModelNotFound(name string) *apicore.Error {
	e := apicore.ModelNotFound(name)
	e.Message = fmt.Sprintf("model '%s' not found", name)
	return e
}

// common validates the fields chat and generate share.
func (b *commonBody) common() (Request, *apicore.Error) {
	var r Request
	if b.Model == nil || *b.Model == "" {
		return r, apicore.BadRequest("model", "model is required")
	}
	r.Model = *b.Model
	r.Stream = b.Stream == nil || *b.Stream
	var err *apicore.Error
	if _, err = parseKeepAlive(b.KeepAlive); err != nil {
		return r, err
	}
	if r.ResponseFormat, err = parseFormat(b.Format); err != nil {
		return r, err
	}
	if r.TemplateVars, err = parseThink(b.Think); err != nil {
		return r, err
	}
	if r.NumCtx, err = parseOptions(b.Options, &r.Sampling); err != nil {
		return r, err
	}
	if b.TopLogprobs != nil && (*b.TopLogprobs < 0 || *b.TopLogprobs > maxTopLogprobs) {
		return r, apicore.BadRequest("top_logprobs", "top_logprobs must be between 0 and %d", maxTopLogprobs)
	}
	if b.Logprobs != nil && *b.Logprobs {
		r.Sampling.Logprobs = true
		if b.TopLogprobs != nil {
			r.Sampling.TopLogprobs = *b.TopLogprobs
		}
	}
	return r, nil
}

// loadReason is the done_reason of a body that asks for no generation.
func (b *commonBody) loadReason() string {
	if zero, _ := parseKeepAlive(b.KeepAlive); zero {
		return "unload"
	}
	return "load"
}

// decode unmarshals a JSON object; its errors say which field has which wrong type, in Ollama's shape.
func decode(body []byte, v any) *apicore.Error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return apicore.BadRequest("", "missing request body")
	}
	if !utf8.Valid(body) {
		return apicore.NotUTF8("")
	}
	if body[0] != '{' {
		return apicore.BadRequest("", "the request body must be a JSON object")
	}
	err := json.Unmarshal(body, v)
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typeErr):
		// encoding/json names a field of an embedded struct with the struct's Go name first; the client
		// knows only the JSON key.
		field := strings.TrimPrefix(typeErr.Field, "commonBody.")
		return apicore.BadRequest(field, "invalid type for %q: expected %s, got %s", field, apicore.JSONTypeName(typeErr.Type.String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return apicore.BadRequest("", "the request body is not valid JSON: %v (at byte %d)", syntaxErr, syntaxErr.Offset)
	default:
		return apicore.BadRequest("", "the request body is not valid JSON: %v", err)
	}
}

// present reports whether a raw field holds something other than null, an empty array or an empty string.
func present(raw json.RawMessage) bool {
	switch s := string(bytes.TrimSpace(raw)); s {
	case "", "null", "[]", `""`:
		return false
	}
	return true
}

func imagesRefused(param string) *apicore.Error {
	return apicore.BadRequest(param, "images are not supported (%s): this server's models read text only", param)
}

var roles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true}

// parseMessages converts Ollama messages. Ollama's clients send tool calls without ids, and tool results
// with the tool's name (tool_name) rather than the call's id: each call gets an id here, and each result the
// id of the earliest call of that name it may answer, so templates that pair them by id can.
func parseMessages(in []messageBody) ([]engine.Message, *apicore.Error) {
	out := make([]engine.Message, 0, len(in))
	var open []engine.ToolCall // calls of the latest assistant message not answered yet
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role == nil || *m.Role == "" {
			return nil, apicore.BadRequest(param+".role", "%s is missing the role", param)
		}
		// Ollama reads roles without regard to case.
		role := strings.ToLower(*m.Role)
		if !roles[role] {
			return nil, apicore.BadRequest(param+".role", "invalid role %q in %s: expected system, user, assistant or tool", *m.Role, param)
		}
		if present(m.Images) {
			return nil, imagesRefused(param + ".images")
		}
		msg := engine.Message{Role: role}
		content, err := parseContent(param+".content", m.Content)
		if err != nil {
			return nil, err
		}
		msg.Content = content
		if len(m.ToolCalls) > 0 && role != "assistant" {
			return nil, apicore.BadRequest(param+".tool_calls", "%s is a %s message: only assistant messages carry tool_calls", param, role)
		}
		switch role {
		case "assistant":
			if m.Thinking != nil {
				msg.Reasoning = *m.Thinking
			}
			for j, tc := range m.ToolCalls {
				call, err := parseToolCall(fmt.Sprintf("%s.tool_calls[%d]", param, j), tc, fmt.Sprintf("call_%d_%d", i, j))
				if err != nil {
					return nil, err
				}
				msg.ToolCalls = append(msg.ToolCalls, call)
			}
			open = append([]engine.ToolCall(nil), msg.ToolCalls...)
		case "tool":
			if m.ToolName != nil {
				msg.Name = *m.ToolName
			}
			if m.ToolCallID != nil {
				msg.ToolCallID = *m.ToolCallID
			}
			open = answer(open, &msg)
		}
		out = append(out, msg)
	}
	return out, nil
}

// answer pairs a tool result with the open call it answers (by id, else the first of its name, else the
// first), fills in the id or name the client left out, and returns the calls still open.
func answer(open []engine.ToolCall, msg *engine.Message) []engine.ToolCall {
	at := -1
	for k, c := range open {
		if msg.ToolCallID != "" && c.ID == msg.ToolCallID || msg.ToolCallID == "" && msg.Name != "" && c.Name == msg.Name {
			at = k
			break
		}
	}
	if at < 0 && msg.ToolCallID == "" && msg.Name == "" && len(open) > 0 {
		at = 0
	}
	if at < 0 {
		return open
	}
	if msg.ToolCallID == "" {
		msg.ToolCallID = open[at].ID
	}
	if msg.Name == "" {
		msg.Name = open[at].Name
	}
	return append(open[:at:at], open[at+1:]...)
}

func parseContent(param string, raw json.RawMessage) (string, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", apicore.BadRequest(param, "%s must be a string", param)
	}
	return s, nil
}

// parseToolCall reads a call an assistant message made: its arguments are an object (Ollama's shape); a
// string holding one, as OpenAI sends it, is taken too.
func parseToolCall(param string, tc toolCallBody, id string) (engine.ToolCall, *apicore.Error) {
	f := tc.Function
	if f == nil || f.Name == nil || *f.Name == "" {
		return engine.ToolCall{}, apicore.BadRequest(param+".function.name", "%s has no function name", param)
	}
	call := engine.ToolCall{ID: id, Name: *f.Name, Arguments: "{}"}
	if tc.ID != nil && *tc.ID != "" {
		call.ID = *tc.ID
	}
	args := bytes.TrimSpace(f.Arguments)
	if len(args) > 0 && args[0] == '"' {
		var s string
		_ = json.Unmarshal(args, &s)
		args = bytes.TrimSpace([]byte(s))
	}
	switch {
	case len(args) == 0 || string(args) == "null":
	case args[0] == '{' && json.Valid(args):
		var compact bytes.Buffer
		_ = json.Compact(&compact, args)
		call.Arguments = compact.String()
	default:
		return engine.ToolCall{}, apicore.BadRequest(param+".function.arguments", "%s's arguments must be a JSON object", param)
	}
	return call, nil
}

func parseTools(in []toolBody) ([]engine.Tool, engine.ToolChoice, *apicore.Error) {
	fns := make([]apicore.Function, 0, len(in))
	for i, t := range in {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type != nil && *t.Type != "" && *t.Type != "function" {
			return nil, engine.ToolChoice{}, apicore.BadRequest(param+".type", "%s: only tools of type \"function\" are supported, got %q", param, *t.Type)
		}
		if t.Function == nil {
			return nil, engine.ToolChoice{}, apicore.BadRequest(param+".function", "%s has no function", param)
		}
		f := t.Function
		fns = append(fns, apicore.Function{Name: f.Name, Description: f.Description, Parameters: f.Parameters, Param: param + ".function"})
	}
	tools, err := apicore.Tools(fns, "tools")
	if err != nil {
		return nil, engine.ToolChoice{}, err
	}
	// Ollama has no tool_choice: with tools, the model decides.
	choice, err := apicore.ToolChoice("", "", tools, "tools")
	return tools, choice, err
}

// parseFormat reads format: "json" (any JSON object) or a JSON schema the answer must match.
func parseFormat(raw json.RawMessage) (engine.ResponseFormat, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null" || string(raw) == `""`:
		return engine.ResponseFormat{}, nil
	case raw[0] == '{':
		// Ollama constrains decoding to the schema: strictly.
		return apicore.JSONSchemaFormat("", raw, true, "format")
	case raw[0] == '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		if s == "json" {
			return engine.ResponseFormat{Type: engine.FormatJSONObject}, nil
		}
		return engine.ResponseFormat{}, apicore.BadRequest("format", "format %q is not \"json\" or a JSON schema object", s)
	}
	return engine.ResponseFormat{}, apicore.BadRequest("format", "format must be \"json\" or a JSON schema object")
}

// parseThink reads think: a boolean, or a level (which only turns thinking on: the templates duet renders
// read enable_thinking).
func parseThink(raw json.RawMessage) (map[string]any, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "", "null":
		return nil, nil
	case "true", "false":
		return apicore.Thinking(string(raw) == "true", nil), nil
	case `"low"`, `"medium"`, `"high"`, `"max"`:
		return apicore.Thinking(true, nil), nil
	}
	return nil, apicore.BadRequest("think", "think must be true, false, \"low\", \"medium\", \"high\" or \"max\", got %s", clip(raw))
}

// parseKeepAlive reads keep_alive (seconds, or a duration such as "5m"), which duet accepts and ignores (its
// instances stay loaded); it reports whether it is zero, which Ollama's clients send to unload a model.
func parseKeepAlive(raw json.RawMessage) (zero bool, _ *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return false, nil
	case raw[0] == '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		d, err := time.ParseDuration(s)
		if err != nil {
			return false, apicore.BadRequest("keep_alive", "keep_alive %q is not a duration (e.g. \"5m\", or seconds as a number)", s)
		}
		return d == 0, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return false, apicore.BadRequest("keep_alive", "keep_alive must be a duration (e.g. \"5m\") or seconds as a number, got %s", clip(raw))
	}
	return f == 0, nil
}

// clip quotes a raw value in an error, cut short.
func clip(raw json.RawMessage) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}

// names are Ollama's spellings of the shared sampling fields, for errors.
var names = map[string]string{
	"temperature": "options.temperature", "top_p": "options.top_p", "top_k": "options.top_k", "min_p": "options.min_p",
	"presence_penalty": "options.presence_penalty", "frequency_penalty": "options.frequency_penalty",
	"repetition_penalty": "options.repeat_penalty", "max_tokens": "options.num_predict", "stop": "options.stop",
}

// parseOptions reads the options duet honours into s, validated as every API's are, and returns num_ctx.
// Ollama ignores options it does not know (with a warning in its log); so does duet, and also those that
// tune Ollama's own runner (num_gpu, num_thread, mirostat, ...), which mean nothing to duet's engines.
func parseOptions(opts map[string]json.RawMessage, s *engine.Sampling) (numCtx int, _ *apicore.Error) {
	p := apicore.Sampling{DefaultTemperature: defaultTemperature, Names: names}
	var maxTokens, ctx *int
	for _, f := range []struct {
		key string
		dst any
	}{
		{"temperature", &p.Temperature}, {"top_p", &p.TopP}, {"min_p", &p.MinP},
		{"presence_penalty", &p.PresencePenalty}, {"frequency_penalty", &p.FrequencyPenalty},
		{"repeat_penalty", &p.RepetitionPenalty}, {"top_k", &p.TopK}, {"num_predict", &maxTokens},
		{"seed", &p.Seed}, {"num_ctx", &ctx}, {"stop", &p.Stop},
	} {
		raw := bytes.TrimSpace(opts[f.key])
		if len(raw) == 0 || string(raw) == "null" {
			continue // Ollama skips a null option too
		}
		if err := option(f.key, raw, f.dst); err != nil {
			return 0, err
		}
	}
	// num_predict -1 (no limit) and -2 (fill the context) mean what no limit means to the engine.
	if maxTokens != nil && *maxTokens <= 0 {
		maxTokens = nil
	}
	p.MaxTokens = maxTokens
	// A negative seed is Ollama's "random".
	if p.Seed != nil && *p.Seed < 0 {
		p.Seed = nil
	}
	if ctx != nil {
		if *ctx < 0 {
			return 0, apicore.BadRequest("options.num_ctx", "options.num_ctx must not be negative, got %d", *ctx)
		}
		numCtx = *ctx
	}
	return numCtx, p.Apply(s)
}

// option decodes one option into dst: **float64, **int, **int64 or *[]string.
func option(key string, raw json.RawMessage, dst any) *apicore.Error {
	param := "options." + key
	switch d := dst.(type) {
	case **float64:
		var v float64
		if json.Unmarshal(raw, &v) != nil {
			return apicore.BadRequest(param, "option %q must be a number, got %s", key, clip(raw))
		}
		*d = &v
	case **int, **int64:
		// JSON has numbers, not integers: 40.0 is 40, as Ollama reads it; 0.5 is a mistake.
		var v float64
		if json.Unmarshal(raw, &v) != nil || v != math.Trunc(v) {
			return apicore.BadRequest(param, "option %q must be an integer, got %s", key, clip(raw))
		}
		// Counts stay exact on every platform (the shared bounds say what is valid); a seed may be any integer
		// a float64 holds exactly.
		if d, ok := d.(**int); ok {
			if math.Abs(v) > math.MaxInt32 {
				return apicore.BadRequest(param, "option %q must be between %d and %d, got %s", key, math.MinInt32, math.MaxInt32, clip(raw))
			}
			n := int(v)
			*d = &n
		} else {
			if math.Abs(v) > 1<<53 {
				return apicore.BadRequest(param, "option %q must be between -2^53 and 2^53, got %s", key, clip(raw))
			}
			n := int64(v)
			*dst.(**int64) = &n
		}
	case *[]string:
		// An array of strings, as Ollama takes it; a single string is taken as one.
		var one string
		if json.Unmarshal(raw, &one) == nil {
			*d = []string{one}
			return nil
		}
		if json.Unmarshal(raw, d) != nil {
			return apicore.BadRequest(param, "option %q must be an array of strings", key)
		}
	}
	return nil
}

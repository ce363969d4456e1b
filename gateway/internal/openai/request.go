package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Limits of the API, as OpenAI documents them.
const (
	maxStopSequences  = 4
	maxTopLogprobs    = 20
	maxLogprobsLegacy = 5
	// maxChoices is OpenAI's bound on n; the engine says how many it serves (Capabilities.MaxChoices).
	maxChoices      = 128
	maxLogitBias    = 1024
	maxLogitBiasAbs = 100
)

// ChatRequest is a parsed POST /v1/chat/completions body.
type ChatRequest struct {
	Model             string
	Messages          []engine.Message
	Stream            bool
	IncludeUsage      bool
	Sampling          engine.Sampling
	Tools             []engine.Tool
	ToolChoice        engine.ToolChoice
	ParallelToolCalls bool
	ResponseFormat    engine.ResponseFormat
	TemplateVars      map[string]any
	N                 int
}

// CompletionRequest is a parsed POST /v1/completions body.
type CompletionRequest struct {
	Model        string
	Prompt       string
	PromptTokens []int32
	Stream       bool
	IncludeUsage bool
	Sampling     engine.Sampling
	// Logprobs is the legacy "logprobs" integer: how many alternatives per token, 0 for the chosen token only.
	Logprobs *int
}

// wire shapes: pointers tell "absent" from zero, RawMessage holds the fields that take several types.

// commonBody holds the fields chat and legacy completions share; both bodies embed it, so encoding/json reads
// them at the top level of either.
type commonBody struct {
	Model            *string         `json:"model"`
	Stream           *bool           `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	N                *int            `json:"n"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	User             *string         `json:"user"`
	// duet and vLLM extensions
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	IgnoreEOS         *bool    `json:"ignore_eos"`
}

type chatBody struct {
	commonBody
	Messages            []messageBody          `json:"messages"`
	MaxTokens           *int                   `json:"max_tokens"`
	MaxCompletionTokens *int                   `json:"max_completion_tokens"`
	Logprobs            *bool                  `json:"logprobs"`
	TopLogprobs         *int                   `json:"top_logprobs"`
	Tools               []toolBody             `json:"tools"`
	ToolChoice          json.RawMessage        `json:"tool_choice"`
	ParallelToolCalls   *bool                  `json:"parallel_tool_calls"`
	Functions           []functionBody         `json:"functions"`
	FunctionCall        json.RawMessage        `json:"function_call"`
	ResponseFormat      *responseFormat        `json:"response_format"`
	ChatTemplateKwargs  map[string]any         `json:"chat_template_kwargs"`
	LogitBias           map[string]json.Number `json:"logit_bias"`
	ReasoningEffort     *string                `json:"reasoning_effort"`
}

type toolBody struct {
	Type     *string       `json:"type"`
	Function *functionBody `json:"function"`
}

type functionBody struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type toolCallBody struct {
	ID       *string `json:"id"`
	Type     *string `json:"type"`
	Function *struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

type messageBody struct {
	Role             *string         `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             *string         `json:"name"`
	ToolCalls        []toolCallBody  `json:"tool_calls"`
	ToolCallID       *string         `json:"tool_call_id"`
	ReasoningContent *string         `json:"reasoning_content"`
	FunctionCall     *struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function_call"`
}

type contentPart struct {
	Type *string `json:"type"`
	Text *string `json:"text"`
}

type completionBody struct {
	commonBody
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	BestOf    *int            `json:"best_of"`
	Logprobs  *int            `json:"logprobs"`
	Echo      *bool           `json:"echo"`
	Suffix    *string         `json:"suffix"`
}

// completionsDefaultMaxTokens is the OpenAI default for /v1/completions.
const completionsDefaultMaxTokens = 16

// ParseChat parses and validates a chat completion request body.
func ParseChat(body []byte) (ChatRequest, *apicore.Error) {
	return parseChat(body, true)
}

// parseChat is ParseChat with or without its fast paths for common bodies and messages.
func parseChat(body []byte, fast bool) (ChatRequest, *apicore.Error) {
	var b chatBody
	var plain func(messageBody) (engine.Message, bool)
	if fast {
		plain = plainMessage
	}
	if !fast || !decodePlainChat(body, &b) {
		b = chatBody{}
		if err := apicore.Decode(body, &b); err != nil {
			return ChatRequest{}, err
		}
	}
	var r ChatRequest
	if !utf8.Valid(body) {
		param := ""
		for i, m := range b.Messages {
			if !utf8.Valid(m.Content) {
				param = fmt.Sprintf("messages[%d].content", i)
				break
			}
		}
		return r, apicore.NotUTF8(param)
	}
	if b.Model == nil || *b.Model == "" {
		return r, apicore.BadRequest("model", "you must provide a model parameter")
	}
	r.Model = *b.Model
	if len(b.Messages) == 0 {
		return r, apicore.BadRequest("messages", "messages must be a non-empty array")
	}
	r.Messages = make([]engine.Message, 0, len(b.Messages))
	for i, m := range b.Messages {
		msg, err := parseMessage(i, m, plain)
		if err != nil {
			return r, err
		}
		r.Messages = append(r.Messages, msg)
	}
	var err *apicore.Error
	if err = b.parseTools(&r); err != nil {
		return r, err
	}
	if r.ResponseFormat, err = parseResponseFormat(b.ResponseFormat); err != nil {
		return r, err
	}
	if r.Stream, r.IncludeUsage, err = parseStream(b.Stream, b.StreamOptions); err != nil {
		return r, err
	}
	r.N = 1
	if b.N != nil {
		if err := apicore.CheckCount("n", *b.N, 1); err != nil || *b.N > maxChoices {
			return r, apicore.BadRequest("n", "n must be between 1 and %d, got %d", maxChoices, *b.N)
		}
		r.N = *b.N
	}
	if r.Sampling.LogitBias, err = parseLogitBias(b.LogitBias); err != nil {
		return r, err
	}
	r.TemplateVars = b.ChatTemplateKwargs
	if e := b.ReasoningEffort; e != nil {
		if r.TemplateVars, err = apicore.ReasoningEffort(*e, r.TemplateVars, "reasoning_effort"); err != nil {
			return r, err
		}
	}
	maxTokens, param := b.MaxCompletionTokens, "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, param = b.MaxTokens, "max_tokens"
	}
	if maxTokens != nil {
		if err := apicore.CheckCount(param, *maxTokens, 1); err != nil {
			return r, err
		}
		r.Sampling.MaxTokens = *maxTokens
	}
	if err := b.applySampling(&r.Sampling); err != nil {
		return r, err
	}
	if b.Logprobs != nil && *b.Logprobs {
		r.Sampling.Logprobs = true
	}
	if b.TopLogprobs != nil {
		n := *b.TopLogprobs
		if n < 0 || n > maxTopLogprobs {
			return r, apicore.BadRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, n)
		}
		if n > 0 && !r.Sampling.Logprobs {
			return r, apicore.BadRequest("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		r.Sampling.TopLogprobs = n
	}
	return r, nil
}

// ParseCompletion parses and validates a legacy completion request body.
func ParseCompletion(body []byte) (CompletionRequest, *apicore.Error) {
	var b completionBody
	if err := apicore.Decode(body, &b); err != nil {
		return CompletionRequest{}, err
	}
	var r CompletionRequest
	if !utf8.Valid(body) {
		param := ""
		if !utf8.Valid(b.Prompt) {
			param = "prompt"
		}
		return r, apicore.NotUTF8(param)
	}
	if b.Model == nil || *b.Model == "" {
		return r, apicore.BadRequest("model", "you must provide a model parameter")
	}
	r.Model = *b.Model
	if err := parsePrompt(b.Prompt, &r); err != nil {
		return r, err
	}
	var err *apicore.Error
	if r.Stream, r.IncludeUsage, err = parseStream(b.Stream, b.StreamOptions); err != nil {
		return r, err
	}
	if err := checkN(b.N, "n"); err != nil {
		return r, err
	}
	if err := checkN(b.BestOf, "best_of"); err != nil {
		return r, err
	}
	if b.Echo != nil && *b.Echo {
		return r, apicore.BadRequest("echo", "echo is not supported by this server")
	}
	if b.Suffix != nil && *b.Suffix != "" {
		return r, apicore.BadRequest("suffix", "suffix is not supported by this server")
	}
	r.Sampling.MaxTokens = completionsDefaultMaxTokens
	if b.MaxTokens != nil {
		if err := apicore.CheckCount("max_tokens", *b.MaxTokens, 1); err != nil {
			return r, err
		}
		r.Sampling.MaxTokens = *b.MaxTokens
	}
	if err := b.applySampling(&r.Sampling); err != nil {
		return r, err
	}
	if b.Logprobs != nil {
		n := *b.Logprobs
		if n < 0 || n > maxLogprobsLegacy {
			return r, apicore.BadRequest("logprobs", "logprobs must be between 0 and %d, got %d", maxLogprobsLegacy, n)
		}
		r.Logprobs = &n
		r.Sampling.Logprobs = true
		r.Sampling.TopLogprobs = n
	}
	return r, nil
}

var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

func parseMessage(i int, m messageBody, plain func(messageBody) (engine.Message, bool)) (engine.Message, *apicore.Error) {
	if plain != nil {
		if msg, ok := plain(m); ok {
			return msg, nil
		}
	}
	param := fmt.Sprintf("messages[%d]", i)
	if m.Role == nil {
		return engine.Message{}, apicore.BadRequest(param+".role", "%s is missing the role", param)
	}
	role := *m.Role
	if !roles[role] {
		return engine.Message{}, apicore.BadRequest(param+".role", "invalid role %q: expected system, developer, user, assistant or tool", role)
	}
	if role == "developer" {
		role = "system" // OpenAI's newer name for system; chat templates know "system"
	}
	var msg engine.Message
	switch role {
	case "tool":
		if m.ToolCallID == nil || *m.ToolCallID == "" {
			return engine.Message{}, apicore.BadRequest(param+".tool_call_id", "%s is a tool message without tool_call_id", param)
		}
		msg.ToolCallID = *m.ToolCallID
	case "function":
		// The deprecated functions API: the answer of a call, named by its function.
		if m.Name == nil || *m.Name == "" {
			return engine.Message{}, apicore.BadRequest(param+".name", "%s is a function message without name", param)
		}
		role = "tool"
	case "assistant":
		for j, tc := range m.ToolCalls {
			call, err := parseToolCall(fmt.Sprintf("%s.tool_calls[%d]", param, j), tc)
			if err != nil {
				return engine.Message{}, err
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		if fc := m.FunctionCall; fc != nil && fc.Name != nil {
			args := "{}"
			if fc.Arguments != nil {
				args = *fc.Arguments
			}
			msg.ToolCalls = append(msg.ToolCalls, engine.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: *fc.Name, Arguments: args})
		}
		if m.ReasoningContent != nil {
			msg.Reasoning = *m.ReasoningContent
		}
	}
	if len(m.ToolCalls) > 0 && role != "assistant" {
		return engine.Message{}, apicore.BadRequest(param+".tool_calls", "only assistant messages carry tool_calls")
	}
	content, err := parseContent(param+".content", m.Content, role == "assistant")
	if err != nil {
		return engine.Message{}, err
	}
	msg.Role, msg.Content = role, content
	if m.Name != nil {
		msg.Name = *m.Name
	}
	return msg, nil
}

func parseToolCall(param string, tc toolCallBody) (engine.ToolCall, *apicore.Error) {
	if tc.Type != nil && *tc.Type != "function" {
		return engine.ToolCall{}, apicore.BadRequest(param+".type", "tool call type %q is not supported; only \"function\"", *tc.Type)
	}
	if tc.Function == nil || tc.Function.Name == nil || *tc.Function.Name == "" {
		return engine.ToolCall{}, apicore.BadRequest(param+".function.name", "%s has no function name", param)
	}
	call := engine.ToolCall{Name: *tc.Function.Name, Arguments: "{}"}
	if tc.ID != nil {
		call.ID = *tc.ID
	}
	if a := tc.Function.Arguments; a != nil && *a != "" {
		if !json.Valid([]byte(*a)) {
			return engine.ToolCall{}, apicore.BadRequest(param+".function.arguments", "%s's arguments are not valid JSON", param)
		}
		call.Arguments = *a
	}
	return call, nil
}

// parseTools reads tools and tool_choice (and the deprecated functions and function_call).
func (b *chatBody) parseTools(r *ChatRequest) *apicore.Error {
	if len(b.Tools) > 0 && len(b.Functions) > 0 {
		return apicore.BadRequest("functions", "send tools or functions, not both")
	}
	var fns []apicore.Function
	for i, t := range b.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		if t.Type == nil || *t.Type != "function" {
			return apicore.BadRequest(param+".type", "%s: only tools of type \"function\" are supported", param)
		}
		if t.Function == nil {
			return apicore.BadRequest(param+".function.name", "%s.function has no name", param)
		}
		f := t.Function
		fns = append(fns, apicore.Function{Name: f.Name, Description: f.Description, Parameters: f.Parameters, Strict: f.Strict, Param: param + ".function"})
	}
	for i, f := range b.Functions {
		fns = append(fns, apicore.Function{Name: f.Name, Description: f.Description, Parameters: f.Parameters, Strict: f.Strict, Param: fmt.Sprintf("functions[%d]", i)})
	}
	var err *apicore.Error
	if r.Tools, err = apicore.Tools(fns, "tools"); err != nil {
		return err
	}
	r.ParallelToolCalls = b.ParallelToolCalls == nil || *b.ParallelToolCalls
	choice, param := bytes.TrimSpace(b.ToolChoice), "tool_choice"
	if len(choice) == 0 || string(choice) == "null" {
		choice, param = bytes.TrimSpace(b.FunctionCall), "function_call"
	}
	mode, name := "", ""
	switch {
	case len(choice) == 0 || string(choice) == "null":
	case choice[0] == '"':
		var s string
		_ = json.Unmarshal(choice, &s)
		if s == engine.ToolChoiceFunction {
			return apicore.BadRequest(param, "%s must be \"none\", \"auto\", \"required\" or a function, got %q", param, s)
		}
		mode = s
	case choice[0] == '{':
		var c struct {
			Type     string `json:"type"`
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(choice, &c); err != nil {
			return apicore.BadRequest(param, "%s is not a valid object: %v", param, err)
		}
		name = c.Function.Name
		if name == "" {
			name = c.Name // function_call: {"name": ...}
		}
		mode = engine.ToolChoiceFunction
	default:
		return apicore.BadRequest(param, "invalid type for '%s': expected a string or an object", param)
	}
	r.ToolChoice, err = apicore.ToolChoice(mode, name, r.Tools, param)
	return err
}

func parseResponseFormat(f *responseFormat) (engine.ResponseFormat, *apicore.Error) {
	if f == nil {
		return engine.ResponseFormat{}, nil
	}
	switch f.Type {
	case "", engine.FormatText:
		return engine.ResponseFormat{}, nil
	case engine.FormatJSONObject:
		return engine.ResponseFormat{Type: engine.FormatJSONObject}, nil
	case engine.FormatJSONSchema:
		js := f.JSONSchema
		if js == nil {
			return engine.ResponseFormat{}, apicore.BadRequest("response_format.json_schema", "response_format json_schema needs a json_schema object")
		}
		if js.Name == "" {
			return engine.ResponseFormat{}, apicore.BadRequest("response_format.json_schema.name", "the schema's name must be 1 to %d letters, digits, _ or -", apicore.MaxToolNameLen)
		}
		return apicore.JSONSchemaFormat(js.Name, js.Schema, js.Strict != nil && *js.Strict, "response_format.json_schema")
	}
	return engine.ResponseFormat{}, apicore.BadRequest("response_format.type", "response_format type %q is not text, json_object or json_schema", f.Type)
}

func parseLogitBias(m map[string]json.Number) (map[int32]float64, *apicore.Error) {
	if len(m) == 0 {
		return nil, nil
	}
	if len(m) > maxLogitBias {
		return nil, apicore.BadRequest("logit_bias", "logit_bias holds %d tokens, more than %d", len(m), maxLogitBias)
	}
	out := make(map[int32]float64, len(m))
	for k, v := range m {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 {
			return nil, apicore.BadRequest("logit_bias", "logit_bias key %q is not a token id", k)
		}
		f, err := v.Float64()
		if err != nil || math.IsNaN(f) || f < -maxLogitBiasAbs || f > maxLogitBiasAbs {
			return nil, apicore.BadRequest("logit_bias", "logit_bias of token %s must be between -100 and 100, got %s", k, v)
		}
		out[int32(id)] = f
	}
	return out, nil
}

// plainMessage is parseMessage for the common message, a system, user or assistant role with a string content
// and no other field, without the names of parameters that only an error needs. ok is false for any other
// message, which parseMessage reads in full.
func plainMessage(m messageBody) (engine.Message, bool) {
	if m.Role == nil || m.Name != nil || m.ToolCalls != nil || m.ToolCallID != nil || m.ReasoningContent != nil || m.FunctionCall != nil {
		return engine.Message{}, false
	}
	switch *m.Role {
	case "system", "user", "assistant":
	default:
		return engine.Message{}, false
	}
	s, ok := plainString(bytes.TrimSpace(m.Content))
	if !ok {
		return engine.Message{}, false
	}
	return engine.Message{Role: *m.Role, Content: s}, true
}

// plainString is the value of raw, a JSON string literal encoding/json has already validated in a body that is
// valid UTF-8, when it holds no escape: then its bytes between the quotes are its value. ok is false otherwise.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	raw = raw[1 : len(raw)-1]
	if bytes.IndexByte(raw, '\\') >= 0 {
		return "", false
	}
	return string(raw), true
}

// parseContent accepts a string or an array of text parts, which are joined.
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
	case raw[0] == '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", apicore.BadRequest(param, "%s must be a string or an array of content parts", param)
		}
		var b strings.Builder
		for j, p := range parts {
			pp := fmt.Sprintf("%s[%d]", param, j)
			if p.Type == nil {
				return "", apicore.BadRequest(pp+".type", "%s is missing its type", pp)
			}
			if *p.Type != "text" {
				return "", apicore.BadRequest(pp+".type", "content part type %q is not supported; only \"text\"", *p.Type)
			}
			if p.Text == nil {
				return "", apicore.BadRequest(pp+".text", "%s is missing its text", pp)
			}
			b.WriteString(*p.Text)
		}
		return b.String(), nil
	default:
		return "", apicore.BadRequest(param, "invalid type for '%s': expected a string or an array of content parts", param)
	}
}

func parsePrompt(raw json.RawMessage, r *CompletionRequest) *apicore.Error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return apicore.BadRequest("prompt", "you must provide a prompt")
	}
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &r.Prompt); err != nil {
			return apicore.BadRequest("prompt", "prompt is not a valid string")
		}
		return nil
	case '[':
	default:
		return apicore.BadRequest("prompt", "invalid type for 'prompt': expected a string, an array of strings or an array of token ids")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return apicore.BadRequest("prompt", "prompt is not a valid array")
	}
	if len(items) == 0 {
		return apicore.BadRequest("prompt", "prompt must not be empty")
	}
	first := bytes.TrimSpace(items[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		if len(items) > 1 {
			return apicore.BadRequest("prompt", "batched prompts are not supported; send one prompt per request")
		}
		return parsePrompt(first, r)
	case len(first) > 0 && first[0] == '[':
		if len(items) > 1 {
			return apicore.BadRequest("prompt", "batched prompts are not supported; send one prompt per request")
		}
		return parsePrompt(first, r)
	}
	ids := make([]int32, len(items))
	for i, it := range items {
		var id int64
		if err := json.Unmarshal(it, &id); err != nil || id < 0 || id > math.MaxInt32 {
			return apicore.BadRequest("prompt", "prompt[%d] is not a valid token id", i)
		}
		ids[i] = int32(id)
	}
	r.PromptTokens = ids
	return nil
}

func parseStream(stream *bool, opts *streamOptions) (bool, bool, *apicore.Error) {
	s := stream != nil && *stream
	if opts == nil {
		return s, false, nil
	}
	if !s {
		return false, false, apicore.BadRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	return true, opts.IncludeUsage != nil && *opts.IncludeUsage, nil
}

func checkN(n *int, param string) *apicore.Error {
	if n != nil && *n != 1 {
		return apicore.BadRequest(param, "%s must be 1: this server returns one choice per request (got %d)", param, *n)
	}
	return nil
}

// applySampling validates the shared sampling fields into s.
func (c *commonBody) applySampling(s *engine.Sampling) *apicore.Error {
	stops, err := parseStop(c.Stop)
	if err != nil {
		return err
	}
	return apicore.Sampling{
		Temperature: c.Temperature, TopP: c.TopP, TopK: c.TopK, MinP: c.MinP, Seed: c.Seed,
		PresencePenalty: c.PresencePenalty, FrequencyPenalty: c.FrequencyPenalty, RepetitionPenalty: c.RepetitionPenalty,
		IgnoreEOS: c.IgnoreEOS, Stop: stops, DefaultTemperature: 1, // the OpenAI default
	}.Apply(s)
}

func parseStop(raw json.RawMessage) ([]string, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var stops []string
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, apicore.BadRequest("stop", "stop is not a valid string")
		}
		stops = []string{s}
	case '[':
		if err := json.Unmarshal(raw, &stops); err != nil {
			return nil, apicore.BadRequest("stop", "invalid type for 'stop': expected a string or an array of strings")
		}
	default:
		return nil, apicore.BadRequest("stop", "invalid type for 'stop': expected a string or an array of strings")
	}
	if len(stops) > maxStopSequences {
		return nil, apicore.BadRequest("stop", "stop takes at most %d sequences, got %d", maxStopSequences, len(stops))
	}
	return stops, nil
}

package responses

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/duet-ai/duet/gateway/internal/apicore"
	"github.com/duet-ai/duet/sdk/engine"
)

// Request is a parsed POST /v1/responses body.
type Request struct {
	Model  string
	Stream bool
	// Generate is the engine request: Messages, Sampling, Tools, ToolChoice, ParallelToolCalls,
	// ResponseFormat and TemplateVars are set.
	Generate engine.GenerateRequest
	// PromptBytes is the length of the conversation's text: the router's estimate of the prompt's size.
	PromptBytes int
	// Echo is what the response object repeats of the request.
	Echo *Echo
	// IgnoredTools are the types of the hosted tools left out of what the model sees.
	IgnoredTools []string
	// CacheKey is prompt_cache_key: requests that share it share a prefix, which routing keeps together.
	CacheKey string
}

// Options are the server's settings that change how requests are read.
type Options struct {
	// HostedTools: drop (the default) or error.
	HostedTools HostedTools
	// Sealer seals reasoning into encrypted_content and opens it again; nil: reasoning is never sealed, and
	// encrypted_content on input is ignored.
	Sealer *Sealer
}

// includeEncryptedReasoning is the include value that asks for reasoning items with encrypted_content.
const includeEncryptedReasoning = "reasoning.encrypted_content"

// Bounds of the API, as OpenAI documents them.
const (
	maxMetadata         = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
)

// body is the wire shape: pointers tell "absent" from zero, RawMessage holds fields of several types.
type body struct {
	Model              *string           `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Text               *textBody         `json:"text"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	MaxToolCalls       *int              `json:"max_tool_calls"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	TopLogprobs        *int              `json:"top_logprobs"`
	Reasoning          *reasoningBody    `json:"reasoning"`
	Stream             *bool             `json:"stream"`
	StreamOptions      json.RawMessage   `json:"stream_options"`
	Metadata           map[string]string `json:"metadata"`
	User               *string           `json:"user"`
	Truncation         *string           `json:"truncation"`
	Include            []string          `json:"include"`
	Store              *bool             `json:"store"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Conversation       json.RawMessage   `json:"conversation"`
	Background         *bool             `json:"background"`
	Prompt             json.RawMessage   `json:"prompt"`
	// A routing hint: the turns of one key go where their prefix is cached.
	PromptCacheKey *string `json:"prompt_cache_key"`
	// Accepted and ignored: they tune OpenAI's platform (tiers, abuse detection, Codex's telemetry), not the
	// answer.
	ServiceTier      *string         `json:"service_tier"`
	SafetyIdentifier *string         `json:"safety_identifier"`
	ClientMetadata   json.RawMessage `json:"client_metadata"`
}

type textBody struct {
	Format    json.RawMessage `json:"format"`
	Verbosity *string         `json:"verbosity"`
}

type formatBody struct {
	Type        *string         `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

type reasoningBody struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary"` // the deprecated spelling of summary
	// Context is Codex's: which turns' reasoning the model sees again. duet gives back what the input holds.
	Context *string `json:"context"`
}

// Parse parses and validates a request body.
func Parse(raw []byte, o Options) (Request, *apicore.Error) {
	var b body
	if err := apicore.Decode(raw, &b); err != nil {
		return Request{}, err
	}
	var r Request
	if !utf8.Valid(raw) {
		param := ""
		if !utf8.Valid(b.Input) {
			param = "input"
		}
		return r, apicore.NotUTF8(param)
	}
	if err := b.stateless(); err != nil {
		return r, err
	}
	if b.Model == nil || *b.Model == "" {
		return r, apicore.BadRequest("model", "you must provide a model parameter")
	}
	r.Model = *b.Model
	g := &r.Generate
	if b.Instructions != nil && *b.Instructions != "" {
		g.Messages = append(g.Messages, engine.Message{Role: "system", Content: *b.Instructions})
	}
	tools := toolSet{hosted: o.HostedTools}
	if err := tools.add("tools", b.Tools); err != nil {
		return r, err
	}
	msgs, err := parseInput(b.Input, &tools, o.Sealer)
	if err != nil {
		return r, err
	}
	g.Messages = append(g.Messages, msgs...)
	for _, m := range g.Messages {
		r.PromptBytes += len(m.Content) + len(m.Reasoning)
		for _, c := range m.ToolCalls {
			r.PromptBytes += len(c.Name) + len(c.Arguments)
		}
	}
	if g.Tools, err = apicore.Tools(tools.fns, "tools"); err != nil {
		return r, err
	}
	r.IgnoredTools = tools.ignored
	if g.ToolChoice, err = parseToolChoice(b.ToolChoice, g.Tools); err != nil {
		return r, err
	}
	g.ParallelToolCalls = b.ParallelToolCalls == nil || *b.ParallelToolCalls
	var format formatBody
	if b.Text != nil {
		if g.ResponseFormat, format, err = parseFormat(b.Text.Format); err != nil {
			return r, err
		}
		if v := b.Text.Verbosity; v != nil && *v != "low" && *v != "medium" && *v != "high" {
			return r, apicore.BadRequest("text.verbosity", "text.verbosity must be low, medium or high, got %q", *v)
		}
	}
	if err := (apicore.Sampling{
		Temperature: b.Temperature, TopP: b.TopP, MaxTokens: b.MaxOutputTokens, DefaultTemperature: 1,
		Names: map[string]string{"max_tokens": "max_output_tokens"},
	}).Apply(&g.Sampling); err != nil {
		return r, err
	}
	if b.Reasoning != nil {
		if e := b.Reasoning.Effort; e != nil {
			if g.TemplateVars, err = apicore.ReasoningEffort(*e, g.TemplateVars, "reasoning.effort"); err != nil {
				return r, err
			}
		}
		for _, s := range []struct {
			param string
			v     *string
		}{{"reasoning.summary", b.Reasoning.Summary}, {"reasoning.generate_summary", b.Reasoning.GenerateSummary}} {
			if s.v != nil && *s.v != "auto" && *s.v != "concise" && *s.v != "detailed" {
				return r, apicore.BadRequest(s.param, "%s must be auto, concise or detailed, got %q", s.param, *s.v)
			}
		}
	}
	if r.Stream, err = parseStream(b.Stream, b.StreamOptions); err != nil {
		return r, err
	}
	if err := b.checkRest(); err != nil {
		return r, err
	}
	if b.PromptCacheKey != nil {
		r.CacheKey = *b.PromptCacheKey
	}
	r.Echo = newEcho(&b, &r, format)
	r.Echo.names = tools.names
	r.Echo.summary = b.Reasoning != nil && (b.Reasoning.Summary != nil || b.Reasoning.GenerateSummary != nil)
	for _, inc := range b.Include {
		if inc == includeEncryptedReasoning {
			r.Echo.sealer = o.Sealer
		}
	}
	return r, nil
}

// stateless refuses what needs a response or conversation stored by the server. duet stores nothing, so these
// are errors rather than requests quietly answered without the context the client meant to give.
func (b *body) stateless() *apicore.Error {
	switch {
	case b.Store != nil && *b.Store:
		return apicore.BadRequest("store", "duet does not store responses: it keeps no state between requests. "+
			"Send \"store\": false (or leave store out) and send the whole conversation as input.")
	case b.PreviousResponseID != nil && *b.PreviousResponseID != "":
		return apicore.BadRequest("previous_response_id", "duet does not store responses, so it cannot continue "+
			"response %q: send the whole conversation as input instead (the earlier input items, the output items "+
			"of each response and the new ones).", *b.PreviousResponseID)
	case len(b.Conversation) > 0 && string(bytes.TrimSpace(b.Conversation)) != "null":
		return apicore.BadRequest("conversation", "duet does not store conversations: send the whole conversation as input instead.")
	case b.Background != nil && *b.Background:
		return apicore.BadRequest("background", "duet does not run responses in the background (it does not store them to be fetched later): send background false and wait for the answer, or stream it.")
	case len(b.Prompt) > 0 && string(bytes.TrimSpace(b.Prompt)) != "null":
		return apicore.BadRequest("prompt", "prompt templates are stored on OpenAI's platform; duet has none. Send instructions and input instead.")
	}
	return nil
}

// checkRest validates the fields that change nothing duet does, so that a value OpenAI would refuse is refused
// here too.
func (b *body) checkRest() *apicore.Error {
	if n := b.TopLogprobs; n != nil && *n != 0 {
		return apicore.BadRequest("top_logprobs", "top_logprobs is not supported on /v1/responses by this server; use /v1/chat/completions for logprobs")
	}
	if n := b.MaxToolCalls; n != nil {
		// It bounds calls of built-in tools, which duet has none of: any bound holds.
		if err := apicore.CheckCount("max_tool_calls", *n, 1); err != nil {
			return err
		}
	}
	if t := b.Truncation; t != nil && *t != "auto" && *t != "disabled" {
		return apicore.BadRequest("truncation", "truncation must be auto or disabled, got %q", *t)
	}
	if len(b.Metadata) > maxMetadata {
		return apicore.BadRequest("metadata", "metadata holds at most %d pairs, got %d", maxMetadata, len(b.Metadata))
	}
	for k, v := range b.Metadata {
		if len(k) > maxMetadataKeyLen {
			return apicore.BadRequest("metadata", "metadata key %q is longer than %d characters", k, maxMetadataKeyLen)
		}
		if len(v) > maxMetadataValueLen {
			return apicore.BadRequest("metadata", "metadata value of %q is longer than %d characters", k, maxMetadataValueLen)
		}
	}
	return nil
}

func parseStream(stream *bool, opts json.RawMessage) (bool, *apicore.Error) {
	s := stream != nil && *stream
	if o := bytes.TrimSpace(opts); len(o) > 0 && string(o) != "null" {
		if !s {
			return false, apicore.BadRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		if o[0] != '{' {
			return false, apicore.BadRequest("stream_options", "invalid type for 'stream_options': expected an object")
		}
	}
	return s, nil
}

func parseToolChoice(raw json.RawMessage, tools []engine.Tool) (engine.ToolChoice, *apicore.Error) {
	raw = bytes.TrimSpace(raw)
	mode, name := "", ""
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		_ = json.Unmarshal(raw, &mode)
		if mode == engine.ToolChoiceFunction {
			return engine.ToolChoice{}, apicore.BadRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}, got %q", mode)
		}
	case raw[0] == '{':
		var c struct {
			Type      *string `json:"type"`
			Name      *string `json:"name"`
			Namespace *string `json:"namespace"`
		}
		if err := decodeAt(raw, "tool_choice", &c); err != nil {
			return engine.ToolChoice{}, err
		}
		switch {
		case c.Type == nil:
			return engine.ToolChoice{}, apicore.BadRequest("tool_choice.type", "tool_choice is missing its type")
		case *c.Type == "function" || *c.Type == "custom":
		case *c.Type == "allowed_tools":
			return engine.ToolChoice{}, apicore.BadRequest("tool_choice.type", "tool_choice allowed_tools is not supported by this server; send only the allowed tools, with tool_choice auto or required")
		default:
			return engine.ToolChoice{}, apicore.BadRequest("tool_choice.type", "tool_choice of type %q is not supported: duet serves only function and custom tools", *c.Type)
		}
		if c.Name == nil || *c.Name == "" {
			return engine.ToolChoice{}, apicore.BadRequest("tool_choice.name", "tool_choice names no function")
		}
		mode, name = engine.ToolChoiceFunction, *c.Name
		if c.Namespace != nil && *c.Namespace != "" {
			name = *c.Namespace + namespaceSep + name
		}
	default:
		return engine.ToolChoice{}, apicore.BadRequest("tool_choice", "invalid type for 'tool_choice': expected a string or an object")
	}
	return apicore.ToolChoice(mode, name, tools, "tool_choice")
}

func parseFormat(raw json.RawMessage) (engine.ResponseFormat, formatBody, *apicore.Error) {
	var f formatBody
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return engine.ResponseFormat{}, f, nil
	}
	if raw[0] != '{' {
		return engine.ResponseFormat{}, f, apicore.BadRequest("text.format", "invalid type for 'text.format': expected an object")
	}
	if err := decodeAt(raw, "text.format", &f); err != nil {
		return engine.ResponseFormat{}, f, err
	}
	if f.Type == nil {
		return engine.ResponseFormat{}, f, apicore.BadRequest("text.format.type", "text.format is missing its type")
	}
	switch *f.Type {
	case engine.FormatText:
		return engine.ResponseFormat{}, f, nil
	case engine.FormatJSONObject:
		return engine.ResponseFormat{Type: engine.FormatJSONObject}, f, nil
	case engine.FormatJSONSchema:
		if f.Name == nil || *f.Name == "" {
			return engine.ResponseFormat{}, f, apicore.BadRequest("text.format.name", "text.format json_schema needs a name")
		}
		rf, err := apicore.JSONSchemaFormat(*f.Name, f.Schema, f.Strict != nil && *f.Strict, "text.format")
		return rf, f, err
	}
	return engine.ResponseFormat{}, f, apicore.BadRequest("text.format.type", "text.format type %q is not text, json_object or json_schema", *f.Type)
}

// decodeAt decodes the object raw, which sits at param in the body: type errors name the whole path.
func decodeAt(raw json.RawMessage, param string, v any) *apicore.Error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return apicore.BadRequest(param, "invalid type for '%s': expected an object", param)
	}
	err := apicore.Decode(raw, v)
	if err == nil {
		return nil
	}
	if err.Param == "" {
		return apicore.BadRequest(param, "%s is not valid JSON", param)
	}
	full := param + "." + err.Param
	return apicore.BadRequest(full, "%s", bytes.Replace([]byte(err.Message), []byte("'"+err.Param+"'"), []byte("'"+full+"'"), 1))
}

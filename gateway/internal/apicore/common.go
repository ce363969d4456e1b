package apicore

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"

	"github.com/duet-ai/duet/sdk/engine"
)

// The validation every client API shares. Chat completions, completions, Responses, Anthropic Messages and
// Ollama name their fields differently but mean the same engine contract: each parser gathers its fields
// into these types and validates them here, once, so a bound or a default is the same whichever API a
// client speaks. Errors name the field as that API spells it.

// Limits every API shares, as OpenAI documents them.
const (
	// MaxCount bounds every count a client sends (max_tokens, top_k, ...). No context comes near it, and it keeps
	// each value exact on every platform and wire it crosses: larger values are a 400, never a narrowed number.
	MaxCount = 1<<31 - 1
	// MaxTools and the name pattern (ValidToolName) are OpenAI's.
	MaxTools       = 128
	MaxToolNameLen = 64
)

// Sampling holds a request's sampling fields, nil where the client sent none.
type Sampling struct {
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	Seed              *int64
	PresencePenalty   *float64
	FrequencyPenalty  *float64
	RepetitionPenalty *float64
	MaxTokens         *int
	Stop              []string
	IgnoreEOS         *bool
	// DefaultTemperature applies when Temperature is nil: 1 for OpenAI and Anthropic, 0.8 for Ollama.
	DefaultTemperature float64
	// MaxTemperature bounds Temperature: 0 means OpenAI's 2; Anthropic's is 1.
	MaxTemperature float64
	// Names maps a field's OpenAI name to the API's ("max_tokens": "num_predict"), for errors.
	Names map[string]string
	// MaxStop bounds the stop sequences (OpenAI: 4); 0: no bound beyond the engine's.
	MaxStop int
}

func (p Sampling) name(n string) string {
	if v, ok := p.Names[n]; ok {
		return v
	}
	return n
}

// Apply validates the fields into s.
func (p Sampling) Apply(s *engine.Sampling) *Error {
	s.Temperature = p.DefaultTemperature
	if v := p.Temperature; v != nil {
		hi := p.MaxTemperature
		if hi <= 0 {
			hi = 2
		}
		if *v < 0 || *v > hi || math.IsNaN(*v) {
			return BadRequest(p.name("temperature"), "%s must be between 0 and %g, got %g", p.name("temperature"), hi, *v)
		}
		s.Temperature = *v
	}
	if v := p.TopP; v != nil {
		if *v <= 0 || *v > 1 || math.IsNaN(*v) {
			return BadRequest(p.name("top_p"), "%s must be greater than 0 and at most 1, got %g", p.name("top_p"), *v)
		}
		s.TopP = *v
	}
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"presence_penalty", p.PresencePenalty, &s.PresencePenalty}, {"frequency_penalty", p.FrequencyPenalty, &s.FrequencyPenalty}} {
		if f.v != nil {
			if *f.v < -2 || *f.v > 2 || math.IsNaN(*f.v) {
				return BadRequest(p.name(f.name), "%s must be between -2 and 2, got %g", p.name(f.name), *f.v)
			}
			*f.dst = *f.v
		}
	}
	if v := p.TopK; v != nil {
		switch {
		case *v == -1:
			// vLLM's spelling of "off", which many clients send.
		case *v < 0 || *v > MaxCount:
			return BadRequest(p.name("top_k"), "%s must be -1 (off) or between 0 and %d, got %d", p.name("top_k"), MaxCount, *v)
		default:
			s.TopK = *v
		}
	}
	if v := p.MinP; v != nil {
		if *v < 0 || *v > 1 || math.IsNaN(*v) {
			return BadRequest(p.name("min_p"), "%s must be between 0 and 1, got %g", p.name("min_p"), *v)
		}
		s.MinP = *v
	}
	if v := p.RepetitionPenalty; v != nil {
		if *v <= 0 || math.IsNaN(*v) {
			return BadRequest(p.name("repetition_penalty"), "%s must be greater than 0, got %g", p.name("repetition_penalty"), *v)
		}
		s.RepetitionPenalty = *v
	}
	if v := p.MaxTokens; v != nil {
		if err := CheckCount(p.name("max_tokens"), *v, 1); err != nil {
			return err
		}
		s.MaxTokens = *v
	}
	if p.IgnoreEOS != nil {
		s.IgnoreEOS = *p.IgnoreEOS
	}
	s.Seed = p.Seed
	if p.MaxStop > 0 && len(p.Stop) > p.MaxStop {
		return BadRequest(p.name("stop"), "%s takes at most %d sequences, got %d", p.name("stop"), p.MaxStop, len(p.Stop))
	}
	s.Stop = nil
	for _, st := range p.Stop {
		if st != "" {
			s.Stop = append(s.Stop, st)
		}
	}
	return nil
}

// Function is a tool definition in any API: OpenAI's function, Anthropic's tool (input_schema), Ollama's.
type Function struct {
	Name        *string
	Description *string
	Parameters  json.RawMessage // a JSON schema object; empty: no arguments
	Strict      *bool
	// Param is the field that holds it, for errors, e.g. "tools[2].function".
	Param string
}

// Tools validates a request's tool definitions: names OpenAI allows and unique, schemas that are objects,
// no more than OpenAI's bound.
func Tools(fns []Function, param string) ([]engine.Tool, *Error) {
	if len(fns) > MaxTools {
		return nil, BadRequest(param, "at most %d tools, got %d", MaxTools, len(fns))
	}
	var out []engine.Tool
	seen := map[string]bool{}
	for _, f := range fns {
		if f.Name == nil {
			return nil, BadRequest(f.Param+".name", "%s has no name", f.Param)
		}
		name := *f.Name
		if !ValidToolName(name) {
			return nil, BadRequest(f.Param+".name", "%s: the name %q must be 1 to %d letters, digits, _ or -", f.Param, name, MaxToolNameLen)
		}
		if seen[name] {
			return nil, BadRequest(f.Param+".name", "two tools are named %q", name)
		}
		seen[name] = true
		t := engine.Tool{Name: name, Parameters: bytes.TrimSpace(f.Parameters)}
		if f.Description != nil {
			t.Description = *f.Description
		}
		if f.Strict != nil {
			t.Strict = *f.Strict
		}
		if len(t.Parameters) == 0 || string(t.Parameters) == "null" {
			t.Parameters = []byte(`{"type":"object","properties":{}}`)
		} else if t.Parameters[0] != '{' || !json.Valid(t.Parameters) {
			return nil, BadRequest(f.Param+".parameters", "%s's parameters must be a JSON schema object", f.Param)
		}
		out = append(out, t)
	}
	return out, nil
}

// ToolChoice validates a tool choice (mode: "", auto, none, required or function, with the function's name)
// against the request's tools. An empty mode is auto when there are tools.
func ToolChoice(mode, name string, tools []engine.Tool, param string) (engine.ToolChoice, *Error) {
	switch mode {
	case "":
		if len(tools) > 0 {
			mode = engine.ToolChoiceAuto
		}
	case engine.ToolChoiceAuto, engine.ToolChoiceNone, engine.ToolChoiceRequired:
	case engine.ToolChoiceFunction:
		if name == "" {
			return engine.ToolChoice{}, BadRequest(param, "%s names no function", param)
		}
	default:
		return engine.ToolChoice{}, BadRequest(param, "%s must be none, auto, required or a function, got %q", param, mode)
	}
	if mode != "" && mode != engine.ToolChoiceNone && len(tools) == 0 {
		return engine.ToolChoice{}, BadRequest(param, "%s is %q, but the request has no tools", param, mode)
	}
	if mode == engine.ToolChoiceFunction {
		found := false
		for _, t := range tools {
			found = found || t.Name == name
		}
		if !found {
			return engine.ToolChoice{}, BadRequest(param, "%s names %q, which is not among the tools", param, name)
		}
	}
	return engine.ToolChoice{Mode: mode, Name: name}, nil
}

// JSONSchemaFormat validates a JSON-schema response format; name may be empty where the API has none.
func JSONSchemaFormat(name string, schema json.RawMessage, strict bool, param string) (engine.ResponseFormat, *Error) {
	if name != "" && !ValidToolName(name) {
		return engine.ResponseFormat{}, BadRequest(param+".name", "the schema's name must be 1 to %d letters, digits, _ or -", MaxToolNameLen)
	}
	schema = bytes.TrimSpace(schema)
	if len(schema) == 0 || schema[0] != '{' || !json.Valid(schema) {
		return engine.ResponseFormat{}, BadRequest(param+".schema", "the schema must be a JSON object")
	}
	return engine.ResponseFormat{Type: engine.FormatJSONSchema, Name: name, Schema: schema, Strict: strict}, nil
}

// ReasoningEffort maps a reasoning effort (OpenAI's reasoning_effort, Responses' reasoning.effort) to the
// template variables reasoning models read: enable_thinking ("none" turns thinking off where the template
// can) and reasoning_effort, which harmony templates (gpt-oss) write into the system message as "Reasoning:
// low|medium|high" ("none" and "minimal" are "low", the least they know). Variables the client set itself in
// chat_template_kwargs stay as they are.
func ReasoningEffort(effort string, vars map[string]any, param string) (map[string]any, *Error) {
	level := effort
	switch effort {
	case "none", "minimal":
		level = "low"
	case "low", "medium", "high":
	default:
		return vars, BadRequest(param, "%s must be none, minimal, low, medium or high, got %q", param, effort)
	}
	vars = Thinking(effort != "none", vars)
	if _, set := vars["reasoning_effort"]; !set {
		vars["reasoning_effort"] = level
	}
	return vars, nil
}

// Thinking sets enable_thinking unless the client set it itself.
func Thinking(on bool, vars map[string]any) map[string]any {
	if _, set := vars["enable_thinking"]; set {
		return vars
	}
	if vars == nil {
		vars = map[string]any{}
	}
	vars["enable_thinking"] = on
	return vars
}

// CheckCount checks a count the client sent against [least, MaxCount].
func CheckCount(param string, v, least int) *Error {
	if v < least || v > MaxCount {
		return BadRequest(param, "%s must be between %d and %d, got %d", param, least, MaxCount, v)
	}
	return nil
}

// ValidToolName reports whether s is a tool or schema name OpenAI allows: 1 to MaxToolNameLen letters,
// digits, _ or -.
func ValidToolName(s string) bool {
	if s == "" || len(s) > MaxToolNameLen {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// NotUTF8 is the 400 for a body that is not UTF-8. JSON text must be (RFC 8259 §8.1); encoding/json would
// quietly turn the bad bytes into U+FFFD, so the model would see text the client never sent.
func NotUTF8(param string) *Error {
	what := "the request body"
	if param != "" {
		what = param
	}
	return BadRequest(param, "%s is not valid UTF-8; JSON text must be UTF-8", what)
}

// Decode unmarshals a request body that must be a JSON object, turning type errors into 400s that name the
// field.
func Decode(body []byte, v any) *Error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return BadRequest("", "the request body is empty; expected a JSON object")
	}
	if body[0] != '{' {
		return BadRequest("", "the request body must be a JSON object")
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		// encoding/json names a field of an embedded struct with the struct's Go name first (package openai's
		// bodies embed commonBody); the client knows only the JSON key.
		field := strings.TrimPrefix(typeErr.Field, "commonBody.")
		return BadRequest(field, "invalid type for '%s': expected %s, got %s", field, JSONTypeName(typeErr.Type.String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return BadRequest("", "the request body is not valid JSON: %v (at byte %d)", syntaxErr, syntaxErr.Offset)
	default:
		return BadRequest("", "the request body is not valid JSON: %v", err)
	}
}

// JSONTypeName is how a client names the JSON type a Go type decodes from ("an integer" for int64), for
// errors about a field of the wrong type.
func JSONTypeName(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	default:
		return "an object"
	}
}

package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string // "system", "user", "assistant", "tool", ...
	Content string
	// Extra holds further fields of the message as a JSON object, e.g. {"tool_calls": [...]},
	// {"reasoning_content": "..."} or {"tool_call_id": "..."}. Member order is kept, so tojson writes them as
	// the client sent them.
	Extra json.RawMessage
}

// Input is what a template renders.
type Input struct {
	Messages []Message
	// AddGenerationPrompt ends the prompt with the header of an assistant turn, for the model to complete.
	AddGenerationPrompt bool
	// Tools is the JSON array of tool definitions, or nil for none (the template sees tools = none).
	Tools json.RawMessage
	// Vars are further variables, e.g. "enable_thinking": false or "date_string": "26 Jul 2024". Values are
	// strings, numbers, bools, nil, []any, map[string]any or json.RawMessage (which keeps member order). They
	// may override bos_token and eos_token.
	Vars map[string]any
	// Now is the time strftime_now formats; zero means the current time.
	Now time.Time
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	src      string
	tmpl     *jinja.Template
	bosToken string
	eosToken string
}

// ParseError reports a template that does not compile.
type ParseError struct{ Err error }

func (e *ParseError) Error() string { return "chattemplate: parse: " + e.Err.Error() }
func (e *ParseError) Unwrap() error { return e.Err }

// RaiseError is the error a template raises on purpose with raise_exception, e.g. "Conversation roles must
// alternate user/assistant/user/assistant/...". It is the caller's fault, not the template's.
type RaiseError struct{ Message string }

func (e *RaiseError) Error() string { return "chattemplate: template raised: " + e.Message }

// Parse compiles a template. bosToken and eosToken are the values of bos_token and eos_token.
func Parse(src, bosToken, eosToken string) (t *Template, err error) {
	// Templates come with downloaded models: a bug in the engine they trip must not take the server down.
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, &ParseError{fmt.Errorf("template engine panic: %v", r)}
		}
	}()
	tmpl, err := jinja.Compile(rewriteFilters(src))
	if err != nil {
		return nil, &ParseError{err}
	}
	return &Template{src: src, tmpl: tmpl, bosToken: bosToken, eosToken: eosToken}, nil
}

// Source returns the template text.
func (t *Template) Source() string { return t.src }

// BOSToken and EOSToken return the special tokens the template renders as bos_token and eos_token.
func (t *Template) BOSToken() string { return t.bosToken }
func (t *Template) EOSToken() string { return t.eosToken }

// ErrNoTemplate means the model files hold no chat template.
var ErrNoTemplate = errors.New("chattemplate: no chat_template in tokenizer_config.json, chat_template.jinja or chat_template.json")

// configJSON is the part of tokenizer_config.json (or special_tokens_map.json) this package reads.
type configJSON struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
}

// FromConfig compiles the chat_template of a tokenizer_config.json. A list of named templates
// ([{"name": ..., "template": ...}]) yields the one named "default".
func FromConfig(tokenizerConfigJSON []byte) (*Template, error) {
	var c configJSON
	if err := json.Unmarshal(tokenizerConfigJSON, &c); err != nil {
		return nil, fmt.Errorf("chattemplate: tokenizer_config.json: %w", err)
	}
	src, err := pickTemplate(c.ChatTemplate)
	if err != nil {
		return nil, err
	}
	bos, err := tokenString(c.BOSToken)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: bos_token: %w", err)
	}
	eos, err := tokenString(c.EOSToken)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: eos_token: %w", err)
	}
	return Parse(src, bos, eos)
}

// Load compiles the chat template of a Hugging Face model directory. As in transformers, chat_template.jinja
// takes precedence over chat_template.json, which takes precedence over the chat_template of
// tokenizer_config.json; bos_token and eos_token come from tokenizer_config.json, else special_tokens_map.json.
func Load(dir string) (*Template, error) {
	cfgRaw, err := readOptional(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	var cfg, stm configJSON
	if cfgRaw != nil {
		if err := json.Unmarshal(cfgRaw, &cfg); err != nil {
			return nil, fmt.Errorf("chattemplate: tokenizer_config.json: %w", err)
		}
	}
	stmRaw, err := readOptional(filepath.Join(dir, "special_tokens_map.json"))
	if err != nil {
		return nil, err
	}
	if stmRaw != nil {
		if err := json.Unmarshal(stmRaw, &stm); err != nil {
			return nil, fmt.Errorf("chattemplate: special_tokens_map.json: %w", err)
		}
	}
	var src string
	jinjaFile, err := readOptional(filepath.Join(dir, "chat_template.jinja"))
	if err != nil {
		return nil, err
	}
	jsonFile, err := readOptional(filepath.Join(dir, "chat_template.json"))
	if err != nil {
		return nil, err
	}
	switch {
	case jinjaFile != nil:
		src = string(jinjaFile)
	case jsonFile != nil:
		var c configJSON
		if err := json.Unmarshal(jsonFile, &c); err != nil {
			return nil, fmt.Errorf("chattemplate: chat_template.json: %w", err)
		}
		if src, err = pickTemplate(c.ChatTemplate); err != nil {
			return nil, err
		}
	default:
		if src, err = pickTemplate(cfg.ChatTemplate); err != nil {
			return nil, err
		}
	}
	var toks [2]string
	for i, pair := range [2][2]json.RawMessage{{cfg.BOSToken, stm.BOSToken}, {cfg.EOSToken, stm.EOSToken}} {
		for _, raw := range pair {
			s, err := tokenString(raw)
			if err != nil {
				return nil, fmt.Errorf("chattemplate: special token: %w", err)
			}
			if s != "" {
				toks[i] = s
				break
			}
		}
	}
	return Parse(src, toks[0], toks[1])
}

// maxConfigFile bounds the files Load reads.
const maxConfigFile = 16 << 20

func readOptional(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("chattemplate: read %s: %w", path, err)
	}
	if len(b) > maxConfigFile {
		return nil, fmt.Errorf("chattemplate: %s is larger than %d bytes", path, maxConfigFile)
	}
	return b, nil
}

// pickTemplate reads a chat_template value: a string, or a list of named templates of which "default" is used.
func pickTemplate(raw json.RawMessage) (string, error) {
	if isBlank(raw) {
		return "", ErrNoTemplate
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("chattemplate: chat_template must be a string or a list of {name, template}")
	}
	var names []string
	for _, n := range named {
		if n.Name == nil || n.Template == nil {
			return "", errors.New("chattemplate: every named chat_template needs a name and a template")
		}
		if *n.Name == "default" {
			return *n.Template, nil
		}
		names = append(names, *n.Name)
	}
	sort.Strings(names)
	return "", fmt.Errorf("chattemplate: no chat_template named \"default\" (have %s)", strings.Join(names, ", "))
}

// tokenString reads a special token written as a string, an AddedToken object {"content": ...} or null.
func tokenString(raw json.RawMessage) (string, error) {
	if isBlank(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", errors.New("token must be a string or an object with content")
	}
	return o.Content, nil
}

// Render renders the template for a conversation.
func (t *Template) Render(in Input) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chattemplate: render: template engine panic: %v", r)
		}
	}()
	msgs := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		v, err := messageValue(m)
		if err != nil {
			return "", fmt.Errorf("chattemplate: message %d: %w", i, err)
		}
		msgs[i] = v
	}
	tools := jinja.None()
	if !isBlank(in.Tools) {
		v, err := jsonValue(in.Tools)
		if err != nil {
			return "", fmt.Errorf("chattemplate: tools: %w", err)
		}
		if !v.IsList() {
			return "", errors.New("chattemplate: tools must be a JSON array")
		}
		tools = v
	}
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	raised := &RaiseError{}
	vars := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"add_generation_prompt": jinja.NewBool(in.AddGenerationPrompt),
		"tools":                 tools,
		"documents":             jinja.None(),
		"bos_token":             jinja.NewString(t.bosToken),
		"eos_token":             jinja.NewString(t.eosToken),
		"raise_exception": jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			raised.Message = "raise_exception called"
			if len(args) > 0 && args[0].IsString() {
				raised.Message = args[0].AsString()
			}
			return jinja.Undefined(), raised
		}),
		tojsonName: jinja.NewCallable("tojson", tojsonFilter),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 || !args[0].IsString() {
				return jinja.Undefined(), errors.New("strftime_now takes one format string")
			}
			return jinja.NewString(strftime(now, args[0].AsString())), nil
		}),
	}
	for k, v := range in.Vars {
		val, err := goValue(v)
		if err != nil {
			return "", fmt.Errorf("chattemplate: variable %q: %w", k, err)
		}
		vars[k] = val
	}
	out, err = t.tmpl.RenderValues(vars)
	if err != nil {
		if raised.Message != "" {
			return "", raised
		}
		return "", fmt.Errorf("chattemplate: render: %w", err)
	}
	return out, nil
}

package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// Tool is a function the request offers the model.
type Tool struct {
	Name string
	// Parameters is the JSON Schema of the arguments object, as the request's function.parameters carries it;
	// nil accepts any object.
	Parameters json.RawMessage
}

// ParseTools reads the "tools" array of an OpenAI chat request: [{"type": "function", "function": {"name": ...,
// "parameters": {...}}}, ...]. Entries of other types are skipped (no other type is defined for chat
// completions today).
func ParseTools(raw json.RawMessage) ([]Tool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var entries []struct {
		Type     string `json:"type"`
		Function *struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("toolcall: tools: %w", err)
	}
	var tools []Tool
	for i, e := range entries {
		if e.Type != "" && e.Type != "function" {
			continue
		}
		if e.Function == nil {
			return nil, fmt.Errorf("toolcall: tools[%d]: no function", i)
		}
		tools = append(tools, Tool{Name: e.Function.Name, Parameters: e.Function.Parameters})
	}
	return tools, nil
}

// compiledTool is a Tool with its schema read once.
type compiledTool struct {
	name   string
	params *schema
}

func compileTools(tools []Tool) (map[string]*compiledTool, error) {
	m := make(map[string]*compiledTool, len(tools))
	for i, t := range tools {
		if t.Name == "" {
			return nil, fmt.Errorf("toolcall: tools[%d]: empty name", i)
		}
		if _, dup := m[t.Name]; dup {
			return nil, fmt.Errorf("toolcall: tools[%d]: %q is defined twice", i, t.Name)
		}
		s, err := compileSchema(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("toolcall: tool %q: parameters: %w", t.Name, err)
		}
		m[t.Name] = &compiledTool{name: t.Name, params: s}
	}
	return m, nil
}

// check checks that args is one JSON object that the tool's schema admits; it returns what is wrong and the
// error kind, or a nil kind.
func (t *compiledTool) check(args string) (detail string, kind error) {
	v, err := decodeValue([]byte(args))
	if err != nil {
		return "arguments are not valid JSON: " + err.Error(), ErrMalformed
	}
	if _, ok := v.(map[string]any); !ok {
		return "arguments must be a JSON object, not " + typeOf(v), ErrInvalidArguments
	}
	if err := t.params.validate(v, "$"); err != nil {
		return err.Error(), ErrInvalidArguments
	}
	return "", nil
}

const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// NewIDs returns a generator of call ids drawn from a seeded generator, so that equal seeds give equal ids
// (tests, replays). For CallsMistral the ids are 9 letters and digits, the only shape Mistral's chat templates
// accept when the call comes back in the conversation; for the others "call_" and 24 letters and digits, as
// OpenAI's look.
func NewIDs(f CallFormat, seed uint64) func() string {
	r := rand.New(rand.NewPCG(seed, 0x746f6f6c63616c6c))
	n, prefix := 24, "call_"
	if f == CallsMistral {
		n, prefix = 9, ""
	}
	return func() string {
		b := make([]byte, len(prefix)+n)
		copy(b, prefix)
		for i := len(prefix); i < len(b); i++ {
			b[i] = idAlphabet[r.IntN(len(idAlphabet))]
		}
		return string(b)
	}
}

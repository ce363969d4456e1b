package echo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/duet-ai/duet/sdk/engine"
)

// script is what one choice of a request says: the echo engine's stand-in for a model's output.
type script struct {
	reasoning []string          // words of thinking, when the request enables it
	reply     []string          // words of content; repeated when max_tokens asks for more
	finite    bool              // the reply is a whole (JSON) and is not repeated
	calls     []engine.ToolCall // tool calls instead of content
	pieces    []engine.ToolCallDelta
}

// The echo engine's rules, which tests and examples can count on:
//
//   - A chat answers with its last user message; a last message from a tool answers with what the tool said,
//     word for word at any temperature.
//   - A line "call: NAME {json}" in the last user message calls tool NAME with those arguments (several such
//     lines call several tools when parallel tool calls are allowed). tool_choice "required" calls the named
//     tool or else the first one; a forced function is called with the message as arguments when it is a JSON
//     object, else with made-up arguments that match its parameters. tool_choice "none" never calls.
//   - response_format json_object answers {"echo": message}; json_schema a value made up to match the schema.
//   - enable_thinking (chat_template_kwargs, or any reasoning_effort but "none") thinks "about: message"
//     before it answers.
func makeScript(req engine.GenerateRequest, reply []string) (script, error) {
	var s script
	s.reply = reply
	last, lastRole := lastMessage(req.Messages)
	if lastRole == "tool" {
		// What the tool said, as it said it, at any temperature: agents sample at their default temperature,
		// and a test of their tool loop reads the tool's output back in the final answer.
		s.reply, s.finite = split(last), true
	}
	if v, _ := req.TemplateVars["enable_thinking"].(bool); v && len(req.Messages) > 0 {
		s.reasoning = split("about: " + strings.TrimSpace(last))
	}
	calls, err := toolCalls(req, last, lastRole)
	if err != nil {
		return s, err
	}
	if len(calls) > 0 {
		s.calls = calls
		for i, c := range calls {
			s.pieces = append(s.pieces, engine.ToolCallDelta{Index: i, ID: c.ID, Name: c.Name})
			for _, p := range argumentPieces(c.Arguments) {
				s.pieces = append(s.pieces, engine.ToolCallDelta{Index: i, Arguments: p})
			}
		}
		return s, nil
	}
	switch req.ResponseFormat.Type {
	case engine.FormatJSONObject:
		b, _ := json.Marshal(map[string]string{"echo": strings.TrimSpace(last)})
		s.reply, s.finite = split(string(b)), true
	case engine.FormatJSONSchema:
		b, err := exemplar(req.ResponseFormat.Schema, last)
		if err != nil {
			return s, engine.InvalidParam("response_format", "the echo engine cannot answer this schema: %v", err)
		}
		s.reply, s.finite = split(string(b)), true
	}
	return s, nil
}

// length is how many tokens the script has (the reply counted once).
func (s *script) length() int {
	if len(s.calls) > 0 {
		return len(s.reasoning) + len(s.pieces)
	}
	return len(s.reasoning) + len(s.reply)
}

func lastMessage(ms []engine.Message) (string, string) {
	for i := len(ms) - 1; i >= 0; i-- {
		switch ms[i].Role {
		case "user", "tool":
			return ms[i].Content, ms[i].Role
		}
	}
	return "", ""
}

func toolCalls(req engine.GenerateRequest, last, lastRole string) ([]engine.ToolCall, error) {
	if len(req.Tools) == 0 || req.ToolChoice.Mode == engine.ToolChoiceNone {
		return nil, nil
	}
	var calls []engine.ToolCall
	if lastRole == "user" {
		for _, line := range strings.Split(last, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "call:")
			if !ok {
				continue
			}
			name, args, _ := strings.Cut(strings.TrimSpace(rest), " ")
			if tool := findTool(req.Tools, name); tool != nil {
				a, err := arguments(tool, args)
				if err != nil {
					return nil, err
				}
				calls = append(calls, engine.ToolCall{Name: name, Arguments: a})
			}
		}
	}
	switch req.ToolChoice.Mode {
	case engine.ToolChoiceFunction:
		tool := findTool(req.Tools, req.ToolChoice.Name)
		if tool == nil {
			return nil, engine.InvalidParam("tool_choice", "no tool named %q", req.ToolChoice.Name)
		}
		a, err := arguments(tool, last)
		if err != nil {
			return nil, err
		}
		calls = []engine.ToolCall{{Name: tool.Name, Arguments: a}}
	case engine.ToolChoiceRequired:
		if len(calls) == 0 {
			a, err := arguments(&req.Tools[0], last)
			if err != nil {
				return nil, err
			}
			calls = []engine.ToolCall{{Name: req.Tools[0].Name, Arguments: a}}
		}
	}
	if !req.ParallelToolCalls && len(calls) > 1 {
		calls = calls[:1]
	}
	for i := range calls {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s", req.RequestID, i, calls[i].Name, calls[i].Arguments)
		calls[i].ID = fmt.Sprintf("call_%016x", h.Sum64())
	}
	return calls, nil
}

func findTool(tools []engine.Tool, name string) *engine.Tool {
	for i := range tools {
		if tools[i].Name == name {
			return &tools[i]
		}
	}
	return nil
}

// arguments are text when it is a JSON object, else made up from the tool's parameters.
func arguments(tool *engine.Tool, text string) (string, error) {
	var obj map[string]json.RawMessage
	if t := strings.TrimSpace(text); json.Unmarshal([]byte(t), &obj) == nil {
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(t)); err == nil {
			return b.String(), nil
		}
	}
	params := tool.Parameters
	if len(params) == 0 {
		params = []byte(`{"type":"object"}`)
	}
	v, err := exemplar(params, strings.TrimSpace(text))
	if err != nil {
		return "", engine.InvalidParam("tools", "the echo engine cannot make up arguments for %s: %v", tool.Name, err)
	}
	return string(v), nil
}

// argumentPieces cuts arguments into the pieces they stream in: about 8 bytes each, as a model's tokens
// would.
func argumentPieces(args string) []string {
	var out []string
	for len(args) > 8 {
		cut := 8
		for cut < len(args) && args[cut]&0xc0 == 0x80 { // never inside a UTF-8 character
			cut++
		}
		out = append(out, args[:cut])
		args = args[cut:]
	}
	if args != "" {
		out = append(out, args)
	}
	return out
}
